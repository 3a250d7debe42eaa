"""Hugging Face datasets as data (``twinkle_core.data.hf``): folders written by ``datasets`` itself — save_to_disk
and the Hub's Parquet layout — train the tabular task to the same metrics as the CSV they came from; an evaluation
reads the test split; nothing is ever downloaded: hf:// URIs and Hub ids are refused with how to point at a copy."""

from __future__ import annotations

from pathlib import Path

import pandas as pd
import pytest

from twinkle_core import Trainer
from twinkle_core.data import DataError, DataNotFoundError, open_hf_dataset
from twinkle_core.errors import TwinkleError


def _fit(data: str, home: Path) -> tuple[dict[str, float], str]:
    result = Trainer("tabular-mlp", home=str(home), verbose=False, progress_bar=False,
                     hyperparams={"max_epochs": 2, "probe": False}).fit(data)
    return {k: v for k, v in result.metrics.items() if k.startswith("val_")}, result.data_fingerprint


def test_a_datasets_folder_trains_to_the_same_metrics_as_its_csv_and_evaluates_its_test_split(
        tmp_path: Path, cancer_csv: str) -> None:
    """The breast-cancer table as a DatasetDict saved with save_to_disk (train: every row; test: 60 rows) and in
    the Hub's layout with its label a ClassLabel (Parquet shards named by split, no card): each fit's validation
    metrics equal the CSV's (with the label's class names for the ClassLabel one), its fingerprint is the folder's;
    evaluate on the folder scores its test split; a folder whose splits include no train is refused by name."""
    from datasets import ClassLabel, Dataset, DatasetDict

    frame = pd.read_csv(cancer_csv)
    saved = tmp_path / "saved"
    DatasetDict({"train": Dataset.from_pandas(frame), "test": Dataset.from_pandas(frame.iloc[:60])}).save_to_disk(
        str(saved))
    want, csv_fingerprint = _fit(cancer_csv, tmp_path / "csv")
    got, fingerprint = _fit(str(saved), tmp_path / "saved-home")
    assert got == pytest.approx(want, abs=1e-6) and got["val_accuracy"] > 0.9
    assert fingerprint != csv_fingerprint and fingerprint.startswith("md5:")

    named = frame.assign(target=frame["target"].map({0: "malignant", 1: "benign"}))
    named_csv = tmp_path / "named.csv"
    named.to_csv(named_csv, index=False)
    hub = tmp_path / "hub"
    (hub / "data").mkdir(parents=True)
    labelled = Dataset.from_pandas(frame).cast_column("target", ClassLabel(names=["malignant", "benign"]))
    labelled.to_parquet(str(hub / "data" / "train-00000-of-00001.parquet"))
    labelled.select(range(40)).to_parquet(str(hub / "data" / "test-00000-of-00001.parquet"))
    (hub / "dataset_info.json").write_text("{}")
    assert open_hf_dataset(str(hub)).class_names("target") == ["malignant", "benign"]
    want, _ = _fit(str(named_csv), tmp_path / "named-home")
    trainer = Trainer("tabular-mlp", home=str(tmp_path / "hub-home"), verbose=False, progress_bar=False,
                      hyperparams={"max_epochs": 2, "probe": False})
    result = trainer.fit(str(hub))
    assert {k: v for k, v in result.metrics.items() if k.startswith("val_")} == pytest.approx(want, abs=1e-6)
    evaluation = trainer.evaluate(str(hub))
    assert evaluation.samples == 40 and evaluation.metrics["accuracy"] > 0.8

    no_train = tmp_path / "no-train"
    DatasetDict({"a": Dataset.from_pandas(frame.iloc[:50]), "b": Dataset.from_pandas(frame.iloc[50:100])}
                ).save_to_disk(str(no_train))
    with pytest.raises(DataError, match="splits a, b and none is 'train'"):
        Trainer("tabular-mlp", home=str(tmp_path / "x"), verbose=False).fit(str(no_train))


def test_nothing_is_downloaded_hub_uris_and_ids_are_refused_with_how_to_point_at_a_copy(tmp_path: Path) -> None:
    """``hf://datasets/...`` and a Hub id that is not a local folder are refused before any run is made, saying how
    to fetch the dataset once and pass its folder."""
    trainer = Trainer("tabular-mlp", home=str(tmp_path), verbose=False)
    with pytest.raises(TwinkleError, match="Hugging Face Hub; nothing is downloaded at run time.*save_to_disk"):
        trainer.fit("hf://datasets/scikit-learn/breast-cancer-wisconsin")
    with pytest.raises(DataNotFoundError, match="Hugging Face Hub dataset id, nothing is downloaded"):
        trainer.fit("scikit-learn/breast-cancer-wisconsin")
    assert not (tmp_path / "runs").exists() or not any((tmp_path / "runs").rglob("plan.json"))
