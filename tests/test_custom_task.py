"""A third party adds a task Twinkle never heard of — text classification on token ids — using only the public
API and docs/plugins/: it trains, is planned, exports to ONNX with int64 inputs (verified) and continues. Its data
processor is written against twinkle-core 0.2 (``prepare(uri, seed=0)``, configured by attribute): it still
trains, with a ``DeprecationWarning`` naming ``prepare(uri, context)``."""

from __future__ import annotations

import csv
import io
import json
import random
from pathlib import Path

import pytest
import torch
from torch import nn
from torch.utils.data import TensorDataset

from twinkle_core import Algorithm, RunStore, Trainer, hookimpl, list_tasks
from twinkle_core.data import DataProcessor, DataSpec, PreparedData, data_fingerprint, require_exists, split_indices
from twinkle_core.errors import PlanningError, UnknownTaskError

POSITIVE = "good great fine happy love excellent nice superb".split()
NEGATIVE = "bad awful sad hate poor terrible ugly dull".split()
FILLER = "the a movie was it and really quite some plot of film".split()


class TextCSVProcessor(DataProcessor):
    """``text,label`` rows: words become ids (0 pads, 1 is unknown), padded or cut to ``max_len``."""

    task = "text_classification"
    formats = ("csv",)

    def __init__(self, task: str | None = None, max_len: int = 16, val_fraction: float = 0.2,
                 input_dtype: str = "int64") -> None:
        """Configure the processor."""
        super().__init__(task)
        self.max_len, self.val_fraction, self.input_dtype = max_len, val_fraction, input_dtype

    def prepare(self, uri: str, seed: int = 0) -> PreparedData:  # 0.2's signature, kept on purpose
        """Read the CSV, build the vocabulary on the training split and encode every row."""
        fs, path = require_exists(uri)
        rows = list(csv.DictReader(io.StringIO(fs.cat_file(path).decode("utf-8"))))
        classes = sorted({r["label"] for r in rows})
        labels = torch.tensor([classes.index(r["label"]) for r in rows])
        train_rows, val_rows = split_indices(len(rows), self.val_fraction, seed, labels.numpy())
        vocab = {"<pad>": 0, "<unk>": 1}
        for i in train_rows:
            for word in rows[i]["text"].split():
                vocab.setdefault(word, len(vocab))
        ids = torch.zeros(len(rows), self.max_len, dtype=torch.int64)
        for i, row in enumerate(rows):
            words = [vocab.get(w, 1) for w in row["text"].split()][: self.max_len]
            ids[i, : len(words)] = torch.tensor(words)
        spec = DataSpec(task=self.task, input_shape=(self.max_len,), num_classes=len(classes),
                        class_names=tuple(classes), input_dtype=self.input_dtype, vocab_size=len(vocab))
        return PreparedData(TensorDataset(ids[train_rows], labels[train_rows]),
                            TensorDataset(ids[val_rows], labels[val_rows]), spec, data_fingerprint(uri), uri,
                            int(fs.size(path)), {"rows": len(rows), "vocabulary": len(vocab)})


class TextCNN(Algorithm):
    """Embedding, one 1-D convolution, max-pooling over time, a linear classifier."""

    task = "text_classification"

    def __init__(self, embed_dim: int = 32, channels: int = 32) -> None:
        """Set the widths."""
        super().__init__()
        self.embed_dim, self.channels = embed_dim, channels

    def build_model(self, spec: DataSpec) -> nn.Module:
        """The network for the data's vocabulary and classes."""
        return _Net(spec.vocab_size or 2, self.embed_dim, self.channels, spec.num_classes or 2)


class _Net(nn.Module):
    def __init__(self, vocab: int, dim: int, channels: int, classes: int) -> None:
        super().__init__()
        self.embed = nn.Embedding(vocab, dim, padding_idx=0)
        self.conv = nn.Conv1d(dim, channels, kernel_size=3, padding=1)
        self.head = nn.Linear(channels, classes)

    def forward(self, ids: torch.Tensor) -> torch.Tensor:
        hidden = torch.relu(self.conv(self.embed(ids).transpose(1, 2)))
        return self.head(hidden.amax(dim=2))


class TextPlugin:
    """A third party's plugin: a task, an algorithm and a data processor."""

    @hookimpl
    def register_tasks(self, register):
        """The text classification task."""
        register("text_classification", kind="classification", description="predict a class from a text",
                 batch="(token ids int64 [B, L], class int64 [B])")

    @hookimpl
    def register_algorithms(self, register):
        """The text CNN."""
        register("text-cnn", TextCNN, task="text_classification", description="a small text CNN")

    @hookimpl
    def register_data_processors(self, register):
        """CSV of text and label."""
        register("text-csv", TextCSVProcessor, task="text_classification", formats=["csv"],
                 description="text,label rows")


def _write_texts(path: Path, n: int = 400, seed: int = 0) -> Path:
    rng = random.Random(seed)
    with path.open("w", newline="") as handle:
        writer = csv.writer(handle)
        writer.writerow(["text", "label"])
        for i in range(n):
            label = "pos" if i % 2 else "neg"
            own, other = (POSITIVE, NEGATIVE) if label == "pos" else (NEGATIVE, POSITIVE)
            words = [rng.choice(own) for _ in range(3)] + [rng.choice(other)] + rng.sample(FILLER, 6)
            rng.shuffle(words)
            writer.writerow([" ".join(words), label])
    return path


def test_a_plugin_adds_a_task_that_trains_plans_exports_and_continues(twinkle_plugin, twinkle_home, tmp_path) -> None:
    import onnx

    data = str(_write_texts(tmp_path / "reviews.csv"))
    with pytest.raises(UnknownTaskError, match="register_tasks"):
        Trainer(TextCNN)  # nobody registers the task yet
    twinkle_plugin(TextPlugin(), name="textplug")
    (task,) = [t for t in list_tasks() if t.name == "text_classification"]
    assert (task.kind, task.monitor, task.mode) == ("classification", "val_accuracy", "max")

    trainer = Trainer("text-cnn", hyperparams={"max_epochs": 6, "lr": 3e-3, "batch_size": 32}, verbose=False)
    plan = trainer.plan(data)  # the planner's test forward runs on int64 ids
    assert plan.estimates["flops_per_sample"] > 0
    with pytest.warns(DeprecationWarning, match=r"TextCSVProcessor.prepare\(uri, seed\) is twinkle-core 0.2's"):
        result = trainer.fit(data)
    assert result.monitor == "val_accuracy" and result.best_metric >= 0.9, result.metrics
    store = RunStore()
    data_json = json.loads(Path(store.path(store.get(result.run_uri).id, "data.json")).read_text())
    assert (data_json["train_samples"], data_json["val_samples"]) == (320, 80)  # one name, whoever prepared it

    exported = trainer.export(format="onnx")
    assert exported.max_abs_diff < 1e-4 and exported.samples == 80
    graph_input = onnx.load(exported.path).graph.input[0]
    assert graph_input.type.tensor_type.elem_type == onnx.TensorProto.INT64

    more = Trainer.from_checkpoint(result.run_uri, mode="continue", hyperparams={"max_epochs": 1}, verbose=False)
    again = more.fit()
    assert again.status == "finished" and again.parent == result.run_uri
    assert RunStore().get(again.run_uri).algorithm == "text-cnn"


def test_a_failing_test_forward_names_example_input(twinkle_plugin, twinkle_home, tmp_path) -> None:
    data = str(_write_texts(tmp_path / "reviews.csv", n=60))
    twinkle_plugin(TextPlugin(), name="textplug")
    wrong = TextCSVProcessor(input_dtype="float32")  # says floats: an embedding cannot take them
    trainer = Trainer("text-cnn", data_processor=wrong, verbose=False)
    with pytest.raises(PlanningError, match=r"example_input\(2\) — float32 \[2, 16\].*Override TextCNN.example_input"):
        trainer.fit(data)
    assert RunStore().list() == []  # refused before any run was created
