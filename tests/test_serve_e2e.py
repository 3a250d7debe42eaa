"""End to end: ``twinkle serve`` on a loopback port with 2 workers takes 20 jobs from 2 users at once; a worker is
SIGKILLed mid-job and the server is restarted mid-queue. Every job ends ``finished`` exactly once, in one run of
its own; the killed job's final weights equal those of jobs that were never interrupted."""

from __future__ import annotations

import json
import os
import signal
import sqlite3
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pandas as pd
import pytest

from twinkle_core import RunStore
from twinkle_core.client import Client

HP = {"max_epochs": 4, "batch_size": 16, "checkpoint_every_n_steps": 4, "seed": 3, "progress_bar": False}
"""Each job: 4 epochs of 29 steps, a checkpoint every 4 (a few seconds of training after its process starts): long
enough to be killed and stopped mid-training, which is all the test needs of it."""
pytestmark = [pytest.mark.slow, pytest.mark.processes]  # a server and its worker pool


def db_rows(home: Path, sql: str, *args) -> list[sqlite3.Row]:  # noqa: ANN002
    conn = sqlite3.connect(home / "serve" / "service.sqlite", timeout=30)
    conn.row_factory = sqlite3.Row
    try:
        return conn.execute(sql, args).fetchall()
    finally:
        conn.close()


def alive(pid: int) -> bool:
    """Whether process ``pid`` runs (a zombie waiting for its parent to reap it does not)."""
    try:
        with open(f"/proc/{pid}/stat", encoding="utf-8") as handle:
            return handle.read().rsplit(")", 1)[1].split()[0] != "Z"
    except (FileNotFoundError, IndexError):
        return False


def step_of(home: Path, run: str | None) -> int:
    """The global step of the run's last checkpoint (-1 when none)."""
    if not run:
        return -1
    import torch

    path = Path(RunStore(str(home)).path(run.removeprefix("twinkle://"), "checkpoints", "last.ckpt"))
    try:
        return int(torch.load(path, weights_only=True, map_location="cpu")["global_step"])
    except Exception:  # not written yet, or being renamed into place
        return -1


def test_twenty_jobs_from_two_users_survive_a_killed_worker_and_a_server_restart(twinkle_service, cancer_csv: Path) -> None:
    home, data, tokens = twinkle_service.home(cancer_csv, "alice", "bob")
    port, log, wait_for = twinkle_service.free_port(), twinkle_service.log, twinkle_service.wait_for
    url = f"http://127.0.0.1:{port}"
    # a lease far longer than the server takes to see a worker die: the killed worker's job must come back through
    # the death path, not the lease
    options = ("--workers", "2", "--lease", "60", "--grace", "30", "--poll", "0.2", "--api-processes", "2")
    server = twinkle_service.start(home, port, *options)  # the fixture kills what is left if the test fails

    def api_processes() -> set[int]:  # the processes that answer, seen from 40 requests at once
        with ThreadPoolExecutor(max_workers=20) as pool:
            return set(pool.map(lambda _: Client(url, tokens["alice"]).request("GET", "/server")["answered_by"],
                                range(40)))

    answering = wait_for(lambda: found if len(found := api_processes()) == 2 else None, 60, "two API processes")
    assert server.pid in answering  # the server itself and one copy forked from it

    import socket  # a body longer than its Content-Length: the rest is parsed as a next request, which is broken

    with socket.create_connection(("127.0.0.1", port), timeout=30) as raw:
        raw.sendall(b"POST /api/v1/jobs HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"
                    b"Content-Length: 2\r\n\r\n{}garbage that is not a request line\r\n\r\n")
        answer = b""
        while chunk := raw.recv(65536):
            answer += chunk
    last = answer.split(b"HTTP/1.1 ")[-1]  # the answer to the broken part: JSON, as every error (issue 53)
    assert last.startswith(b"400") and b"content-type: application/json" in last.lower()
    assert "framing is broken" in json.loads(last.split(b"\r\n\r\n", 1)[1])["detail"]

    def submit(n: int) -> str:
        user = "alice" if n % 2 else "bob"
        return Client(url, tokens[user]).submit("tabular-mlp", data, HP, project="e2e").id

    with ThreadPoolExecutor(max_workers=10) as pool:  # 20 submissions at once, from both users
        ids = list(pool.map(submit, range(20)))
    assert len(set(ids)) == 20

    # SIGKILL the worker of a job that has a mid-training checkpoint, in its first half (116 steps): a job trains
    # in a few seconds, and one about to end could finish between this look and the kill
    def running_with_checkpoint():  # noqa: ANN202
        for row in db_rows(home, "SELECT id, worker, run FROM jobs WHERE state = 'running'"):
            if 8 <= step_of(home, row["run"]) <= 58:
                return row
        return None

    victim = wait_for(running_with_checkpoint, 300, "a running job with a checkpoint")
    worker_pid = db_rows(home, "SELECT pid FROM workers WHERE id = ?", victim["worker"])[0]["pid"]
    training_pid = db_rows(home, "SELECT pid FROM jobs WHERE id = ?", victim["id"])[0]["pid"]
    killed_at = time.time()
    os.kill(worker_pid, signal.SIGKILL)
    # its training process (forked from the worker's template process) goes with it: nothing trains the run twice
    wait_for(lambda: not alive(training_pid), 60, "the killed worker's training process to end")
    wait_for(lambda: db_rows(home, "SELECT restarts FROM jobs WHERE id = ?", victim["id"])[0]["restarts"] >= 1
             and db_rows(home, "SELECT state FROM jobs WHERE id = ?", victim["id"])[0]["state"] != "queued", 120,
             "the killed worker's job to be taken by another worker")

    # restart the server while jobs are still waiting (and two are running)
    wait_for(lambda: len(db_rows(home, "SELECT id FROM jobs WHERE state = 'running'")) == 2, 120, "two running jobs")
    queued_before = len(db_rows(home, "SELECT id FROM jobs WHERE state = 'queued'"))
    assert queued_before > 0, "the queue should not be empty before the restart"
    server.send_signal(signal.SIGTERM)
    assert server.wait(timeout=180) == 0, log.read_text()[-3000:]
    assert not any(alive(pid) for pid in answering)  # the API copy stopped with it
    states = {r["state"] for r in db_rows(home, "SELECT state FROM jobs")}
    assert "running" not in states  # each running job went back to the queue at a checkpoint
    server = twinkle_service.start(home, port, *options)

    final = wait_for(lambda: all(r["state"] in ("finished", "failed", "cancelled", "stopped")
                                 for r in db_rows(home, "SELECT state FROM jobs")), 900, "every job to end")
    assert final

    jobs = {r["id"]: r for r in db_rows(home, "SELECT * FROM jobs")}
    assert {j["state"] for j in jobs.values()} == {"finished"}, log.read_text()[-3000:]
    transitions = {job: [r["state"] for r in db_rows(home, "SELECT state FROM transitions WHERE job = ? ORDER BY seq", job)]
                   for job in ids}
    assert all(t.count("finished") == 1 and t[-1] == "finished" for t in transitions.values())
    runs = RunStore(str(home)).list(project="e2e")
    assert len(runs) == 20 and {r.status for r in runs} == {"finished"}  # one run per job: none lost or doubled
    assert len({j["run"] for j in jobs.values()}) == 20
    assert {r.user for r in runs} == {"alice", "bob"}
    for job_id in ids:
        assert jobs[job_id]["run"].startswith(f"twinkle://{jobs[job_id]['user']}/e2e/")

    digest = {job: json.loads((home / "jobs" / job / "rank-0.json").read_text())["weights_md5"] for job in ids}
    untouched = [j for j, t in transitions.items() if t == ["queued", "running", "finished"]]
    restarted = [j for j, t in transitions.items() if t.count("running") > 1]
    assert untouched and victim["id"] in restarted
    assert digest[victim["id"]] == digest[untouched[0]]  # the killed job ends as if never killed
    assert len(set(digest.values())) == 1  # so does every job the server restart stopped at a checkpoint
    reasons = [r["reason"] for r in db_rows(home, "SELECT reason FROM transitions WHERE job = ?", victim["id"])]
    assert any(f"worker {victim['worker']} died (killed by signal 9 (SIGKILL)); the server requeued the job at once" in (r or "")
               for r in reasons), reasons
    assert not any("stopped renewing its lease" in (r or "") for r in reasons)
    # each worker process has a name of its own: the one started in the killed worker's place claims under another
    claims = db_rows(home, "SELECT worker, time FROM transitions WHERE state = 'running'")
    assert all(c["time"] < killed_at for c in claims if c["worker"] == victim["worker"])
    record = RunStore(str(home)).get(jobs[victim["id"]]["run"])
    assert any(a["kind"] == "restart" for a in record.alerts)
    curves = pd.read_csv(Path(RunStore(str(home)).run_dir(record.id)) / "logs" / "metrics.csv")
    assert curves["val_loss"].notna().sum() == HP["max_epochs"]  # one validation per epoch, none lost or doubled
    stopped_by_restart = [j for j in ids if any("the server stopped" in (r["reason"] or "") for r in db_rows(
        home, "SELECT reason FROM transitions WHERE job = ?", j))]
    assert stopped_by_restart  # the restart did stop running jobs, and they finished with the same weights

    # The server SIGKILLed between a job's last epoch and its end (issue 24, point 4): its last checkpoint holds every
    # epoch, while the job and its run still say running and the run's end-of-run metrics are not written. The next
    # server resumes it for no step and it ends finished with every metric, as it had.
    done = untouched[0]
    full = RunStore(str(home)).get(jobs[done]["run"])
    full_result = json.loads(jobs[done]["result"])
    rows_before = len(pd.read_csv(Path(RunStore(str(home)).run_dir(full.id)) / "logs" / "metrics.csv"))
    answering = api_processes()
    server.kill()
    server.wait(timeout=60)
    wait_for(lambda: not any(alive(pid) for pid in answering), 30, "the API copy to die with the killed server")
    conn = sqlite3.connect(home / "serve" / "service.sqlite", timeout=30)
    with conn:  # what the kill leaves of the job: running, held by a worker that died with the server
        conn.execute("UPDATE jobs SET state = 'running', worker = 'w1-gone-1', lease_until = ?, finished = NULL, "
                     "result = NULL, reason = NULL WHERE id = ?", (time.time() + 600, done))
        conn.execute("DELETE FROM transitions WHERE job = ? AND state = 'finished'", (done,))
    conn.close()
    RunStore(str(home)).update(full.id, status="running", metrics={}, finished=None)
    server = twinkle_service.start(home, port, *options)
    ended = wait_for(lambda: [r for r in db_rows(home, "SELECT * FROM jobs WHERE id = ?", done)
                              if r["state"] in ("finished", "failed", "cancelled", "stopped")], 300, "the job to end")[0]
    assert ended["state"] == "finished" and ended["run"] == jobs[done]["run"], log.read_text()[-3000:]
    assert json.loads(ended["result"])["metrics"] == pytest.approx(full_result["metrics"])
    again = RunStore(str(home)).get(full.id)
    assert again.status == "finished" and again.metrics == pytest.approx(full.metrics)
    assert len(pd.read_csv(Path(RunStore(str(home)).run_dir(full.id)) / "logs" / "metrics.csv")) == rows_before
    reasons = [r["reason"] or "" for r in db_rows(home, "SELECT reason FROM transitions WHERE job = ? ORDER BY seq", done)]
    assert "restarted" in reasons[-3] and reasons[-1] == f"the run {jobs[done]['run']} finished", reasons
    assert not any("nothing to save" in r for r in reasons)
