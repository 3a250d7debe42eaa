"""``twinkle serve`` under load: API latency with 50 concurrent clients, and how long a submitted job waits
before a worker starts it.

Each client sends its next request as soon as the last is answered (a closed loop: the latency includes the
wait behind the other 49, so p50 ≈ 50 / requests per second), over keep-alive-less HTTP as the stdlib client
does; p50/p99 per endpoint and overall, and requests per second.

1. **API**: a server with no workers; 50 clients × 20 requests, a mix of ``GET /jobs`` (list),
   ``GET /jobs/{id}``, ``GET /server`` and ``POST /jobs`` (a submit is checked as a Trainer would check it).
2. **Reads**: the same server and clients, reads only — ``GET /jobs?limit=50`` and ``GET /jobs/{id}`` — on a
   queue of 200 jobs (target: p99 < 100 ms).
3. **Reads while two jobs train**: a server with two workers, each training a job (the machine's two cores
   busy), and the same reads (target: p99 < 250 ms).
4. **Submit to start**: a server with one worker and its default poll interval (1 s); 10 small jobs submitted
   one after another once the previous has started; the time from the submit's answer to the job's
   ``running`` transition (the claim), and to its training process being up.

Writes ``bench/results/service.json``.

    python bench/service.py
"""

from __future__ import annotations

import json
import os
import platform
import shutil
import socket
import subprocess
import sys
import tempfile
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

os.environ.setdefault("OMP_NUM_THREADS", "1")
CLIENTS, PER_CLIENT = 50, 20


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def _start(home: Path, port: int, workers: int, log: Path) -> subprocess.Popen[bytes]:
    from twinkle_core.client import Client

    with open(log, "ab") as out:
        process = subprocess.Popen([sys.executable, "-m", "twinkle_core", "serve", "--home", str(home), "--port",
                                    str(port), "--workers", str(workers), "--max-queued-per-user", "100000"], stdout=out, stderr=subprocess.STDOUT,
                                   env={**os.environ, "TWINKLE_HOME": str(home)}, start_new_session=True)
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:
        try:
            Client(f"http://127.0.0.1:{port}").request("GET", "/health")
            return process
        except Exception:  # not up yet
            time.sleep(0.2)
    raise SystemExit(f"the server did not start; see {log}")


def _stop(process: subprocess.Popen[bytes]) -> None:
    import signal

    os.killpg(process.pid, signal.SIGTERM)
    process.wait(timeout=120)


def _percentiles(values: list[float]) -> dict[str, float]:
    import numpy as np

    array = np.array(values) * 1000
    return {"n": len(values), "p50_ms": round(float(np.percentile(array, 50)), 2),
            "p99_ms": round(float(np.percentile(array, 99)), 2), "max_ms": round(float(array.max()), 2)}


def _load(url: str, token: str, kinds: tuple[str, ...], job_id: str, data: str) -> dict:
    """50 clients × 20 requests, each client cycling through ``kinds`` from its own starting point."""
    from twinkle_core.client import Client

    timings: dict[str, list[float]] = {kind: [] for kind in dict.fromkeys(kinds)}
    requests = {"GET /jobs": ("GET", "/jobs?limit=50", None), "GET /jobs/{id}": ("GET", f"/jobs/{job_id}", None),
                "GET /server": ("GET", "/server", None),
                "POST /jobs": ("POST", "/jobs", {"algorithm": "tabular-mlp", "data": data,
                                                 "hyperparams": {"max_epochs": 1}})}

    def client(index: int) -> None:
        me = Client(url, token, timeout=120)
        for n in range(PER_CLIENT):
            kind = kinds[(index + n) % len(kinds)]
            start = time.perf_counter()
            me.request(*requests[kind])
            timings[kind].append(time.perf_counter() - start)

    start = time.perf_counter()
    with ThreadPoolExecutor(max_workers=CLIENTS) as pool:
        list(pool.map(client, range(CLIENTS)))
    wall = time.perf_counter() - start
    every = [t for values in timings.values() for t in values]
    return {"clients": CLIENTS, "requests": len(every), "wall_seconds": round(wall, 2),
            "requests_per_second": round(len(every) / wall, 1), "all": _percentiles(every),
            **{kind: _percentiles(values) for kind, values in timings.items()}}


READS = ("GET /jobs", "GET /jobs/{id}")


def api_latency(home: Path, data: str, token: str) -> dict:
    """Phases 1 and 2: 50 concurrent clients against a server with no workers — the mix, then reads only."""
    from twinkle_core.client import Client

    port = _free_port()
    server = _start(home, port, 0, home / "bench-api.log")
    url = f"http://127.0.0.1:{port}"
    seed = Client(url, token).submit("tabular-mlp", data, {"max_epochs": 1})
    try:
        mixed = _load(url, token, ("GET /jobs", "GET /jobs/{id}", "GET /server", "GET /jobs/{id}", "POST /jobs"),
                      seed.id, data)
        reads = _load(url, token, READS, seed.id, data)
    finally:
        _stop(server)
    return {"api": mixed, "reads": reads}


def reads_while_training(home: Path, data: str, token: str) -> dict:
    """Phase 3: two workers each training a job while 50 clients read."""
    from twinkle_core.client import Client

    port = _free_port()
    server = _start(home, port, 2, home / "bench-training.log")
    client = Client(f"http://127.0.0.1:{port}", token)
    try:
        jobs = [client.submit("tabular-mlp", data, {"max_epochs": 100000, "progress_bar": False}, max_restarts=0)
                for _ in range(2)]
        for _ in range(200):  # 200 more queued behind them, as in phase 2
            client.submit("tabular-mlp", data, {"max_epochs": 1})
        for job in jobs:  # both training: their metric rows are coming in
            while not client.request("GET", f"/jobs/{job.id}/metrics")["rows"]:
                time.sleep(0.5)
        reads = _load(client.url, token, READS, jobs[0].id, data)
        still = [client.request("GET", f"/jobs/{job.id}")["state"] for job in jobs]
    finally:
        _stop(server)
    if still != ["running", "running"]:
        raise SystemExit(f"the two jobs did not train throughout the reads: {still}")
    return {"jobs_training": 2, **reads}


def submit_to_start(home: Path, data: str, token: str, jobs: int = 10) -> dict:
    """Phase 2: one worker, default poll; each job submitted once the previous one has started."""
    from twinkle_core.client import Client

    port = _free_port()
    server = _start(home, port, 1, home / "bench-start.log")
    client = Client(f"http://127.0.0.1:{port}", token)
    claimed, process_up = [], []
    for _ in range(jobs):
        job = client.submit("tabular-mlp", data, {"max_epochs": 1, "progress_bar": False}, max_restarts=0)
        answered = time.time()
        while (view := job.refresh())["state"] == "queued":
            time.sleep(0.02)
        running = next(t["time"] for t in view["transitions"] if t["state"] == "running")
        claimed.append(max(0.0, running - view["created"]))
        log = home / "jobs" / job.id / "log.txt"
        while not (log.exists() and "attempt 1" in log.read_text(errors="replace")):
            time.sleep(0.02)
        process_up.append(max(0.0, log.stat().st_mtime - answered))
        job.wait(timeout=300, poll=0.2)
    _stop(server)
    return {"jobs": jobs, "poll_seconds": 1.0, "submit_to_claim": _percentiles(claimed),
            "submit_to_process_started": _percentiles(process_up)}


def main() -> None:
    from sklearn.datasets import load_breast_cancer

    from twinkle_core.serve import Accounts, ServerConfig

    root = Path(tempfile.mkdtemp(prefix="twinkle-bench-service-"))
    try:
        phases = {}
        for phase, measure in (("api", api_latency), ("reads_while_training", reads_while_training),
                               ("start", submit_to_start)):  # a store of its own each
            home = root / phase
            (home / "datasets").mkdir(parents=True)
            data = str(home / "datasets" / "cancer.csv")
            load_breast_cancer(as_frame=True).frame.to_csv(data, index=False)
            token = Accounts(ServerConfig(home=str(home)).db_path).add_user("bench")
            found = measure(home, data, token)
            phases.update(found if phase == "api" else {phase: found})
        results = {"machine": {"cpus": os.cpu_count(), "python": platform.python_version()}, **phases}
    finally:
        shutil.rmtree(root, ignore_errors=True)
    out = Path(__file__).parent / "results" / "service.json"
    out.write_text(json.dumps(results, indent=2) + "\n")
    print(json.dumps(results, indent=2))


if __name__ == "__main__":
    main()
