"""Bad input raises a named TwinkleError that names the thing and the fix, and leaves no finished run."""

from __future__ import annotations

import io
import pickle
from pathlib import Path

import pandas as pd
import pytest
import torch

from twinkle_core import RunStore, Trainer
from twinkle_core.data.errors import (
    DataError,
    DataNotFoundError,
    EmptyDataError,
    MissingColumnError,
    MissingValueError,
    NonNumericError,
)
from twinkle_core.engine.checkpoints import CheckpointError, UnsafeCheckpointError
from twinkle_core.errors import TwinkleError, UnknownComponentError, UnknownTaskError
from twinkle_core.hyperparams import HyperparameterError
from twinkle_core.uris import StorePathError

FAST = {"max_epochs": 1, "progress_bar": False}


@pytest.fixture
def frame(cancer_csv) -> pd.DataFrame:
    return pd.read_csv(cancer_csv)


def _fit(data: Path | str, **hp):
    return Trainer("tabular-mlp", hyperparams={**FAST, **hp}, verbose=False).fit(str(data))


def _no_finished_runs(home: Path) -> None:
    assert not [r for r in RunStore(str(home)).list() if r.status == "finished"]


def test_missing_file(twinkle_home, tmp_path) -> None:
    with pytest.raises(DataNotFoundError, match=r"data '.*nope\.csv' does not exist; check the path"):
        _fit(tmp_path / "nope.csv")
    _no_finished_runs(twinkle_home)


def test_a_folder_given_for_a_table_is_named_with_the_files_it_holds(twinkle_home, tmp_path, cancer_csv) -> None:
    """Proves a folder passed where a tabular algorithm reads one file is a DataError naming the folder and
    suggesting the table inside it (it was a raw IsADirectoryError), and that no run is created."""
    folder = tmp_path / "tables.csv"
    folder.mkdir()
    (folder / "cancer.csv").write_bytes(cancer_csv.read_bytes())
    with pytest.raises(DataError, match=r"'.*tables\.csv' is a folder; TabularProcessor reads one CSV or Parquet file"
                                        r".*e\.g\. '.*tables\.csv/cancer\.csv' \(the folder holds cancer\.csv\)"):
        _fit(folder)
    assert RunStore(str(twinkle_home)).list() == []


@pytest.mark.parametrize("content", ["", "a,b,target\n"])
def test_empty_csv(twinkle_home, tmp_path, content) -> None:
    path = tmp_path / "empty.csv"
    path.write_text(content)
    with pytest.raises(EmptyDataError, match="empty.csv"):
        _fit(path)
    _no_finished_runs(twinkle_home)


def test_missing_label_column(twinkle_home, tmp_path, frame) -> None:
    path = tmp_path / "nolabel.csv"
    frame.drop(columns=["target"]).to_csv(path, index=False)
    with pytest.raises(MissingColumnError, match="has no label column .* Pass label_column=<name>"):
        _fit(path)
    with pytest.raises(MissingColumnError, match="label column 'diagnosis' is not in .*nolabel.csv"):
        _fit(path, label_column="diagnosis")
    _no_finished_runs(twinkle_home)


def test_non_numeric_feature(twinkle_home, tmp_path, frame) -> None:
    frame["mean radius"] = frame["mean radius"].astype(object)
    frame.loc[7, "mean radius"] = "big"
    path = tmp_path / "text.csv"
    frame.to_csv(path, index=False)
    with pytest.raises(NonNumericError, match=r"feature column 'mean radius' .* \('big' in data row 8\); encode"):
        _fit(path)
    _no_finished_runs(twinkle_home)


def test_nan_values(twinkle_home, tmp_path, frame) -> None:
    frame.loc[[3, 9], "mean texture"] = float("nan")
    path = tmp_path / "nan.csv"
    frame.to_csv(path, index=False)
    with pytest.raises(MissingValueError, match=r"column 'mean texture' .* 2 missing .* row\(s\) 4, 10; fill or drop"):
        _fit(path)
    _no_finished_runs(twinkle_home)


def test_unknown_algorithm(twinkle_home) -> None:
    with pytest.raises(UnknownComponentError, match="unknown algorithm 'tabular-mpl'; did you mean 'tabular-mlp'"):
        Trainer("tabular-mpl")


def test_unknown_hyperparameter(twinkle_home) -> None:
    with pytest.raises(HyperparameterError, match=r"unknown hyperparameter 'learning_rate'\. Valid ones .* lr,"):
        Trainer("tabular-mlp", hyperparams={"learning_rate": 0.1})


@pytest.mark.parametrize(("key", "value"), [("lr", "fast"), ("max_epochs", 2.5), ("hidden_sizes", "a,b")])
def test_wrong_hyperparameter_type(twinkle_home, key, value, cancer_csv) -> None:
    with pytest.raises(HyperparameterError, match=f"hyperparameter '{key}' expects"):
        Trainer("tabular-mlp", hyperparams={key: value}).fit(str(cancer_csv))
    _no_finished_runs(twinkle_home)


def test_unknown_task(twinkle_home) -> None:
    with pytest.raises(UnknownTaskError, match="unknown task 'tabular_clasification'; did you mean 'tabular_classification'"):
        Trainer("tabular-mlp", task="tabular_clasification")
    with pytest.raises(TwinkleError, match="serves tabular_classification, tabular_regression, not image_classification"):
        Trainer("tabular-mlp", task="image_classification")


@pytest.mark.parametrize(
    "uri",
    ["twinkle://tester/default/../../etc/passwd", "twinkle:///etc/passwd", "twinkle://tester/./x/run1",
     "twinkle://tester\\..\\x/run1"],
)
def test_store_path_cannot_escape(twinkle_home, uri) -> None:
    with pytest.raises(StorePathError, match="store"):
        _fit(uri)
    _no_finished_runs(twinkle_home)


@pytest.fixture
def run_checkpoint(twinkle_home, cancer_csv) -> tuple[str, dict]:
    result = _fit(cancer_csv)
    checkpoint = torch.load(result.last_checkpoint, weights_only=True)
    return result.run_uri, checkpoint


def test_corrupt_checkpoint(run_checkpoint, tmp_path) -> None:
    run_uri, _ = run_checkpoint
    last = Path(RunStore().run_dir(RunStore().run_id(run_uri))) / "checkpoints" / "last.ckpt"
    broken = tmp_path / "broken.ckpt"
    broken.write_bytes(last.read_bytes()[:2000])
    with pytest.raises(CheckpointError, match="broken.ckpt' is corrupt"):
        Trainer.from_checkpoint(str(broken))


def test_checkpoint_of_another_algorithm(run_checkpoint, twinkle_plugin) -> None:
    from twinkle_core import hookimpl

    class Other:
        """Registers a second algorithm."""

        @hookimpl
        def register_algorithms(self, register):
            """Register."""
            register("other-mlp", "twinkle_core.algorithms.tabular_mlp:TabularMLP", task="tabular_classification")

    twinkle_plugin(Other(), name="other")
    run_uri, _ = run_checkpoint
    with pytest.raises(CheckpointError, match="is of algorithm 'tabular-mlp', not 'other-mlp'"):
        Trainer.from_checkpoint(run_uri, algorithm="other-mlp")


class Payload:
    """Unpickling this would run code."""

    def __reduce__(self):
        return (print, ("pwned",))


def test_checkpoint_that_would_unpickle_code(run_checkpoint, tmp_path, capsys) -> None:
    _, checkpoint = run_checkpoint
    checkpoint["callbacks"] = {"evil": Payload()}
    path = tmp_path / "evil.ckpt"
    buffer = io.BytesIO()
    torch.save(checkpoint, buffer, pickle_protocol=pickle.HIGHEST_PROTOCOL)
    path.write_bytes(buffer.getvalue())
    with pytest.raises(UnsafeCheckpointError, match="would run code when loaded"):
        Trainer.from_checkpoint(str(path))
    assert "pwned" not in capsys.readouterr().out


def test_checkpoint_not_written_by_twinkle(run_checkpoint, tmp_path) -> None:
    _, checkpoint = run_checkpoint
    del checkpoint["twinkle"]
    path = tmp_path / "plain.ckpt"
    torch.save(checkpoint, path)
    with pytest.raises(CheckpointError, match="was not written by Twinkle"):
        Trainer.from_checkpoint(str(path))


def test_failure_during_training_marks_run_failed(twinkle_home, cancer_csv) -> None:
    import lightning as L

    class Boom(L.Callback):
        def on_train_batch_start(self, *args):
            raise RuntimeError("device lost")

    with pytest.raises(RuntimeError, match="device lost"):
        Trainer("tabular-mlp", hyperparams=FAST, verbose=False, callbacks=[Boom()]).fit(str(cancer_csv))
    (record,) = RunStore().list()
    assert record.status == "failed" and "device lost" in record.error


@pytest.mark.parametrize("field,path", [("algorithm", "os:system"), ("algorithm", "xmlrpc.server:SimpleXMLRPCServer"),
                                        ("data_processor_class", "os:system"),
                                        ("data_processor_class", "xmlrpc.server:SimpleXMLRPCServer")])
def test_a_checkpoint_naming_an_unregistered_module_is_refused_before_any_import(run_checkpoint, tmp_path, field,
                                                                                  path) -> None:
    import sys

    _, checkpoint = run_checkpoint
    checkpoint["twinkle"] = {**checkpoint["twinkle"], field: path}
    crafted = tmp_path / "crafted.ckpt"
    torch.save(checkpoint, crafted)
    before = set(sys.modules)
    with pytest.raises(CheckpointError, match=f"names the module path '{path}'.*does not import modules"):
        Trainer.from_checkpoint(str(crafted))
    assert set(sys.modules) - before == set()


def test_a_newer_record_version_is_named(run_checkpoint, tmp_path) -> None:
    _, checkpoint = run_checkpoint
    checkpoint["twinkle"] = {**checkpoint["twinkle"], "version": 99}
    path = tmp_path / "future.ckpt"
    torch.save(checkpoint, path)
    with pytest.raises(CheckpointError, match="record version 99"):
        Trainer.from_checkpoint(str(path))


def test_a_checkpoint_of_an_unregistered_class_continues_when_the_class_is_passed(twinkle_home, cancer_csv) -> None:
    from twinkle_core.algorithms.tabular_mlp import TabularMLP

    class MyMLP(TabularMLP):
        """A user's subclass, registered nowhere."""

    result = Trainer(MyMLP, hyperparams=FAST, verbose=False).fit(str(cancer_csv))
    with pytest.raises(CheckpointError, match="is not a registered algorithm.*algorithm=YourAlgorithm"):
        Trainer.from_checkpoint(result.run_uri)
    child = Trainer.from_checkpoint(result.run_uri, algorithm=MyMLP, hyperparams={"max_epochs": 1}, verbose=False).fit()
    assert child.parent == result.run_uri
    with pytest.raises(CheckpointError, match="is of algorithm class"):
        Trainer.from_checkpoint(result.run_uri, algorithm=TabularMLP)


@pytest.mark.parametrize(("csv_text", "message"), [
    ("alpha,alpha,label\n1,2,0\n3,4,1\n5,6,0\n7,8,1\n", "names column\\(s\\) 'alpha' more than once"),
    ("x,label\n" + "".join(f"{i},{i}\n" for i in range(20)), "looks like an id, not a class"),
    ("x,label\n" + "".join(f"{i},{'a' if i < 10 else 'b'}\n" for i in range(20)) + "99,c\n",
     "1 class\\(es\\) with a single row \\('c'\\)"),
])
def test_data_that_would_be_accepted_but_wrong_is_named(twinkle_home, tmp_path, csv_text, message) -> None:
    path = tmp_path / "table.csv"
    path.write_text(csv_text)
    with pytest.raises(DataError, match=message):
        Trainer("tabular-mlp", hyperparams={"max_epochs": 1}, verbose=False).fit(str(path))
    assert RunStore().list() == []


def test_a_module_path_as_an_algorithm_name_imports_nothing(twinkle_home) -> None:
    import sys

    before = set(sys.modules)
    with pytest.raises(UnknownComponentError):
        Trainer("xmlrpc.server:SimpleXMLRPCServer")  # a name from a job file or a CLI argument
    assert set(sys.modules) - before == set()
