"""The engine end to end on real data: breast-cancer CSV → tabular-mlp → child run → verified exports."""

from __future__ import annotations

import json
from pathlib import Path

import pandas as pd
import pytest
import torch

from twinkle_core import RunStore, Trainer
from twinkle_core.algorithms.tabular_mlp import TabularMLP
from twinkle_core.errors import TwinkleError

HP = {"lr": 1e-3, "batch_size": 64, "max_epochs": 30}


@pytest.fixture(scope="module")
def trained(tmp_path_factory, cancer_csv):
    """One trained run shared by this module's tests (about 5 s on one thread)."""
    home = tmp_path_factory.mktemp("home")
    mp = pytest.MonkeyPatch()
    mp.setenv("TWINKLE_HOME", str(home))
    mp.setenv("TWINKLE_USER", "tester")
    trainer = Trainer(algorithm="tabular-mlp", task="tabular_classification", hyperparams=HP, progress_bar=False)
    result = trainer.fit(data=str(cancer_csv))
    yield trainer, result, home
    mp.undo()


@pytest.fixture
def own_store(trained, tmp_path, monkeypatch) -> Path:
    """A copy of the shared run's store, made this test's ``TWINKLE_HOME``: for tests that add runs to it."""
    from twinkle_core.testing import copy_of

    home = copy_of(trained[2], tmp_path / "store")
    monkeypatch.setenv("TWINKLE_HOME", str(home))
    monkeypatch.setenv("TWINKLE_USER", "tester")
    return home


def test_reaches_accuracy_and_records_the_run(trained) -> None:
    trainer, result, home = trained
    assert result.status == "finished"
    assert result.best_metric >= 0.93 and result.monitor == "val_accuracy"
    assert result.metrics["val_accuracy"] >= 0.93
    assert result.run_uri == "twinkle://tester/default/run1"
    run_dir = Path(result.run_dir)
    assert (run_dir / "checkpoints" / "best.ckpt").exists() and (run_dir / "checkpoints" / "last.ckpt").exists()
    metrics = pd.read_csv(run_dir / "logs" / "metrics.csv")
    assert {"train_loss_epoch", "val_loss", "val_accuracy"} <= set(metrics.columns)
    assert metrics["val_loss"].dropna().iloc[-1] < metrics["val_loss"].dropna().iloc[0]
    assert (run_dir / "curves.png").read_bytes()[:4] == b"\x89PNG"
    plan = json.loads((run_dir / "plan.json").read_text())
    assert plan["precision"] == "32-true" and plan["micro_batch_size"] == 64
    record = RunStore(str(home)).get(result.run_uri)
    assert record.status == "finished"
    assert record.data_fingerprint == result.data_fingerprint and result.data_fingerprint.startswith("md5:")
    assert record.hyperparams["lr"] == 1e-3 and record.hyperparams["max_epochs"] == 30
    assert record.plan["decisions"][0]["name"] == "accelerator"


@pytest.mark.parametrize(
    ("fmt", "options", "suffix"),
    [("onnx", {}, ".onnx"), ("onnx", {"opset_version": 15}, ".onnx"), ("torchscript", {}, ".pt")],
)
def test_fp32_exports_match_the_model(trained, tmp_path, fmt, options, suffix) -> None:
    trainer, result, home = trained
    output = str(tmp_path / f"model{suffix}")
    export = trainer.export(format=fmt, output=output, **options)
    assert Path(output).exists() and export.path == output
    assert export.max_abs_diff <= 1e-4
    assert export.metric == "accuracy" and export.metric_delta == 0.0
    assert export.samples == 113  # the whole validation split (20 %, stratified)
    if fmt == "onnx":
        import onnx

        opset = next(o.version for o in onnx.load(output).opset_import if o.domain in ("", "ai.onnx"))
        assert opset == options.get("opset_version", 17) == export.details["opset"]
        assert not list(tmp_path.glob("*.data"))  # one self-contained file
    exports = RunStore(str(home)).get(result.run_uri).exports
    assert any(e["path"] == output and e["format"] == fmt for e in exports)
    # it describes itself: its inference card in its own metadata and, with the verification, in a JSON beside it
    if fmt == "onnx":
        card = json.loads({p.key: p.value for p in onnx.load(output).metadata_props}["twinkle"])
    else:
        import torch

        files = {"twinkle.json": ""}
        torch.jit.load(output, _extra_files=files)
        card = json.loads(files["twinkle.json"])
    assert card["task"] == "tabular_classification" and card["class_names"] == ["0", "1"]
    assert card["inputs"] == [{"name": "input", "dtype": "float32", "shape": ["batch", 30]}]
    assert card["preprocessing"]["reader"] == "table" and len(card["preprocessing"]["columns"]) == 30
    assert card["preprocessing"]["scaling"] == "inside the model" and card["run"] == result.run_uri
    beside = json.loads(Path(output + ".json").read_text())
    assert beside["inference"] == card and beside["max_abs_diff"] == export.max_abs_diff


def test_int8_onnx_keeps_accuracy(trained) -> None:
    trainer, result, _ = trained
    export = trainer.export(format="onnx", quantize=True)
    assert export.path.endswith("exports/model-int8.onnx")
    assert export.quantized and export.details["quantization"] == "static QDQ int8"
    assert export.details["calibration_samples"] == 256
    assert export.metric_delta >= -0.01
    import onnx

    ops = {node.op_type for node in onnx.load(export.path).graph.node}
    assert {"QuantizeLinear", "DequantizeLinear"} <= ops


def test_unsupported_opset_and_torchscript_quantize_are_named_errors(trained, tmp_path) -> None:
    """Options an exporter cannot honour, and an output under a file (issue 53: FileExistsError from deep in the
    export before), are named errors that write nothing."""
    trainer, _, _ = trained
    with pytest.raises(TwinkleError, match="opset_version=30 cannot be written exactly"):
        trainer.export(format="onnx", opset_version=30)
    with pytest.raises(TwinkleError, match="quantize=True is not supported for torchscript"):
        trainer.export(format="torchscript", quantize=True)
    (tmp_path / "notes.txt").write_text("a file, not a folder")
    with pytest.raises(TwinkleError, match=r"cannot be written: '.*notes\.txt' is a file, not a folder"):
        trainer.export(format="onnx", output=str(tmp_path / "notes.txt" / "deeper" / "model.onnx"))
    assert sorted(p.name for p in tmp_path.iterdir()) == ["notes.txt"]


def test_synthesize_is_a_named_error_for_a_model_that_makes_no_audio(trained) -> None:
    trainer, _, _ = trained
    with pytest.raises(TwinkleError, match="TabularMLP does not generate audio"):
        trainer.synthesize("hello")


def test_generate_is_a_named_error_for_a_model_that_writes_no_text(trained) -> None:
    """Trainer.generate names the algorithm when it defines no generate(prompt, ...)."""
    trainer, _, _ = trained
    with pytest.raises(TwinkleError, match="TabularMLP does not generate text"):
        trainer.generate("hello")


def test_wav_bytes_are_16_bit_pcm() -> None:
    import io
    import wave

    import numpy as np

    from twinkle_core.predictions import wav_bytes

    with wave.open(io.BytesIO(wav_bytes(np.array([0.0, 0.5, -1.5], dtype=np.float32), 16000))) as read:
        assert (read.getnchannels(), read.getsampwidth(), read.getframerate(), read.getnframes()) == (1, 2, 16000, 3)
        assert np.frombuffer(read.readframes(3), "<i2").tolist() == [0, 16383, -32767]


def test_continue_on_new_data_makes_a_child_run(trained, own_store, tmp_path, cancer_csv) -> None:
    _, result, _ = trained
    home = own_store
    new_data = tmp_path / "more.csv"
    pd.read_csv(cancer_csv).sample(frac=1.0, random_state=1).to_csv(new_data, index=False)
    child = Trainer.from_checkpoint(result.run_uri, new_data=str(new_data), hyperparams={"max_epochs": 2})
    assert child.continuation.mode == "continue"
    child_result = child.fit()
    assert child_result.parent == result.run_uri
    assert child_result.run_uri == "twinkle://tester/default/run2"
    record = RunStore(str(home)).get(child_result.run_uri)
    assert record.parent == "tester/default/run1" and record.mode == "continue"
    assert record.data_uri == str(new_data) and record.hyperparams["max_epochs"] == 2
    assert child_result.best_metric >= 0.93  # starts from the trained weights


def test_finetune_and_resume_modes(trained, own_store, tmp_path, cancer_csv) -> None:
    _, result, _ = trained
    finetune = Trainer.from_checkpoint(result.run_uri, mode="finetune", hyperparams={"max_epochs": 1, "lr": 1e-4})
    assert finetune.continuation.optimizer_states == []
    assert finetune.continuation.checkpoint_uri.endswith("best.ckpt")
    changed = tmp_path / "changed.csv"
    pd.read_csv(cancer_csv).iloc[:400].to_csv(changed, index=False)
    resume = Trainer.from_checkpoint(result.run_uri, new_data=str(changed), mode="resume")
    with pytest.raises(TwinkleError, match="resume needs the data the checkpoint trained on"):
        resume.fit()
    with pytest.raises(TwinkleError, match="unknown mode 'restart'"):
        Trainer.from_checkpoint(result.run_uri, mode="restart")
    # the best checkpoint keeps the weights, not the optimizer's moments (a third of the bytes): it cannot resume
    best, last = (torch.load(path, weights_only=True) for path in (result.best_checkpoint, result.last_checkpoint))
    assert "optimizer_states" not in best and best["twinkle_weights_only"] and best["twinkle"] == last["twinkle"]
    assert last["optimizer_states"] and set(best["state_dict"]) == set(last["state_dict"])
    with pytest.raises(TwinkleError, match="best checkpoint: it keeps the weights, not the optimizer's state"):
        Trainer.from_checkpoint(result.best_checkpoint, mode="resume")


def test_regression_learns(twinkle_home, tmp_path) -> None:
    from sklearn.datasets import load_diabetes

    frame = load_diabetes(as_frame=True).frame
    path = tmp_path / "diabetes.parquet"
    frame.to_parquet(path)
    result = Trainer(
        "tabular-mlp", task="tabular_regression",
        hyperparams={"max_epochs": 40, "lr": 3e-3, "batch_size": 32}, progress_bar=False,
    ).fit(str(path))
    baseline = float(((frame["target"] - frame["target"].mean()) ** 2).mean())
    assert result.monitor == "val_loss"
    assert result.metrics["val_loss"] < 0.6 * baseline  # well below predicting the mean


class _Staged(TabularMLP):
    """A staged algorithm: early stopping may not end it before epoch 4."""

    @property
    def min_epochs(self) -> int:
        return 4


@pytest.mark.parametrize(("algorithm", "epochs"), [(TabularMLP, 2), (_Staged, 4)])
def test_early_stopping_waits_for_the_algorithms_min_epochs(cancer_csv, twinkle_home, algorithm, epochs) -> None:
    # lr 0: validation never improves, so patience 1 stops after the second epoch unless min_epochs says wait
    trainer = Trainer(algorithm=algorithm, task="tabular_classification", progress_bar=False, verbose=False,
                      hyperparams={"lr": 1e-30, "max_epochs": 10, "early_stopping_patience": 1})
    result = trainer.fit(data=str(cancer_csv))
    metrics = pd.read_csv(Path(result.run_dir) / "logs" / "metrics.csv")
    assert metrics["epoch"].max() + 1 == epochs


def test_a_processor_is_prepared_with_a_context_and_still_takes_a_0_2_seed(cancer_csv) -> None:
    """``prepare(uri, PrepareContext(seed=...))`` splits with the context's seed; a seed passed in the context's
    place (0.2's ``prepare(uri, seed)``, e.g. a 0.2 subclass calling ``super().prepare(uri, seed)``) still splits
    the same, with a ``DeprecationWarning``; another seed splits differently."""
    import numpy as np

    from twinkle_core.data import PrepareContext
    from twinkle_core.data.tabular import TabularProcessor

    processor = TabularProcessor(task="tabular_classification")
    new = processor.prepare(str(cancer_csv), PrepareContext(seed=3))
    with pytest.warns(DeprecationWarning, match="a seed in context's place is 0.2's call"):
        old = processor.prepare(str(cancer_csv), 3)
    other = processor.prepare(str(cancer_csv), PrepareContext(seed=4))
    rows = lambda prepared: np.asarray([float(x[0]) for x, _ in prepared.val])  # noqa: E731
    assert np.array_equal(rows(new), rows(old)) and not np.array_equal(rows(new), rows(other))
    assert new.sample_counts() == {"train_samples": len(new.train), "val_samples": len(new.val)}


class _Noting(TabularMLP):
    """A tabular MLP that writes a note into its run at every validation (``Algorithm.write_to_run``)."""

    def on_validation_epoch_end(self) -> None:
        if not self.trainer.sanity_checking:
            self.write_to_run(f"notes/epoch-{self.current_epoch}.txt", f"epoch {self.current_epoch}")


def test_write_to_run_puts_an_algorithms_files_in_its_run_and_refuses_paths_out_of_it(cancer_csv, tmp_path) -> None:
    """Files an algorithm writes while it trains land in its run's folder, once per validation; a path that is
    absolute or climbs out is a named error; outside a fit nothing is written."""
    trainer = Trainer(algorithm=_Noting, task="tabular_classification", home=str(tmp_path / "home"),
                      hyperparams={"max_epochs": 2, "batch_size": 128}, progress_bar=False, verbose=False)
    result = trainer.fit(data=str(cancer_csv))
    notes = sorted(p.name for p in (Path(result.run_dir) / "notes").iterdir())
    assert notes == ["epoch-0.txt", "epoch-1.txt"]
    assert (Path(result.run_dir) / "notes" / "epoch-1.txt").read_text() == "epoch 1"
    assert _Noting().write_to_run("notes/x.txt", "x") is None  # no trainer attached
    for bad in ["/etc/passwd", "../escape.txt", "notes/../../x", "a//b"]:
        with pytest.raises(TwinkleError, match="not a relative path inside the run's folder"):
            _Noting().write_to_run(bad, "x")


def _validation_rows(cancer_csv: Path) -> pd.DataFrame:
    """The rows the run held out for validation: the processor's split (20 %, stratified, seed 0)."""
    from twinkle_core.data import split_indices

    frame = pd.read_csv(cancer_csv)
    _, val = split_indices(len(frame), 0.2, 0, frame["target"].to_numpy())
    return frame.iloc[val]


def test_evaluate_on_the_validation_rows_reproduces_the_runs_validation_accuracy(trained, own_store, cancer_csv,
                                                                                tmp_path) -> None:
    """``evaluate`` reads a test set with the run's spec and scores the best checkpoint: on the rows the run held
    out, its accuracy equals the best validation accuracy within 1e-6; the per-class table and the confusion matrix
    agree with each other and the counts, the plot is a PNG, the evaluation is stored as ``evaluations/1/`` and a
    second one as ``evaluations/2/``, and ``twinkle runs show`` lists them."""
    from click.testing import CliRunner

    from twinkle_core.cli import main

    _, result, _ = trained
    rows = _validation_rows(cancer_csv)
    test_csv = tmp_path / "held-out.csv"
    rows.sample(frac=1.0, random_state=1)[list(rows.columns)[::-1]].to_csv(test_csv, index=False)  # any order
    first = Trainer.from_checkpoint(result.run_uri, verbose=False).evaluate(str(test_csv))
    assert first.samples == len(rows) and first.run_uri == result.run_uri
    assert first.checkpoint.endswith("best.ckpt")
    assert abs(first.metrics["accuracy"] - result.best_metric) < 1e-6
    counts = first.tables["confusion_matrix"]["counts"]
    assert sum(map(sum, counts)) == len(rows) and first.tables["confusion_matrix"]["classes"] == ["0", "1"]
    per_class = first.tables["per_class"]
    assert [row["support"] for row in per_class] == [sum(row) for row in counts]
    assert per_class[1]["recall"] == pytest.approx(counts[1][1] / sum(counts[1]))
    assert sum(counts[i][i] for i in range(2)) / len(rows) == pytest.approx(first.metrics["accuracy"])
    folder = Path(first.folder)
    assert folder == Path(result.run_dir.replace(str(trained[2]), str(own_store))) / "evaluations" / "1"
    assert (folder / "confusion_matrix.png").read_bytes()[:4] == b"\x89PNG"
    assert json.loads((folder / "evaluation.json").read_text())["data_fingerprint"] == first.data_fingerprint

    shown = CliRunner().invoke(main, ["evaluate", result.run_uri, "--data", str(test_csv)])
    assert shown.exit_code == 0, shown.output
    assert "accuracy" in shown.output and "evaluations/2" in shown.output
    listed = CliRunner().invoke(main, ["runs", "show", result.run_uri])
    assert "evaluation 1:" in listed.output and "evaluation 2:" in listed.output


def test_evaluate_names_what_differs_from_the_run(trained, own_store, cancer_csv, tmp_path) -> None:
    """A test set of the run's format but not its shape is named with the fix, before any scoring: a missing and an
    extra feature column, no label column, a folder for evaluate and predict; rows of a class the run never saw
    are left out and reported."""
    from twinkle_core.data import DataError, MissingColumnError

    _, result, _ = trained
    trainer = Trainer.from_checkpoint(result.run_uri, verbose=False)
    rows = _validation_rows(cancer_csv)
    cases = {"missing.csv": (rows.drop(columns=["mean radius"]), MissingColumnError,
                             "lacks 1 feature column.*mean radius"),
             "extra.csv": (rows.assign(patient=1), DataError, "did not train on: patient"),
             "unlabelled.csv": (rows.drop(columns=["target"]), DataError, "carries no targets")}
    for name, (frame, error, message) in cases.items():
        frame.to_csv(tmp_path / name, index=False)
        with pytest.raises(error, match=message):
            trainer.evaluate(str(tmp_path / name))
    with pytest.raises(DataError, match="is a folder; TabularProcessor reads one CSV or Parquet file.*e.g. '.*/"
                                        "extra.csv'"):  # a folder: named, with a table in it (issue 53)
        trainer.evaluate(str(tmp_path))
    with pytest.raises(DataError, match="is a folder"):
        trainer.predict(str(tmp_path), str(tmp_path / "out" / "rows.csv"))
    unseen = pd.concat([rows, rows.head(3).assign(target=7)])
    unseen.to_csv(tmp_path / "unseen.csv", index=False)
    evaluation = trainer.evaluate(str(tmp_path / "unseen.csv"))
    assert evaluation.details["unseen_classes"] == {"7": 3} and evaluation.samples == len(rows)
    assert abs(evaluation.metrics["accuracy"] - result.best_metric) < 1e-6


def test_predict_writes_every_row_in_order_and_agrees_with_evaluate(trained, own_store, cancer_csv, tmp_path) -> None:
    """``predict`` writes one row per input row, in input order, with its data-row id, the class, its probability
    and every class's (summing to 1); scored against the labels they give exactly ``evaluate``'s accuracy and
    confusion matrix; in-memory rows (a DataFrame without labels) give the same classes; Parquet and JSON lines
    hold the same, and ``.json`` an array of the same rows; an existing output is refused unless overwritten, an
    unknown suffix is refused, ``draw`` (boxes) is refused for a classifier."""
    from click.testing import CliRunner

    from twinkle_core.cli import main

    _, result, _ = trained
    rows = _validation_rows(cancer_csv)
    test_csv = tmp_path / "held-out.csv"
    rows.to_csv(test_csv, index=False)
    trainer = Trainer.from_checkpoint(result.run_uri, verbose=False)
    evaluation = trainer.evaluate(str(test_csv))
    written = trainer.predict(str(test_csv), batch_size=32)  # several batches
    assert written.output.endswith("predictions/1/predictions.csv") and written.count == len(rows)
    table = pd.read_csv(written.output)
    assert written.columns == ["id", "class", "probability", "p_0", "p_1"] == list(table.columns)
    assert table["id"].tolist() == list(range(1, len(rows) + 1))
    assert (table["p_0"] + table["p_1"]).round(6).eq(1.0).all()
    assert (table[["p_0", "p_1"]].max(axis=1) == table["probability"]).all()
    truth = rows["target"].to_numpy()
    assert (table["class"].to_numpy() == truth).mean() == pytest.approx(evaluation.metrics["accuracy"], abs=1e-6)
    counts = [[int(((truth == t) & (table["class"].to_numpy() == p)).sum()) for p in (0, 1)] for t in (0, 1)]
    assert counts == evaluation.tables["confusion_matrix"]["counts"]

    frame = rows.drop(columns=["target"])
    in_memory = trainer.predict(frame, str(tmp_path / "memory.parquet"))
    classes = table["class"].astype(str).tolist()  # class names are text; the CSV reader took them for numbers
    assert pd.read_parquet(in_memory.output)["class"].tolist() == classes
    lines = trainer.predict(str(test_csv), str(tmp_path / "rows.jsonl"))
    assert [json.loads(line)["class"] for line in Path(lines.output).read_text().splitlines()] == classes
    with pytest.raises(TwinkleError, match="exists; pass overwrite=True"):
        trainer.predict(str(test_csv), str(tmp_path / "rows.jsonl"))
    assert trainer.predict(str(test_csv), str(tmp_path / "rows.jsonl"), overwrite=True).count == len(rows)
    with pytest.raises(TwinkleError, match="ending in .csv, .parquet, .jsonl"):
        trainer.predict(str(test_csv), str(tmp_path / "rows.txt"))
    array = trainer.predict(str(test_csv), str(tmp_path / "rows.json"))
    assert [row["class"] for row in json.loads(Path(array.output).read_text())] == classes
    with pytest.raises(TwinkleError, match="draw=True draws boxes"):
        trainer.predict(str(test_csv), str(tmp_path / "drawn.csv"), draw=True)

    shown = CliRunner().invoke(main, ["predict", result.run_uri, "--data", str(test_csv), "-o", str(tmp_path / "cli.csv")])
    assert shown.exit_code == 0, shown.output
    assert f"Predicted {len(rows)} samples" in shown.output
    assert pd.read_csv(tmp_path / "cli.csv")["class"].tolist() == table["class"].tolist()


PREDICT_SCRIPT = '''
import json, os, sys
from twinkle_core import Trainer

mode, run, data, out = sys.argv[1:5]
result = Trainer.from_checkpoint(run, verbose=False).predict(data, out, devices=2, batch_size=16)
rank = int(os.environ.get("LOCAL_RANK", 0))
with open(os.path.join(os.path.dirname(os.path.abspath(__file__)), f"{mode}-rank{rank}.json"), "w") as f:
    json.dump({"count": result.count, "output": result.output}, f)
'''


@pytest.mark.processes
def test_predict_on_two_processes_writes_every_row_once_in_order(trained, own_store, cancer_csv, tmp_path,
                                                                 run_job) -> None:
    """Two processes (Lightning's DDP launcher, each predicting its unrepeated share) write one file holding every
    input row exactly once, in input order — the same file one process writes."""
    _, result, _ = trained
    data = tmp_path / "rows.csv"
    pd.read_csv(cancer_csv).head(101).to_csv(data, index=False)  # an odd count: the ranks' shares differ
    script = tmp_path / "predict_two.py"
    script.write_text(PREDICT_SCRIPT)
    ranks = run_job(script, "predict", result.run_uri, str(data), str(tmp_path / "two.csv"))
    assert sorted(ranks) == [0, 1] and ranks[0]["count"] == ranks[1]["count"] == 101
    two = pd.read_csv(tmp_path / "two.csv")
    assert two["id"].tolist() == list(range(1, 102))
    one = Trainer.from_checkpoint(result.run_uri, verbose=False).predict(str(data), str(tmp_path / "one.csv"))
    pd.testing.assert_frame_equal(two, pd.read_csv(one.output))
    assert not (tmp_path / "two.csv.parts").exists()


def test_an_exported_onnx_file_predicts_alone_without_torch(trained, cancer_csv, tmp_path) -> None:
    """``twinkle predict model.onnx`` reads the card the export carries and predicts the same classes as the run
    (probabilities within 1e-5), in a process that never imports torch, Lightning or a plugin; an ONNX file with
    no card, a card that does not fit its graph, an empty table and a folder are named errors that leave no
    file."""
    import subprocess
    import sys

    import onnx

    trainer, result, _ = trained
    model = trainer.export(format="onnx", output=str(tmp_path / "model.onnx")).path
    rows = _validation_rows(cancer_csv)
    data = tmp_path / "rows.csv"
    rows.drop(columns=["target"]).to_csv(data, index=False)
    reference = pd.read_csv(trainer.predict(str(data), str(tmp_path / "run.csv")).output)
    probe = (
        "import json, sys\n"
        "from twinkle_core.cli import main\n"
        f"main(['predict', {model!r}, '--data', {str(data)!r}, '-o', {str(tmp_path / 'onnx.csv')!r}],"
        " standalone_mode=False)\n"
        "print(json.dumps(sorted(m for m in ('torch', 'lightning', 'twinkle_vision', 'twinkle_llm') "
        "if m in sys.modules)))\n")
    done = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr[-3000:]
    assert done.stdout.strip().splitlines()[-1] == "[]"  # nothing heavy was imported on this path
    assert f"Predicted {len(rows)} samples" in done.stdout
    alone = pd.read_csv(tmp_path / "onnx.csv")
    assert alone["id"].tolist() == reference["id"].tolist() and alone["class"].tolist() == reference["class"].tolist()
    assert (alone["probability"] - reference["probability"]).abs().max() < 1e-5

    from twinkle_core.inference import NoInferenceCardError, predict_export

    bare = onnx.load(model)
    del bare.metadata_props[:]
    onnx.save(bare, str(tmp_path / "bare.onnx"))
    with pytest.raises(NoInferenceCardError, match="carries no Twinkle inference card"):
        predict_export(str(tmp_path / "bare.onnx"), str(data), str(tmp_path / "bare.csv"))

    # issue 53: a card that does not fit the graph, an empty table, a folder, a file the model cannot run — each a
    # named error before or instead of a traceback, and no file (not even a 0-byte .partial) is left behind
    from twinkle_core.errors import TwinkleError

    card = json.loads(onnx.load(model).metadata_props[0].value)
    mismatched = onnx.load(model)
    card["preprocessing"]["columns"] = card["preprocessing"]["columns"][:5]
    card["inputs"][0]["shape"] = ["batch", 5]
    mismatched.metadata_props[0].value = json.dumps(card)
    onnx.save(mismatched, str(tmp_path / "mismatched.onnx"))
    (tmp_path / "empty.csv").write_text("")
    (tmp_path / "header.csv").write_text(",".join(rows.columns[:-1]) + "\n")
    cases = [(tmp_path / "mismatched.onnx", data, r"describes input 'input' of shape \['batch', 5\], but the graph "
                                                  r"takes 'input' .*the card does not belong to this graph"),
             (model, tmp_path / "empty.csv", "is empty; it needs a header row"),
             (model, tmp_path / "header.csv", "has a header but no rows"),
             (model, tmp_path, "is a folder; this model reads one CSV or Parquet table")]
    for number, (onnx_file, table, message) in enumerate(cases):
        output = tmp_path / f"refused-{number}.csv"
        with pytest.raises(TwinkleError, match=message):
            predict_export(str(onnx_file), str(table), str(output))
        assert not output.exists() and not (tmp_path / f"refused-{number}.csv.partial").exists()


def test_export_names_its_file_by_its_format_and_its_cards_hold_no_local_path(trained, cancer_csv, tmp_path,
                                                                              monkeypatch) -> None:
    """``twinkle export RUN -o out/model`` (a name without a suffix) writes ``out/model.onnx``, as ultralytics
    names its exports — so ``twinkle predict`` reads it as ONNX instead of refusing it as a pickle —, and ``-o`` a
    folder writes ``model.onnx`` in it; the JSON card beside it gets the permissions a plain file gets (0o666 less
    the umask, as the .onnx itself, not 0o600); neither card — the file's metadata nor the JSON — holds a path of
    this machine (the checkpoint is named inside its run)."""
    import os

    import onnx
    from click.testing import CliRunner

    from twinkle_core.cli import main

    _, result, home = trained
    monkeypatch.setenv("TWINKLE_HOME", str(home))
    monkeypatch.setenv("TWINKLE_USER", "tester")
    runner = CliRunner()
    done = runner.invoke(main, ["export", result.run_uri, "-o", str(tmp_path / "out" / "model")])
    assert done.exit_code == 0, done.output
    model = tmp_path / "out" / "model.onnx"
    assert model.exists() and not (tmp_path / "out" / "model").exists() and f"to {model}" in done.output
    umask = os.umask(0)
    os.umask(umask)
    beside = Path(f"{model}.json")
    assert beside.stat().st_mode & 0o777 == model.stat().st_mode & 0o777 == 0o666 & ~umask
    rows = _validation_rows(cancer_csv).drop(columns=["target"])
    rows.to_csv(tmp_path / "rows.csv", index=False)
    predicted = runner.invoke(main, ["predict", str(model), "--data", str(tmp_path / "rows.csv"), "-o",
                                     str(tmp_path / "rows-predicted.csv")])
    assert predicted.exit_code == 0, predicted.output

    cards = [beside.read_text(), {p.key: p.value for p in onnx.load(str(model)).metadata_props}["twinkle"]]
    for text in cards:
        for path in (str(tmp_path), str(home), os.path.expanduser("~"), str(cancer_csv.parent)):
            assert path not in text
    card = json.loads(cards[1])
    assert card["checkpoint"].startswith(f"{result.run_uri}/checkpoints/") and card["class_names"] == ["0", "1"]
    assert json.loads(cards[0])["path"] == "model.onnx"

    (tmp_path / "folder").mkdir()
    assert runner.invoke(main, ["export", result.run_uri, "-o", str(tmp_path / "folder")]).exit_code == 0
    assert (tmp_path / "folder" / "model.onnx").exists() and (tmp_path / "folder" / "model.onnx.json").exists()


def test_a_card_keeps_what_inference_needs_and_no_path_of_this_machine() -> None:
    """``portable`` (applied to every export's cards): a weights folder or file given as a local path (or a
    ``file://`` URL, a Windows path) is cut to its name, a YOLO run's ``data_yaml`` is dropped, and what inference
    needs — class names (even one that looks like a path: OpenImages' ``/m/01g317``), columns, sizes, thresholds,
    prose such as ``x / 255`` — and URIs of the store or of remote storage are kept."""
    from twinkle_core.engine.exports import portable

    card = {"hyperparameters": {"weights": "/home/me/models/resnet10t-hub/", "config": "yolov8n.yaml",
                                "pretrained": "file:///srv/w/best.pt", "other": "C:\\Users\\me\\w.safetensors",
                                "predict_conf": 0.25},
            "data_spec": {"extra": {"data_yaml": "/home/me/shapes/data.yaml", "imgsz": 96},
                          "class_names": ["a", "/m/01g317"]},
            "class_names": ["/m/01g317"], "preprocessing": {"columns": ["/x"], "scaling": "x / 255 outside the model"},
            "run": "twinkle://me/default/run3", "source": "s3://bucket/shapes", "inputs": [{"shape": ["batch", 3]}]}
    assert portable(card) == {
        "hyperparameters": {"weights": "resnet10t-hub", "config": "yolov8n.yaml", "pretrained": "best.pt",
                            "other": "w.safetensors", "predict_conf": 0.25},
        "data_spec": {"extra": {"imgsz": 96}, "class_names": ["a", "/m/01g317"]},
        "class_names": ["/m/01g317"], "preprocessing": {"columns": ["/x"], "scaling": "x / 255 outside the model"},
        "run": "twinkle://me/default/run3", "source": "s3://bucket/shapes", "inputs": [{"shape": ["batch", 3]}]}


def test_a_run_that_max_steps_ends_inside_its_first_epoch_validates_and_has_a_best_checkpoint(cancer_csv, twinkle_home,
                                                                                              recwarn) -> None:
    """getting-started's 5-step fit printed ``best_metric`` None, an alert that ``val_loss`` was never logged and
    Lightning's warning that ModelCheckpoint found no ``val_accuracy``: 3 steps of 15 now end with a validation, so
    the run has its monitored metric and a best checkpoint, and no alert or warning says otherwise."""
    trainer = Trainer("tabular-mlp", hyperparams={"max_steps": 3}, verbose=False, progress_bar=False)
    trainer.monitor(metrics=["loss", "accuracy"], alert_rules={"val_loss": "stale > 3epochs"})
    result = trainer.fit(str(cancer_csv))
    assert result.best_metric is not None and result.best_checkpoint and "val_loss" in result.metrics
    assert not [a for a in result.alerts if "not logged" in str(a)], result.alerts
    assert not [w for w in recwarn if "could not find the monitored key" in str(w.message)]
    decisions = {d.name: d.value for d in result.plan.decisions}
    assert decisions["max_epochs"] == -1 and decisions["val_check_interval"] == 3
