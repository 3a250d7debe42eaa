"""Experiment trackers (``report_to``; ``twinkle_core.tracking``): a real MLflow server, TensorBoard's and W&B's own
files read back, and the reporter's failure rules with trackers that fail on purpose."""

from __future__ import annotations

import json
import logging
import os
import socket
import subprocess
import sys
import time
from pathlib import Path
from typing import Any, Mapping

import pandas as pd
import pytest

from twinkle_core import RunStore, Trainer
from twinkle_core.tracking import Reporter, TrackedRun, Tracker, TrackerError, check_report_to


class _Flaky(Tracker):
    """Fails its first ``failures`` calls (``start`` included), then records every call."""

    name = "flaky"

    def __init__(self, failures: int) -> None:
        self.failures, self.calls = failures, []

    def _call(self, *call: Any) -> None:
        if self.failures > 0:
            self.failures -= 1
            raise ConnectionError("server down")
        self.calls.append(call)

    def start(self, run: TrackedRun) -> str:
        self._call("start", run.resume_id)
        return "flaky-1"

    def log_params(self, params: Mapping[str, str]) -> None:
        self._call("params", dict(params))

    def set_tags(self, tags: Mapping[str, str]) -> None:
        self._call("tags", dict(tags))

    def log_metrics(self, metrics: Mapping[str, float], step: int) -> None:
        self._call("metrics", dict(metrics), step)

    def log_artifact(self, path: str, folder: str = "") -> None:
        self._call("artifact", path, folder)

    def finish(self, status: str) -> None:
        self._call("finish", status)


def test_a_failing_tracker_is_warned_about_once_retried_in_order_and_what_it_never_took_is_listed(
        tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    """A tracker down for its first 3 calls: one warning, then everything arrives in the order it was queued (the
    NaN left out), its id written to trackers.json; a tracker that never answers: the reporter's calls return at
    once all the same, close() lists each call it could not send in trackers/<name>.unsent.jsonl and counts them;
    an unknown name is refused by report_to's name."""
    run = TrackedRun("twinkle://u/p/run1", "u/p/run1", "u", "p", str(tmp_path))
    flaky, dead = _Flaky(3), _Flaky(10**9)
    with caplog.at_level(logging.WARNING, logger="twinkle_core.tracking"):
        reporter = Reporter({"flaky": flaky, "dead": dead}, run, str(tmp_path / "trackers.json"),
                            str(tmp_path / "trackers"), retry_seconds=0.01)
        reporter.log_params({"lr": 0.1, "layers": [1, 2]})
        reporter.set_tags({"twinkle.uri": run.uri, "none": None})
        for step in range(5):
            reporter.log_metrics({"train_loss": 1.0 / (step + 1), "bad": float("nan")}, step)
        reporter.log_artifact(str(tmp_path / "plan.json"), "")
        summary = reporter.close("finished", timeout=1)
    assert [c[0] for c in flaky.calls] == ["start", "params", "tags", *["metrics"] * 5, "artifact", "finish"]
    assert flaky.calls[1][1] == {"lr": "0.1", "layers": "[1, 2]"} and flaky.calls[2][1] == {"twinkle.uri": run.uri}
    assert [c[2] for c in flaky.calls if c[0] == "metrics"] == [0, 1, 2, 3, 4]
    assert all(set(c[1]) == {"train_loss"} for c in flaky.calls if c[0] == "metrics")
    assert summary["flaky"] == {"id": "flaky-1", "sent": 9, "unsent": 0, "error": None}
    assert json.loads((tmp_path / "trackers.json").read_text()) == {"flaky": "flaky-1"}
    assert summary["dead"]["unsent"] == 9 and summary["dead"]["id"] is None
    assert "ConnectionError: server down" in summary["dead"]["error"]
    unsent = [json.loads(line) for line in Path(summary["dead"]["unsent_file"]).read_text().splitlines()]
    assert [u["call"] for u in unsent] == ["log_params", "set_tags", *["log_metrics"] * 5, "log_artifact", "finish"]
    warnings = [r for r in caplog.records if "report_to" in r.getMessage()]
    assert len(warnings) == 2 and {"'flaky'" in w.getMessage() or "'dead'" in w.getMessage() for w in warnings}
    with pytest.raises(TrackerError, match="report_to='nosuch'"):
        check_report_to(["nosuch"])
    assert check_report_to(["tensorboard", "none", "tensorboard"]) == ["tensorboard"]


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


class _MlflowServer:
    """``mlflow server`` on 127.0.0.1 with a SQLite store, started and stopped by the test."""

    def __init__(self, folder: Path) -> None:
        self.folder, self.port, self.process = folder, _free_port(), None

    @property
    def uri(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def start(self) -> None:
        self.folder.mkdir(parents=True, exist_ok=True)
        self.process = subprocess.Popen(
            [sys.executable, "-m", "mlflow", "server", "--host", "127.0.0.1", "--port", str(self.port),
             "--workers", "1", "--backend-store-uri", f"sqlite:///{self.folder / 'mlflow.db'}",
             "--artifacts-destination", str(self.folder / "artifacts")],
            stdout=subprocess.DEVNULL, stderr=open(self.folder / "server.log", "ab"), start_new_session=True)
        deadline = time.monotonic() + 120
        import urllib.request

        while time.monotonic() < deadline:
            try:
                with urllib.request.urlopen(f"{self.uri}/health", timeout=2) as answer:
                    if answer.status == 200:
                        return
            except OSError:
                time.sleep(0.3)
            if self.process.poll() is not None:
                break
        raise RuntimeError(f"mlflow server did not start: {(self.folder / 'server.log').read_text()[-3000:]}")

    def stop(self) -> None:
        if self.process is not None and self.process.poll() is None:
            import signal

            os.killpg(self.process.pid, signal.SIGTERM)  # the server and its workers
            self.process.wait(30)


def _rows(run_dir: str) -> dict[str, list[tuple[int, float]]]:
    """Each metric's (step, value) rows as metrics.csv holds them (sorted)."""
    table = pd.read_csv(Path(run_dir) / "logs" / "metrics.csv")
    return {column: sorted((int(s), float(v)) for s, v in table[["step", column]].dropna().itertuples(index=False))
            for column in table.columns if column != "step"}


def _same(got: list[tuple[int, float]], want: list[tuple[int, float]]) -> bool:
    return len(got) == len(want) and all(a[0] == b[0] and a[1] == pytest.approx(b[1], rel=1e-6, abs=1e-9)
                                         for a, b in zip(sorted(got), sorted(want)))


class _StopServer:
    """A Lightning callback that stops the MLflow server after the first epoch (the run goes on)."""

    def __init__(self, server: _MlflowServer) -> None:
        import lightning as L

        class Stop(L.Callback):
            def on_train_epoch_end(self, trainer: Any, module: Any) -> None:
                if trainer.current_epoch == 0:
                    server.stop()

        self.callback = Stop()


@pytest.mark.slow
def test_a_run_reports_everything_to_a_real_mlflow_server_continues_there_and_loses_nothing_when_it_stops(
        tmp_path: Path, cancer_csv: str, monkeypatch: pytest.MonkeyPatch) -> None:
    """``mlflow server`` on 127.0.0.1 (SQLite): a 2-epoch fit with report_to=["mlflow"] is one MLflow run of the
    experiment MLFLOW_EXPERIMENT_NAME, named user/project/runN, FINISHED, with the hyperparameters and the plan's
    choices as parameters, the twinkle:// URI, data fingerprint and versions as tags, every row of metrics.csv under
    its name and step, and plan.json, the curves and metrics.csv as artifacts; the run continued from its
    checkpoint reports into the same MLflow run (its changed max_epochs as run2/max_epochs), and its evaluation's
    figures, evaluation.json and plots arrive there too. A server stopped after the first epoch of another fit: the
    training finishes as it would, and its record counts what could not be sent and lists it in a file."""
    from mlflow.tracking import MlflowClient

    server = _MlflowServer(tmp_path / "mlflow")
    server.start()
    monkeypatch.setenv("MLFLOW_TRACKING_URI", server.uri)
    monkeypatch.setenv("MLFLOW_EXPERIMENT_NAME", "twinkle-tests")
    home = str(tmp_path / "home")
    store = RunStore(home)
    try:
        first = Trainer("tabular-mlp", home=home, verbose=False, report_to=["mlflow"],
                        hyperparams={"max_epochs": 2}).fit(cancer_csv)
        tracked = store.get(first.run_uri).measured["trackers"]["mlflow"]
        assert tracked["unsent"] == 0 and tracked["error"] is None, tracked
        client = MlflowClient(server.uri)
        run = client.get_run(tracked["id"])
        assert run.info.status == "FINISHED" and run.info.run_name == first.run_uri.removeprefix("twinkle://")
        assert client.get_experiment(run.info.experiment_id).name == "twinkle-tests"
        params, tags = run.data.params, run.data.tags
        assert params["max_epochs"] == "2" and params["plan.precision"] == str(first.plan.precision)
        assert params["report_to"] == '["mlflow"]'
        assert tags["twinkle.uri"] == first.run_uri and tags["twinkle.data_fingerprint"] == first.data_fingerprint
        assert tags["twinkle.algorithm"] == "tabular-mlp" and tags["twinkle.core_version"]
        rows = _rows(first.run_dir)
        assert {"train_loss_epoch", "val_accuracy", "val_loss", "epoch"} <= set(rows)
        for name, want in rows.items():  # every row metrics.csv got, under its name and step
            got = [(m.step, m.value) for m in client.get_metric_history(run.info.run_id, name)]
            assert _same(got, want), (name, got, want)
        artifacts = {a.path for a in client.list_artifacts(run.info.run_id)}
        assert {"plan.json", "curves.png", "logs"} <= artifacts, artifacts
        assert [a.path for a in client.list_artifacts(run.info.run_id, "logs")] == ["logs/metrics.csv"]

        continued = Trainer.from_checkpoint(first.run_uri, cancer_csv, "continue", {"max_epochs": 1}, home=home,
                                            verbose=False)
        second = continued.fit(cancer_csv)
        assert store.get(second.run_uri).measured["trackers"]["mlflow"]["id"] == run.info.run_id  # the same run
        evaluation = continued.evaluate(cancer_csv)
        again = client.get_run(run.info.run_id)
        assert again.data.params[f"{second.run_uri.rsplit('/', 1)[-1]}/max_epochs"] == "1"
        epochs = client.get_metric_history(run.info.run_id, "train_loss_epoch")
        assert len(epochs) == len(rows["train_loss_epoch"]) + 1
        assert again.data.metrics["eval_accuracy"] == pytest.approx(evaluation.metrics["accuracy"])
        sent = {a.path for a in client.list_artifacts(run.info.run_id, f"evaluations/{evaluation.number}")}
        assert sent == {f"evaluations/{evaluation.number}/{name}" for name in [*evaluation.files, "evaluation.json"]}
        assert evaluation.files  # its plots (the confusion matrix) among them

        monkeypatch.setattr("twinkle_core.tracking.CLOSE_SECONDS", 1.0)  # the end of the run waits this long for it
        stopper = _StopServer(server)
        cut = Trainer("tabular-mlp", home=home, verbose=False, report_to=["mlflow"], hyperparams={"max_epochs": 3},
                      callbacks=[stopper.callback]).fit(cancer_csv)
    finally:
        server.stop()
    assert cut.status == "finished" and cut.metrics["val_accuracy"] > 0.9  # the training did not notice
    left = store.get(cut.run_uri).measured["trackers"]["mlflow"]
    assert left["unsent"] > 0 and left["error"], left
    listed = Path(left["unsent_file"]).read_text().splitlines()
    assert len(listed) == left["unsent"] and json.loads(listed[-1]) == {"call": "finish", "args": ["finished"]}


def _wandb_records(path: Path) -> list[Any]:
    """The records of a W&B run file (``run-<id>.wandb``: LevelDB's log format of ``Record`` protobufs)."""
    import struct

    from wandb.proto import wandb_internal_pb2 as pb

    data, block, pos, records, pending = path.read_bytes(), 32768, 7, [], b""
    assert data[:4] == b":W&B", data[:8]
    while pos + 7 <= len(data):
        left = block - pos % block
        if left < 7:  # a block's tail too short for a header: padding
            pos += left
            continue
        _, length, kind = struct.unpack("<IHB", data[pos:pos + 7])
        pos += 7
        if kind == 0:
            pos += left - 7
            continue
        chunk, pos = data[pos:pos + length], pos + length
        pending = chunk if kind in (1, 2) else pending + chunk
        if kind in (1, 4):
            record = pb.Record()
            record.ParseFromString(pending)
            records.append(record)
    return records


def test_tensorboard_and_wandb_offline_get_every_metric_row_read_back_by_their_own_readers(
        tmp_path: Path, cancer_csv: str, monkeypatch: pytest.MonkeyPatch) -> None:
    """report_to="tensorboard,wandb" (W&B offline, nothing leaves the machine): TensorBoard's own reader
    (EventAccumulator) finds every metrics.csv row as a scalar at its step, the parameters and tags as text and the
    curves as an image, in tensorboard/ of the run's folder; the W&B run file holds every row in its history (with
    global_step), the parameters in its config and plan.json among its files; both ids are in trackers.json. An
    export with TWINKLE_REPORT_EXPORTS=1 reaches the same W&B run (resumed): its verification card and the model."""
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

    monkeypatch.setenv("WANDB_MODE", "offline")
    monkeypatch.setenv("WANDB_DIR", str(tmp_path / "wandb"))
    monkeypatch.setenv("WANDB_PROJECT", "twinkle-tests")
    monkeypatch.setenv("TWINKLE_REPORT_EXPORTS", "1")
    trainer = Trainer("tabular-mlp", home=str(tmp_path / "home"), verbose=False, report_to="tensorboard,wandb",
                      hyperparams={"max_epochs": 2})
    result = trainer.fit(cancer_csv)
    exported = Path(trainer.export(format="torchscript").path)
    trackers = RunStore(str(tmp_path / "home")).get(result.run_uri).measured["trackers"]
    assert all(t["unsent"] == 0 and t["error"] is None for t in trackers.values()), trackers
    ids = json.loads((Path(result.run_dir) / "trackers.json").read_text())
    assert ids == {"tensorboard": str(Path(result.run_dir) / "tensorboard"), "wandb": trackers["wandb"]["id"]}
    rows = _rows(result.run_dir)

    events = EventAccumulator(ids["tensorboard"], size_guidance={"scalars": 0, "images": 0, "tensors": 0})
    events.Reload()
    for name, want in rows.items():
        assert _same([(e.step, e.value) for e in events.Scalars(name)], want), name
    assert {"params/text_summary", "tags/text_summary", "plan.json/text_summary"} <= set(events.Tags()["tensors"])
    assert "curves.png" in events.Tags()["images"]

    folders = sorted((tmp_path / "wandb" / "wandb").glob(f"offline-run-*-{ids['wandb']}"))
    assert len(folders) == 2  # the fit, and the export resuming the same run id
    records = [r for folder in folders for r in _wandb_records(folder / f"run-{ids['wandb']}.wandb")]
    history: dict[str, list[tuple[int, float]]] = {}
    for record in records:
        if record.WhichOneof("record_type") == "history":
            row = {item.key or "/".join(item.nested_key): json.loads(item.value_json) for item in record.history.item}
            for name, value in row.items():
                if name in rows:
                    history.setdefault(name, []).append((int(row["global_step"]), float(value)))
    for name, want in rows.items():
        assert _same(history.get(name, []), want), name
    config = {item.key: item.value_json for r in records if r.WhichOneof("record_type") == "config"
              for item in r.config.update}
    assert json.loads(config["max_epochs"]) == "2" and "twinkle" in config
    saved = {f.path for r in records if r.WhichOneof("record_type") == "files" for f in r.files.files}
    assert "plan.json" in saved and "logs/metrics.csv" in saved, saved
    assert {f"exports/{exported.name}", f"exports/{exported.name}.json"} <= saved, saved
