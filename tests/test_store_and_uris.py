"""Run store addressing, URI schemes (nas://, twinkle://, memory://), fingerprints and index files."""

from __future__ import annotations

import hashlib
import json
import re

import numpy as np
import pytest
from click.testing import CliRunner

from twinkle_core import RunStore, Trainer
from twinkle_core.cli import main
from twinkle_core.data.fingerprint import data_fingerprint, md5_of
from twinkle_core.data.index import read_index
from twinkle_core.data.tabular import TabularProcessor
from twinkle_core.errors import TwinkleError
from twinkle_core.store.runs import RunNotFoundError
from twinkle_core.uris import resolve


def test_uri_mapping(monkeypatch, tmp_path) -> None:
    monkeypatch.setenv("TWINKLE_HOME", str(tmp_path / "home"))
    monkeypatch.setenv("TWINKLE_NAS_ROOT", str(tmp_path / "nas"))
    assert resolve("nas://financial_data/SP500_10y.csv") == str(tmp_path / "nas" / "financial_data" / "SP500_10y.csv")
    assert resolve("twinkle://u/p/run3") == str(tmp_path / "home" / "runs" / "u" / "p" / "run3")
    assert resolve("twinkle://user/projects/x/run23") == str(tmp_path / "home" / "runs" / "user" / "x" / "run23")
    assert resolve("twinkle://models/digits") == str(tmp_path / "home" / "models" / "digits")
    assert resolve("s3://bucket/key.csv") == "s3://bucket/key.csv"
    with pytest.raises(TwinkleError, match="would leave TWINKLE_NAS_ROOT"):
        resolve("nas://../etc/passwd")
    monkeypatch.delenv("TWINKLE_NAS_ROOT")
    with pytest.raises(TwinkleError, match="TWINKLE_NAS_ROOT is not set"):
        resolve("nas://x.csv")


def test_fingerprints_follow_the_documented_recipe(tmp_path) -> None:
    folder = tmp_path / "ds"
    (folder / "b").mkdir(parents=True)
    (folder / "a.txt").write_bytes(b"hello")
    (folder / "b" / "c.txt").write_bytes(b"world!")
    md5 = lambda b: hashlib.md5(b).hexdigest()  # noqa: E731
    manifest = f"a.txt\t5\t{md5(b'hello')}\nb/c.txt\t6\t{md5(b'world!')}\n"
    assert md5_of(str(folder)) == md5(manifest.encode())
    assert data_fingerprint(str(folder / "a.txt")) == f"md5:{md5(b'hello')}"


def test_memory_uri_and_nas_uri_train(twinkle_home, tmp_path, monkeypatch, cancer_csv) -> None:
    import fsspec

    fsspec.filesystem("memory").pipe("/data/cancer.csv", cancer_csv.read_bytes())
    monkeypatch.setenv("TWINKLE_NAS_ROOT", str(cancer_csv.parent))
    hp = {"max_epochs": 1}
    memory = Trainer("tabular-mlp", hyperparams=hp, verbose=False).fit("memory://data/cancer.csv")
    nas = Trainer("tabular-mlp", hyperparams=hp, verbose=False).fit("nas://cancer.csv")
    assert memory.data_fingerprint == nas.data_fingerprint == data_fingerprint(str(cancer_csv))


def test_index_with_mmap_trains_like_the_csv(twinkle_home, tmp_path, cancer_csv) -> None:
    index = str(tmp_path / "cancer.idx")
    TabularProcessor.build_index(str(cancer_csv), index)
    arrays, meta = read_index(index, mmap=True)
    assert isinstance(arrays["features"], np.memmap) and arrays["features"].shape == (569, 30)
    assert meta["fingerprint"] == data_fingerprint(str(cancer_csv))
    hp = {"max_epochs": 3, "seed": 5}
    from_csv = Trainer("tabular-mlp", hyperparams=hp, verbose=False).fit(str(cancer_csv))
    from_index = Trainer("tabular-mlp", hyperparams={**hp, "use_mmap": True}, verbose=False).fit(index)
    assert from_index.data_fingerprint == from_csv.data_fingerprint
    assert from_index.metrics["val_loss"] == pytest.approx(from_csv.metrics["val_loss"], abs=1e-6)
    truncated = tmp_path / "short.idx"
    truncated.write_bytes((tmp_path / "cancer.idx").read_bytes()[:5000])
    with pytest.raises(TwinkleError, match="truncated"):
        read_index(str(truncated))


def test_runs_cli_and_publish(twinkle_home, cancer_csv) -> None:
    result = Trainer("tabular-mlp", hyperparams={"max_epochs": 2}, project="cancer", verbose=False).fit(str(cancer_csv))
    runner = CliRunner()
    listed = runner.invoke(main, ["runs", "list"])
    assert listed.exit_code == 0 and "twinkle://tester/cancer/run1" in listed.output and "finished" in listed.output
    shown = json.loads(runner.invoke(main, ["runs", "show", result.run_uri, "--json"]).output)
    assert shown["status"] == "finished" and shown["plan"]["precision"] == "32-true"
    text = runner.invoke(main, ["runs", "show", "tester/cancer/run1"]).output
    assert "Resource plan (default)" in text and "val_accuracy" in text
    missing = runner.invoke(main, ["runs", "show", "twinkle://tester/cancer/run9"])
    assert missing.exit_code == 1 and "runs of tester/cancer: run1" in missing.output
    assert RunStore().publish(result.run_uri, "cancer-mlp") == "twinkle://models/cancer-mlp"
    child = Trainer.from_checkpoint("twinkle://models/cancer-mlp/model.ckpt", hyperparams={"max_epochs": 1},
                                    verbose=False).fit()
    assert child.parent == result.run_uri
    with pytest.raises(RunNotFoundError, match="does not name a run"):
        RunStore().get("twinkle://models/cancer-mlp")


def test_train_plan_export_cli(twinkle_home, cancer_csv, tmp_path) -> None:
    runner = CliRunner()
    planned = runner.invoke(main, ["plan", "tabular-mlp", "--data", str(cancer_csv), "--hp", "batch_size=16"])
    assert planned.exit_code == 0 and re.search(r"micro_batch_size +16 ", planned.output)
    trained = runner.invoke(main, ["train", "tabular-mlp", "-d", str(cancer_csv), "--epochs", "2",
                                   "--hp", "lr=0.003", "--project", "cli", "--json"])
    assert trained.exit_code == 0, trained.output
    run = json.loads(trained.output[trained.output.index("{"):])["run"]
    assert run == "twinkle://tester/cli/run1" and RunStore().get(run).hyperparams["lr"] == 0.003
    out = tmp_path / "m.onnx"
    exported = runner.invoke(main, ["export", run, "--format", "onnx", "--opset", "13", "-o", str(out)])
    assert exported.exit_code == 0, exported.output
    assert out.exists() and "max |difference| vs PyTorch" in exported.output
    bad = runner.invoke(main, ["train", "tabular-mlp", "-d", str(cancer_csv), "--hp", "lr"])
    assert bad.exit_code == 1 and "--hp takes key=value" in bad.output


def test_an_explicit_store_is_the_one_used_throughout(tmp_path, monkeypatch, cancer_csv) -> None:
    elsewhere, mine = tmp_path / "env-home", tmp_path / "my-store"
    monkeypatch.setenv("TWINKLE_HOME", str(elsewhere))
    monkeypatch.setenv("TWINKLE_USER", "tester")
    index = str(tmp_path / "cancer.idx")
    from twinkle_core import DataProcessor

    DataProcessor.build_index(str(cancer_csv), index)  # the base class picks the processor for .csv
    result = Trainer("tabular-mlp", hyperparams={"max_epochs": 1, "use_mmap": True}, home=str(mine),
                     verbose=False).fit(index)
    store = RunStore(str(mine))
    assert store.publish(result.run_uri, "mlp") == "twinkle://models/mlp"
    child = Trainer.from_checkpoint("twinkle://models/mlp/model.ckpt", hyperparams={"max_epochs": 1},
                                    home=str(mine), verbose=False).fit()
    assert child.parent == result.run_uri and store.get(child.run_uri).status == "finished"
    assert not elsewhere.exists()  # nothing went to the environment's store


def test_a_damaged_catalogue_is_named_and_repaired_from_the_run_folders(twinkle_home, cancer_csv) -> None:
    result = Trainer("tabular-mlp", hyperparams={"max_epochs": 2}, verbose=False).fit(str(cancer_csv))
    catalogue = twinkle_home / "catalogue.sqlite"
    catalogue.write_bytes(b"this is not a database" * 100)
    runner = CliRunner()
    listed = runner.invoke(main, ["runs", "list"])
    assert listed.exit_code == 1 and "Traceback" not in listed.output
    assert f"the run catalogue '{catalogue}' is damaged" in listed.output and "twinkle runs repair" in listed.output
    repaired = runner.invoke(main, ["runs", "repair"])
    assert repaired.exit_code == 0 and "from 1 run folder(s)" in repaired.output, repaired.output
    assert list(twinkle_home.glob("catalogue.sqlite.damaged-*"))  # the damaged file is kept
    record = RunStore().get(result.run_uri)
    assert (record.algorithm, record.task, record.status) == ("tabular-mlp", "tabular_classification", "recovered")
    assert record.data_fingerprint == result.data_fingerprint and record.hyperparams["max_epochs"] == 2
    assert abs(record.metrics["val_accuracy"] - result.metrics["val_accuracy"]) < 1e-6
    again = Trainer("tabular-mlp", hyperparams={"max_epochs": 1}, verbose=False).fit(str(cancer_csv))
    assert again.run_uri.endswith("/run2")  # numbering goes on after the restored runs


def test_a_database_keeps_one_connection_per_thread_and_never_a_stale_or_inherited_one(tmp_path) -> None:
    """Proves store/sqlite.py's contract, on which the service's speed and safety rest: each thread reuses one
    connection (opened once, not per request); a block that raises leaves no transaction open; a file replaced
    under it (as 'twinkle runs repair' replaces the catalogue) is read anew; a forked child never uses the
    connection it inherited (SQLite forbids carrying one across fork) but opens its own."""
    import os
    import sqlite3
    import threading

    from twinkle_core.store.sqlite import Database

    path = tmp_path / "a.sqlite"
    db = Database(str(path), "CREATE TABLE IF NOT EXISTS t (x INTEGER);", wal=False)  # as the catalogue is

    def count() -> int:
        with db.connect() as conn:
            return conn.execute("SELECT COUNT(*) FROM t").fetchone()[0]

    with db.connect() as first, db.connect() as again:
        assert again is first
    seen: list[sqlite3.Connection] = []
    worker = threading.Thread(target=lambda: seen.append(db.connect().__enter__()))
    worker.start()
    worker.join()
    assert seen[0] is not first  # a thread of its own, a connection of its own

    for block in (db.write, db.connect):
        with pytest.raises(RuntimeError), block() as conn:
            if not conn.in_transaction:
                conn.execute("BEGIN")
            conn.execute("INSERT INTO t VALUES (1)")
            raise RuntimeError("a failing request")
        assert not first.in_transaction and count() == 0
    with db.write() as conn:
        conn.execute("INSERT INTO t VALUES (1)")
        assert count() == 1  # a read inside a write block sees it, and leaves the write's transaction alone
    assert count() == 1

    other = sqlite3.connect(tmp_path / "b.sqlite")
    other.executescript("CREATE TABLE t (x INTEGER); INSERT INTO t VALUES (1), (2), (3);")
    other.close()
    os.replace(tmp_path / "b.sqlite", path)
    assert count() == 3  # the new file's rows, not the old connection's

    with db.connect() as parents:
        pid = os.fork()
        if pid == 0:  # the child: its own connection, which reads the same file
            try:
                with db.connect() as childs:
                    ok = childs is not parents and childs.execute("SELECT COUNT(*) FROM t").fetchone()[0] == 3
                os._exit(0 if ok else 1)
            finally:
                os._exit(2)
    _, status = os.waitpid(pid, 0)
    assert os.waitstatus_to_exitcode(status) == 0
    with db.connect() as still:
        assert still is parents and count() == 3  # the parent's connection is untouched by the child
