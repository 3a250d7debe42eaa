"""``Trainer.predict``: a trained model's predictions for every sample of new data, in input order, streamed to a
file (CSV, Parquet, JSON lines or a JSON document), on one process or several.

Lightning runs the model (``trainer.predict``, keeping no predictions in memory). With several devices each
process reads its share of the samples — Lightning's unrepeated distributed sampler: every sample exactly once —
and ``PredictionWriter`` streams its rows (``Algorithm.prediction_rows``, each with the sample's index and id) to
a part file of its own as its batches end, and the files its rows carry (``PredictionFile``: WAVs; with ``draw``,
each image with its boxes drawn) into the output's ``_files`` folder. When every rank is done, rank 0 merges the
parts by index into the output, written under a temporary name and renamed, and removes them.
"""

from __future__ import annotations

import heapq
import json
from dataclasses import asdict, dataclass, field
from typing import Any, Callable

import lightning as L
from lightning.pytorch.callbacks import BasePredictionWriter
from torch.utils.data import DataLoader

from twinkle_core.algorithm import Algorithm
from twinkle_core.data.processor import Samples
from twinkle_core.data.spec import DataSpec
from twinkle_core.engine.isolation import distributed_environment_kept, quiet_lightning
from twinkle_core.engine.ranks import close_group
from twinkle_core.predictions import PredictionFile, draw_boxes, files_folder, write_rows
from twinkle_core.uris import filesystem


@dataclass
class Predictions:
    """What ``predict`` wrote.

    Attributes:
        output: the file (CSV, Parquet or JSON lines), one row per sample in input order.
        count: how many samples it holds.
        columns: its columns (``id`` first).
        data_uri: the data predicted on.
        data_fingerprint: its content fingerprint.
        details: what the processor said of the data (rows, files skipped).
        checkpoint: the checkpoint whose weights predicted.
        run_uri: the run it belongs to (``None``: a file of no run).
    """

    output: str
    count: int
    columns: list[str]
    data_uri: str
    data_fingerprint: str
    details: dict[str, Any] = field(default_factory=dict)
    checkpoint: str | None = None
    run_uri: str | None = None

    def to_dict(self) -> dict[str, Any]:
        """Plain, JSON-ready values."""
        return asdict(self)


class PredictionWriter(BasePredictionWriter):
    """Streams each rank's prediction rows to its own part file; rank 0 merges the parts in input order."""

    def __init__(self, output: Callable[[], str], spec: DataSpec, ids: list[str], draw: bool = False) -> None:
        """``output`` names the file (called on rank 0 once the ranks exist); ``ids`` name the samples; ``draw``:
        write each detection sample's image (its id is its path) with its boxes drawn."""
        super().__init__("batch")
        self.resolve, self.spec, self.ids, self.draw = output, spec, ids, draw
        self.output = ""
        self.count = 0
        self.columns: list[str] = []
        self._part: Any = None

    def setup(self, trainer: L.Trainer, pl_module: L.LightningModule, stage: str) -> None:
        """Agree on the output (rank 0 names it) and open this rank's part file."""
        self.output = trainer.strategy.broadcast(self.resolve() if trainer.is_global_zero else None)
        fs, path = filesystem(self._parts())
        fs.makedirs(path, exist_ok=True)
        self._part = fs.open(f"{path}/part-{trainer.global_rank:05d}.jsonl", "w")

    def write_on_batch_end(self, trainer: L.Trainer, pl_module: L.LightningModule, prediction: Any,
                           batch_indices: Any, batch: Any, batch_idx: int, dataloader_idx: int = 0) -> None:
        """Append the batch's rows, each with its sample's index and id."""
        if hasattr(prediction, "detach"):  # a tensor; an algorithm may also return texts (a language model's)
            prediction = prediction.detach().cpu()
        rows = pl_module.prediction_rows(prediction, self.spec)  # type: ignore[operator]
        for index, row in zip(batch_indices, rows):
            for part in row if isinstance(row, list) else [row]:  # a sample may give several rows (future bars)
                part = self._with_files(int(index), part)
                self._part.write(json.dumps({"index": int(index), "id": self.ids[int(index)], **part}) + "\n")

    def _with_files(self, index: int, row: dict[str, Any]) -> dict[str, Any]:
        """``row`` with each ``PredictionFile`` written to the output's files folder and named by its path there
        (relative to the output's folder); with ``draw``, a detection row gains its drawn image (``drawn``)."""
        if self.draw and "boxes" in row:
            fs, path = filesystem(self.ids[index])
            image = fs.cat_file(path)
            name = path.rsplit("/", 1)[-1]
            row = {**row, "drawn": PredictionFile(name, draw_boxes(image, row["boxes"], self.spec.class_names))}
        if not any(isinstance(value, PredictionFile) for value in row.values()):
            return row
        folder = files_folder(self.output)
        fs, root = filesystem(folder)
        fs.makedirs(root, exist_ok=True)
        written = dict(row)
        for key, value in row.items():
            if isinstance(value, PredictionFile):
                name = f"{index + 1:06d}-{value.name}"
                with fs.open(f"{root}/{name}", "wb") as handle:
                    handle.write(value.data)
                written[key] = f"{folder.rstrip('/').rsplit('/', 1)[-1]}/{name}"
        return written

    def on_predict_end(self, trainer: L.Trainer, pl_module: L.LightningModule) -> None:
        """Close the part; once every rank has, rank 0 merges them into the output."""
        self._part.close()
        trainer.strategy.barrier("predictions_written")
        summary = self._merge() if trainer.is_global_zero else None
        self.count, self.columns = trainer.strategy.broadcast(summary)

    def _parts(self) -> str:
        return f"{self.output}.parts"

    def _merge(self) -> tuple[int, list[str]]:
        fs, path = filesystem(self._parts())
        names = sorted(fs.ls(path, detail=False))
        handles = [fs.open(name, "r") for name in names]
        try:
            rows = heapq.merge(*(map(json.loads, h) for h in handles), key=lambda row: row["index"])
            count, columns = write_rows(self.output, ({k: v for k, v in row.items() if k != "index"} for row in rows),
                                        self.spec.class_names)
        finally:
            for handle in handles:
                handle.close()
        fs.rm(path, recursive=True)
        return count, columns


def predict(model: Algorithm, spec: DataSpec, samples: Samples, output: Callable[[], str], *, devices: int = 1,
            batch_size: int, run_uri: str | None, checkpoint: str | None, verbose: bool = False,
            draw: bool = False) -> Predictions:
    """Predict every sample and write the rows to the file ``output()`` names (see the module; the caller checked
    the output with ``twinkle_core.predictions.check_output``, and ``draw`` against the task)."""
    loader = DataLoader(samples.dataset, batch_size=batch_size, shuffle=False, collate_fn=samples.collate_fn)
    writer = PredictionWriter(output, spec, samples.ids, draw)
    with quiet_lightning(verbose), distributed_environment_kept():
        trainer = L.Trainer(accelerator="auto", devices=devices, strategy="ddp" if devices > 1 else "auto",
                            logger=False, enable_checkpointing=False, enable_progress_bar=verbose,
                            enable_model_summary=False, callbacks=[writer])
        trainer.predict(model, loader, return_predictions=False)
    close_group()
    return Predictions(writer.output, writer.count, writer.columns, samples.source, samples.fingerprint,
                       dict(samples.details), checkpoint, run_uri)
