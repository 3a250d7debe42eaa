"""What reporting to an experiment tracker costs a fit (issue 55: a fit reporting to MLflow within 3 % of one that
does not).

The fit of ``fit_speed.py`` (ResNet-18 on scikit-learn's digits as 32-px PNGs, batch 32, the planner's defaults,
``--epochs`` epochs), twice per round in an order that alternates: ``none`` (no tracker) and ``mlflow``
(``report_to=["mlflow"]`` to an ``mlflow server`` on 127.0.0.1 with a SQLite store, started by the bench and running
through every round). Each fit runs in a fresh process (``fit_speed.in_child``) after the same warm-up (the imports
every case needs, oneDNN's kernels), after one untimed fit that stores the planner's speed probe for all of them.
Making the ``Trainer`` is timed apart (``trainer_seconds``): with ``report_to`` it imports the tracker's library
there — a second for MLflow, not warmed —, as HF Trainer's callbacks do when it is made. Timed: ``Trainer.fit``
whole (reading the data, planning, training, validating, checkpoints, and the reporter sending the run's
parameters, metric rows and files and ending the MLflow run), wall and CPU seconds of the process (every thread:
the reporter's included). The ratio is ``mlflow``'s seconds over ``none``'s per round, then the median and spread;
the run's record says what MLflow received (calls sent, none unsent). Writes ``bench/results/trackers.json``.

    python bench/trackers.py [--rounds 5] [--epochs 3]
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import signal
import socket
import statistics
import subprocess
import sys
import tempfile
import time
import urllib.request
from pathlib import Path
from typing import Any

from fit_speed import BATCH, LR, in_child, summary, timed, warm_up  # bench/ is the script's folder: on sys.path

RESULTS = Path(__file__).resolve().parent / "results"


def child(case: str, folder: Path, epochs: int, home: Path) -> None:
    """One case in this process: warm up, make the trainer (timed apart: ``report_to`` imports the tracker's
    library here, as HF Trainer's callbacks do), time its fit; print the figures as one JSON line."""
    import torch

    from twinkle_core import RunStore, Trainer
    from twinkle_core.planning.hardware import cpu_budget

    torch.set_num_threads(cpu_budget()[0])
    warm_up()
    started = time.perf_counter()
    trainer = Trainer("resnet18", task="image_classification", home=str(home), verbose=False,
                      hyperparams={"max_epochs": epochs, "lr": LR, "batch_size": BATCH, "progress_bar": False,
                                   **({"report_to": [case]} if case != "none" else {})})
    made = time.perf_counter() - started
    box: dict[str, Any] = {}

    def fit() -> dict[str, Any]:
        box["result"] = trainer.fit(data=str(folder))
        return {}

    figures = timed(fit)
    result = box["result"]
    print(json.dumps({**figures, "trainer_seconds": round(made, 3), "run": result.run_uri.removeprefix("twinkle://"),
                      "val_accuracy": round(float(result.metrics.get("val_accuracy", float("nan"))), 4),
                      "trackers": RunStore(str(home)).get(result.run_uri).measured.get("trackers")}), flush=True)


def replay(run_dir: Path) -> None:
    """What the reporter alone costs: a finished run's parameters, tags, every metric row and files sent to MLflow
    again through a ``Reporter`` (no training beside it), in this process; prints its CPU and wall seconds."""
    import pandas as pd

    from twinkle_core.tracking import Reporter, TrackedRun, tracker_class

    cpu, wall = time.process_time(), time.perf_counter()
    tracker = tracker_class("mlflow")()  # the library's import: paid when the Trainer is made, measured apart
    imported = time.process_time() - cpu
    cpu, wall = time.process_time(), time.perf_counter()
    plan = json.loads((run_dir / "plan.json").read_text())
    reporter = Reporter({"mlflow": tracker}, TrackedRun("twinkle://bench/replay/run1", "bench/replay/run1", "bench",
                                                        "replay", str(run_dir / "replay")))
    reporter.log_params({f"plan.{d['name']}": d["value"] for d in plan.get("decisions", [])})
    reporter.set_tags({"twinkle.uri": "twinkle://bench/replay/run1"})
    table = pd.read_csv(run_dir / "logs" / "metrics.csv")
    for _, row in table.iterrows():
        reporter.log_metrics({k: v for k, v in row.items() if k != "step"}, int(row["step"]))
    for name in ("plan.json", "curves.png", "logs/metrics.csv"):
        reporter.log_artifact(str(run_dir / name), "logs" if "/" in name else "")
    summary = reporter.close("finished")
    print(json.dumps({"cpu_seconds": round(time.process_time() - cpu, 3), "wall_seconds":
                      round(time.perf_counter() - wall, 3), "import_cpu_seconds": round(imported, 3),
                      "rows": len(table), "sent": summary["mlflow"]["sent"], "unsent": summary["mlflow"]["unsent"]}),
          flush=True)


def start_server(folder: Path) -> tuple[subprocess.Popen[bytes], str]:
    """``mlflow server`` on a free port of 127.0.0.1 (SQLite store in ``folder``); its URI once it answers."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    folder.mkdir(parents=True, exist_ok=True)
    process = subprocess.Popen([sys.executable, "-m", "mlflow", "server", "--host", "127.0.0.1", "--port", str(port),
                                "--workers", "1", "--backend-store-uri", f"sqlite:///{folder / 'mlflow.db'}",
                                "--artifacts-destination", str(folder / "artifacts")],
                               stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, start_new_session=True)
    uri = f"http://127.0.0.1:{port}"
    for _ in range(400):
        try:
            with urllib.request.urlopen(f"{uri}/health", timeout=2):
                return process, uri
        except OSError:
            time.sleep(0.3)
    os.killpg(process.pid, signal.SIGTERM)
    raise RuntimeError("mlflow server did not start")


def main(argv: list[str] | None = None) -> int:
    """Run the rounds and write the figures."""
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--epochs", type=int, default=3)
    parser.add_argument("--child", nargs=3, metavar=("CASE", "FOLDER", "HOME"), help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.child:
        if args.child[0] == "replay":
            replay(Path(args.child[1]))
        else:
            child(args.child[0], Path(args.child[1]), args.epochs, Path(args.child[2]))
        return 0
    from twinkle_vision.samples import write_digits

    cases = ["none", "mlflow"]
    with tempfile.TemporaryDirectory() as tmp:
        folder = write_digits(Path(tmp) / "digits")
        home = Path(tmp) / "home"
        server, uri = start_server(Path(tmp) / "mlflow")
        os.environ.update(MLFLOW_TRACKING_URI=uri, MLFLOW_EXPERIMENT_NAME="bench-trackers")
        rounds: list[dict[str, Any]] = []
        try:  # an untimed fit first: its speed probe is stored, and every timed fit reads it alike
            in_child("trackers.py", "none", str(folder), str(home), "--epochs", "1")
            for index in range(args.rounds):
                order = cases if index % 2 == 0 else cases[::-1]
                measured = {case: in_child("trackers.py", case, str(folder), str(home), "--epochs", str(args.epochs))
                            for case in order}
                print(f"round {index + 1}: " + ", ".join(f"{c} {m['wall_seconds']} s wall {m['cpu_seconds']} s CPU"
                                                         for c, m in measured.items()), file=sys.stderr, flush=True)
                rounds.append(measured)
            from twinkle_core import RunStore

            last = RunStore(str(home)).get(f"twinkle://{rounds[-1]['mlflow']['run']}")
            replays = [in_child("trackers.py", "replay", RunStore(str(home)).run_dir(last.id), "-")
                       for _ in range(args.rounds)]
        finally:
            os.killpg(server.pid, signal.SIGTERM)
            server.wait(30)
    figures = {
        "what": "a default fit reporting to MLflow (a local mlflow server) over the same fit reporting nowhere: "
                "seconds ratio, <= 1.03 is the goal",
        "epochs": args.epochs, "rounds": args.rounds,
        "ratio_mlflow_over_none": {clock: summary([r["mlflow"][clock] / r["none"][clock] for r in rounds])
                                   for clock in ("wall_seconds", "cpu_seconds")},
        "seconds": {case: {clock: summary([r[case][clock] for r in rounds])
                           for clock in ("wall_seconds", "cpu_seconds", "trainer_seconds")} for case in cases},
        "mlflow_received": [r["mlflow"]["trackers"] for r in rounds],
        "reporter_alone": {"what": "the last mlflow round's parameters, tags, metric rows and files sent again "
                                   "through a Reporter with no training beside it (CPU of the whole process)",
                           "cpu_seconds": summary([r["cpu_seconds"] for r in replays]),
                           "wall_seconds": summary([r["wall_seconds"] for r in replays]),
                           "share_of_a_fit_cpu": summary([r["cpu_seconds"] / statistics.median(
                               [x["none"]["cpu_seconds"] for x in rounds]) for r in replays]),
                           "import_cpu_seconds": summary([r["import_cpu_seconds"] for r in replays]),
                           "rows": replays[0]["rows"], "sent": replays[0]["sent"]},
        "machine": f"{platform.machine()} {os.cpu_count()} cores",
        "rounds_measured": rounds,
    }
    (RESULTS / "trackers.json").write_text(json.dumps(figures, indent=2) + "\n")
    print(json.dumps(figures["ratio_mlflow_over_none"]))
    return 0


if __name__ == "__main__":
    sys.exit(main())
