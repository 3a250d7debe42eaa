// Twinkle dashboard. No inline scripts (the pages' Content-Security-Policy allows only this server's files).
document.addEventListener("change", function (e) {
  if (e.target && e.target.matches && e.target.matches("[data-submit-on-change]")) e.target.form.submit();
});

// Twinkle dashboard: metric curves with uPlot, fed by the page's SSE stream (htmx's SSE extension) or, on a
// run's page, by the metrics API. #chart's data-points counts the points drawn (tests watch it grow).
(function () {
  const chart = document.getElementById("chart");
  if (!chart) return;
  let rows = [], plot = null, timer = null;
  const palette = ["#3867d6", "#eb3b5a", "#20bf6b", "#fa8231", "#8854d0", "#0fb9b1", "#4b6584"];

  function draw() {
    timer = null;
    const keys = [];
    for (const r of rows) for (const k in r)
      if (k !== "step" && k !== "epoch" && typeof r[k] === "number" && !keys.includes(k)) keys.push(k);
    const sorted = rows.filter(r => typeof r.step === "number").sort((a, b) => a.step - b.step);
    const data = [sorted.map(r => r.step), ...keys.map(k => sorted.map(r => (typeof r[k] === "number" ? r[k] : null)))];
    const opts = {
      width: Math.max(320, chart.clientWidth || 800), height: 300,
      scales: { x: { time: false } },
      series: [{ label: "step" }, ...keys.map((k, i) => ({ label: k, stroke: palette[i % palette.length], spanGaps: true,
        points: { show: sorted.length < 60 } }))],
      axes: [{ label: "step" }, {}],
    };
    if (plot) plot.destroy();
    plot = new uPlot(opts, data, chart);
    chart.dataset.points = String(sorted.length);
  }
  function later() { if (!timer) timer = setTimeout(draw, 250); }

  document.body.addEventListener("htmx:sseMessage", function (e) {
    const ev = e.detail;
    if (ev.type === "metric") { rows.push(JSON.parse(ev.data)); later(); }
    else if (ev.type === "reset") { rows = []; later(); }
    else if (ev.type === "state" && !ev.data.includes(">queued<")) {
      const pending = document.getElementById("pending"); if (pending) pending.remove();
    }
    else if (ev.type === "log") { const log = document.getElementById("log"); if (log) log.scrollTop = log.scrollHeight; }
  });
  if (!document.getElementById("metric-sink")) {  // a run's page: the rows at once
    fetch(chart.dataset.metricsUrl, { credentials: "same-origin" }).then(r => r.json()).then(d => { rows = d.rows; draw(); });
  }
})();
