"""verify_data: the documented fingerprint, and a mismatch that names changed, added and removed files."""

from __future__ import annotations

import hashlib

import pytest
from click.testing import CliRunner

from twinkle_core import Trainer
from twinkle_core.cli import main
from twinkle_core.ops.verify import DataVerificationError, verify_data


@pytest.fixture
def dataset(tmp_path):
    root = tmp_path / "dataset-v1"
    (root / "train").mkdir(parents=True)
    for name, text in {"train/a.csv": "x,y\n1,2\n", "train/b.csv": "x,y\n3,4\n", "meta.json": "{}"}.items():
        (root / name).write_text(text)
    return root


def test_match_and_mismatch_name_the_files(twinkle_home, dataset) -> None:
    trainer = Trainer("tabular-mlp", verbose=False)
    first = trainer.verify_data(str(dataset))
    expected = hashlib.md5("".join(
        f"{name}\t{len(text)}\t{hashlib.md5(text.encode()).hexdigest()}\n"
        for name, text in sorted({"meta.json": "{}", "train/a.csv": "x,y\n1,2\n", "train/b.csv": "x,y\n3,4\n"}.items())
    ).encode()).hexdigest()
    assert first.md5 == expected and first.files == 3 and first.ok
    assert trainer.verify_data(str(dataset), expected_md5=f"md5:{expected}").ok
    (dataset / "train" / "a.csv").write_text("x,y\n1,999\n")
    (dataset / "train" / "c.csv").write_text("x,y\n5,6\n")
    (dataset / "meta.json").unlink()
    with pytest.raises(DataVerificationError) as info:
        trainer.verify_data(str(dataset), expected_md5=expected)
    message = str(info.value)
    assert "changed: train/a.csv" in message and "added: train/c.csv" in message and "removed: meta.json" in message
    assert f"expected fingerprint {expected}" in message


def test_unknown_expectation_and_memory_uri(twinkle_home) -> None:
    import fsspec

    fs = fsspec.filesystem("memory")
    fs.pipe("/ds/x.bin", b"abc")
    result = verify_data("memory://ds")
    with pytest.raises(DataVerificationError, match="no manifest of the expected data is stored"):
        verify_data("memory://ds", expected_md5="0" * 32)
    assert result.files == 1


def test_runs_store_what_they_trained_on(twinkle_home, cancer_csv, tmp_path) -> None:
    result = Trainer("tabular-mlp", hyperparams={"max_epochs": 1}, verbose=False).fit(str(cancer_csv))
    copy = tmp_path / "copy.csv"
    copy.write_bytes(cancer_csv.read_bytes().replace(b",1\n", b",0\n", 1))  # one label flipped
    with pytest.raises(DataVerificationError, match="changed: copy.csv|removed: cancer.csv"):
        verify_data(str(copy), expected_md5=result.data_fingerprint)


def test_cli(twinkle_home, dataset) -> None:
    runner = CliRunner()
    ok = runner.invoke(main, ["verify-data", str(dataset)])
    md5 = ok.output.split()[0]
    assert ok.exit_code == 0 and md5.startswith("md5:") and "3 file(s)" in ok.output
    assert runner.invoke(main, ["verify-data", str(dataset), "--md5", md5]).output.rstrip().endswith("OK")
    (dataset / "meta.json").write_text('{"v": 2}')
    bad = runner.invoke(main, ["verify-data", str(dataset), "--md5", md5])
    assert bad.exit_code == 1 and "changed: meta.json" in bad.output
