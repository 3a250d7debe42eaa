"""Automatic fault recovery: a supervised job whose training process is SIGKILLed restarts by itself from its
last checkpoint, into the same run, and ends with the weights of an uninterrupted run; a job that dies every
time ends ``failed`` after ``max_restarts``."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pandas as pd
import pytest
import torch

from twinkle_core import RunStore, Trainer
from twinkle_core.errors import TwinkleError
from twinkle_core.jobs import RESTART_KIND, Job
from twinkle_core.testing.service import wait_for

HP = {"max_epochs": 12, "batch_size": 16, "checkpoint_every_n_steps": 4, "seed": 3, "progress_bar": False}


def _cli(home: Path, data: Path, *extra: str) -> subprocess.Popen[str]:
    args = [sys.executable, "-m", "twinkle_core", "train", "tabular-mlp", "--data", str(data), "--project", "sup",
            "--json", *extra, *(f"--hp={k}={v}" for k, v in HP.items())]
    env = {**os.environ, "TWINKLE_HOME": str(home), "TWINKLE_USER": "tester", "OMP_NUM_THREADS": "1"}
    return subprocess.Popen(args, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)


def _supervisor_state(home: Path) -> dict:
    found = list((home / "jobs").glob("*/supervisor.json")) if (home / "jobs").exists() else []
    if not found:
        return {}
    try:
        return json.loads(found[0].read_text()) | {"folder": str(found[0].parent)}
    except json.JSONDecodeError:  # written atomically, but the glob may race a rename on some filesystems
        return {}


def _wait_for(condition, timeout: float = 120.0, what: str = "the condition"):
    return wait_for(condition, timeout, what, poll=0.05)


def _weights(path: str) -> dict[str, torch.Tensor]:
    return torch.load(path, weights_only=True)["state_dict"]


def test_a_killed_training_process_restarts_by_itself_and_ends_as_if_never_killed(tmp_path, cancer_csv) -> None:
    home = tmp_path / "home"
    job = _cli(home, cancer_csv)
    state = _wait_for(lambda: (s := _supervisor_state(home)) and (Path(s["folder"]) / "run.json").exists() and s,
                      what="the worker to create its run")
    run = json.loads((Path(state["folder"]) / "run.json").read_text())["run"]
    store = RunStore(str(home))
    last = Path(store.path(store.get(run).id, "checkpoints", "last.ckpt"))
    _wait_for(lambda: last.exists() and torch.load(last, weights_only=True)["global_step"] >= 8,
              what="a mid-training checkpoint")
    # the CLI forked its training process (it had imported the Trainer already) rather than start an interpreter
    # that imports it all again: the worker still has the CLI's command line
    assert state["forked"] and "twinkle_core.jobs.child" not in Path(f"/proc/{state['worker_pid']}/cmdline").read_text()
    os.kill(state["worker_pid"], signal.SIGKILL)  # the test's only action: the restart is the supervisor's
    out, err = job.communicate(timeout=300)
    assert job.returncode == 0, err[-3000:]
    result = json.loads(out)
    assert result["run"] == run and result["status"] == "finished"
    record = store.get(run)
    restarts = [a for a in record.alerts if a["kind"] == RESTART_KIND]
    assert len(restarts) == 1 and "killed by signal 9 (SIGKILL)" in restarts[0]["message"]
    assert "from its last checkpoint" in restarts[0]["message"] and record.status == "finished"
    assert len(store.list(project="sup")) == 1  # one run, one id
    curves = pd.read_csv(Path(store.run_dir(record.id)) / "logs" / "metrics.csv")
    assert set(curves["epoch"].dropna().astype(int)) == set(range(HP["max_epochs"]))  # both attempts' rows
    assert curves["val_loss"].notna().sum() == HP["max_epochs"]  # one validation per epoch, none lost or doubled

    reference = Trainer("tabular-mlp", hyperparams=HP, home=str(tmp_path / "reference"), verbose=False)
    expected = _weights(reference.fit(str(cancer_csv)).last_checkpoint)
    actual = _weights(str(last))
    assert expected.keys() == actual.keys()
    assert all(torch.equal(expected[k], actual[k]) for k in expected)  # exact resume: bit-identical weights


def test_a_job_that_dies_every_time_ends_failed_after_max_restarts(tmp_path, cancer_csv) -> None:
    home = tmp_path / "home"
    job = _cli(home, cancer_csv, "--max-restarts", "2")
    killed: set[int] = set()
    while job.poll() is None:
        state = _supervisor_state(home)
        pid = state.get("worker_pid")
        if pid and pid not in killed and (Path(state["folder"]) / "run.json").exists():
            time.sleep(0.3)
            try:
                os.kill(pid, signal.SIGKILL)
            except ProcessLookupError:
                pass
            killed.add(pid)
        time.sleep(0.05)
    _, err = job.communicate()
    assert job.returncode != 0 and len(killed) == 3  # the first attempt and two restarts
    assert "gave up after 2 restart(s)" in err
    store = RunStore(str(home))
    (record,) = store.list(project="sup")
    assert record.status == "failed" and "killed by signal 9" in record.error
    kinds = [(a["kind"], a.get("action")) for a in record.alerts]
    assert kinds == [(RESTART_KIND, "restart"), (RESTART_KIND, "restart"), (RESTART_KIND, "give up")]


def test_an_error_raised_by_training_is_not_retried(twinkle_home, tmp_path) -> None:
    bad = tmp_path / "bad.csv"
    bad.write_text("a,b,target\n1,2,x\n3,oops,y\n")
    with pytest.raises(TwinkleError, match="NonNumericError|column 'b'"):
        Trainer("tabular-mlp", hyperparams={"max_epochs": 1}, verbose=False).supervise(str(bad))
    assert not list(Path(twinkle_home, "jobs").glob("*/supervisor.json"))[0].parent.joinpath("result.json").exists()


def test_supervise_refuses_code_and_carries_monitor_and_budget_rules_as_data(twinkle_home, cancer_csv) -> None:
    import lightning as L

    with pytest.raises(TwinkleError, match="callbacks"):
        Trainer("tabular-mlp", verbose=False, callbacks=[L.Callback()]).supervise(str(cancer_csv))
    ruled = Trainer("tabular-mlp", verbose=False).monitor(metrics=["grad_norm"], alert_rules={"loss": "> 10"})
    ruled.set_budget_alert(max_cpu_hours=2.0, cloud_provider="local")
    job = ruled._job(str(cancer_csv), 3, "supervise")  # what the worker process rebuilds the trainer from
    written = json.loads(job.model_dump_json())["spec"]  # as job.json holds them: data, read back the same
    assert written["monitor"]["alert_rules"] == {"loss": "> 10"} and written["monitor"]["metrics"] == ["grad_norm"]
    assert written["budget"]["max_cpu_hours"] == 2.0 and written["budget"]["cloud_provider"] == "local"
    assert Job.model_validate_json(job.model_dump_json()).spec == job.spec


def test_a_run_killed_after_its_last_epoch_resumes_to_finished_with_all_its_metrics(twinkle_home, cancer_csv) -> None:
    """Proves "finished means finished": a run whose last checkpoint already holds every epoch, killed before it
    recorded its end (as a server SIGKILLed between the last epoch and the run's last write leaves it: ``running``,
    its end-of-run metrics not written), is resumed into the same run the way a restarted job is — it trains
    nothing more and ends ``finished`` with the same metrics and best score as an uninterrupted end."""
    done = Trainer("tabular-mlp", hyperparams={**HP, "max_epochs": 2}, verbose=False).fit(str(cancer_csv))
    store = RunStore()
    record = store.get(done.run_uri)
    assert done.metrics and record.metrics[f"best_{done.monitor}"] == done.best_metric
    store.update(record.id, status="running", metrics={}, finished=None)  # what the kill leaves
    steps_before = len(pd.read_csv(Path(done.run_dir) / "logs" / "metrics.csv"))

    resumed = Trainer.from_checkpoint(done.run_uri, mode="resume", same_run=True, verbose=False).fit()
    assert resumed.run_uri == done.run_uri and resumed.status == "finished"
    assert resumed.metrics == pytest.approx(done.metrics) and resumed.best_metric == pytest.approx(done.best_metric)
    ended = store.get(done.run_uri)
    assert ended.status == "finished" and ended.metrics == pytest.approx(
        {**done.metrics, f"best_{done.monitor}": done.best_metric})
    assert len(pd.read_csv(Path(done.run_dir) / "logs" / "metrics.csv")) == steps_before  # no epoch trained again


def test_one_failure_policy_decides_every_way_an_attempt_ends() -> None:
    """The supervisor and the service's workers take the same decision from an attempt's outcome: its result is
    done; an error the training raised (its run ended failed, or no run yet) is not retried; a process that died
    — or raised with its run still running (no training ended it) — restarts until ``max_restarts``, then gives up;
    the cause names what it raised."""
    from twinkle_core.jobs.folder import Outcome
    from twinkle_core.jobs.restarts import FailureDecision, FailurePolicy

    def outcome(kind: str, run: str | None = "twinkle://u/p/run1", returncode: int = -9) -> Outcome:
        error = {"type": "ValueError", "message": "bad row 3"} if kind == "raised" else None
        return Outcome(kind, returncode, run, {"run_uri": run} if kind == "finished" else None, error,  # type: ignore[arg-type]
                       {"step": 4} if kind == "stopped" else None)

    policy = FailurePolicy(max_restarts=2)
    assert policy.decide(outcome("finished", returncode=0), 0, "finished") == FailureDecision.DONE
    assert policy.decide(outcome("raised", returncode=3), 0, "failed") == FailureDecision.RAISE
    assert policy.decide(outcome("raised", run=None, returncode=3), 0) == FailureDecision.RAISE
    assert policy.decide(outcome("raised", returncode=3), 0, "running") == FailureDecision.RESTART
    for kind in ("died", "stopped"):
        assert [policy.decide(outcome(kind), n, "running") for n in range(3)] == \
            [FailureDecision.RESTART, FailureDecision.RESTART, FailureDecision.GIVE_UP]
    assert policy.decide(outcome("died", run=None), 0) == FailureDecision.RESTART
    assert FailurePolicy(0).decide(outcome("died"), 0, "running") == FailureDecision.GIVE_UP
    assert outcome("died").cause == "killed by signal 9 (SIGKILL)"
    assert outcome("raised", returncode=3).cause == "exited with status 3 (raised ValueError: bad row 3)"
