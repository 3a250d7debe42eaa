"""Data and the run store on S3, through s3fs, against a real S3-protocol server (moto) on loopback."""

from __future__ import annotations

import socket

import pytest

from twinkle_core import RunStore, Trainer
from twinkle_core.uris import DataNotFoundError


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


@pytest.fixture(scope="module")
def s3_server():
    """A moto S3 server on 127.0.0.1 (no traffic leaves this machine)."""
    from moto.server import ThreadedMotoServer

    port = _free_port()
    server = ThreadedMotoServer(ip_address="127.0.0.1", port=port, verbose=False)
    server.start()
    yield f"http://127.0.0.1:{port}"
    server.stop()


@pytest.fixture
def s3(s3_server, monkeypatch):
    """An s3fs filesystem on the local server with a fresh bucket."""
    import s3fs

    for key, value in {
        "AWS_ACCESS_KEY_ID": "testing", "AWS_SECRET_ACCESS_KEY": "testing", "AWS_DEFAULT_REGION": "us-east-1",
        "AWS_ENDPOINT_URL": s3_server, "FSSPEC_S3_ENDPOINT_URL": s3_server,
    }.items():
        monkeypatch.setenv(key, value)
    s3fs.S3FileSystem.clear_instance_cache()
    fs = s3fs.S3FileSystem(endpoint_url=s3_server)
    fs.mkdir("twinkle-data")
    yield fs
    fs.rm("twinkle-data", recursive=True)
    s3fs.S3FileSystem.clear_instance_cache()


def test_fit_reads_data_from_s3(s3, twinkle_home, cancer_csv) -> None:
    s3.put(str(cancer_csv), "twinkle-data/cancer/cancer.csv")
    result = Trainer("tabular-mlp", hyperparams={"max_epochs": 15, "batch_size": 64},
                     progress_bar=False).fit(data="s3://twinkle-data/cancer/cancer.csv")
    assert result.best_metric >= 0.93
    record = RunStore().get(result.run_uri)
    assert record.data_uri == "s3://twinkle-data/cancer/cancer.csv"
    local = Trainer("tabular-mlp", hyperparams={"max_epochs": 1}, verbose=False)
    assert record.data_fingerprint == local.fit(str(cancer_csv)).data_fingerprint  # same bytes, same fingerprint


def test_missing_s3_object_is_named(s3, twinkle_home) -> None:
    with pytest.raises(DataNotFoundError, match="s3://twinkle-data/nope.csv' does not exist"):
        Trainer("tabular-mlp", verbose=False).fit(data="s3://twinkle-data/nope.csv")


def test_run_store_on_s3(s3, tmp_path, monkeypatch, cancer_csv) -> None:
    monkeypatch.setenv("TWINKLE_HOME", "s3://twinkle-data/home")
    monkeypatch.setenv("TWINKLE_CATALOGUE", str(tmp_path / "catalogue.sqlite"))
    monkeypatch.setenv("TWINKLE_USER", "tester")
    trainer = Trainer("tabular-mlp", hyperparams={"max_epochs": 2}, progress_bar=False)
    result = trainer.fit(data=str(cancer_csv))
    assert result.best_checkpoint == "s3://twinkle-data/home/runs/tester/default/run1/checkpoints/best.ckpt"
    files = set(s3.find("twinkle-data/home/runs/tester/default/run1"))
    assert {f"twinkle-data/home/runs/tester/default/run1/{name}" for name in
            ("plan.json", "data.json", "curves.png", "logs/metrics.csv", "checkpoints/last.ckpt")} <= files
    export = trainer.export(format="onnx")
    assert export.path == "s3://twinkle-data/home/runs/tester/default/run1/exports/model.onnx"
    assert s3.exists(export.path) and export.max_abs_diff <= 1e-4
    child = Trainer.from_checkpoint(result.run_uri, hyperparams={"max_epochs": 1}, verbose=False).fit()
    assert child.parent == result.run_uri
