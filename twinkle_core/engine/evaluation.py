"""``Trainer.evaluate``: a trained model scored on a test set read with its run's data spec, stored with the run.

Lightning runs the model over the samples, in order, in this process: ``trainer.test`` — the algorithm's own
``test_step``, so ``loss`` and the metrics it logs are computed exactly as validation computed them — then, when
the task's report reads them (``Algorithm.evaluation_needs_outputs``), ``trainer.predict`` for the outputs
(``Algorithm.evaluation_report``: per-class figures, a confusion matrix, ...). The evaluation is written (by global rank 0) to the run's ``evaluations/<N>/``:
``evaluation.json`` (its figures, tables, the data's URI and fingerprint, the checkpoint) and the report's plots.
"""

from __future__ import annotations

import json
import time
from dataclasses import asdict, dataclass, field
from typing import Any

import lightning as L
import torch
from torch.utils.data import DataLoader

from twinkle_core.algorithm import Algorithm
from twinkle_core.data.errors import DataError, EmptyDataError
from twinkle_core.data.processor import Samples
from twinkle_core.data.spec import DataSpec
from twinkle_core.engine.isolation import quiet_lightning
from twinkle_core.engine.ranks import is_global_zero
from twinkle_core.errors import TwinkleError
from twinkle_core.store.atomic import atomic_write_bytes, atomic_write_text
from twinkle_core.store.runs import RunStore
from twinkle_core.uris import join


@dataclass
class Evaluation:
    """One evaluation of a trained model.

    Attributes:
        metrics: the algorithm's test figures (``loss``, ``accuracy``, ... as its validation logs them) and the
            report's (``macro_f1``, ``rmse``, ...).
        tables: the report's tables (``per_class``, ``confusion_matrix``).
        files: the plots written, by name, with their URLs.
        samples: how many samples were scored.
        data_uri: the test data.
        data_fingerprint: its content fingerprint.
        details: what the processor said of the data (rows left out, unseen classes).
        checkpoint: the checkpoint whose weights were scored.
        run_uri: the run the checkpoint belongs to (``None``: a file of no run).
        number: its number among the run's evaluations (``evaluations/<N>/``).
        folder: where it was written.
        created: when (seconds since the epoch).
    """

    metrics: dict[str, float]
    tables: dict[str, Any]
    files: dict[str, str]
    samples: int
    data_uri: str
    data_fingerprint: str
    details: dict[str, Any] = field(default_factory=dict)
    checkpoint: str | None = None
    run_uri: str | None = None
    number: int | None = None
    folder: str | None = None
    created: float = 0.0

    def to_dict(self) -> dict[str, Any]:
        """Plain, JSON-ready values."""
        return asdict(self)


def evaluate(store: RunStore, model: Algorithm, spec: DataSpec, samples: Samples, *, run_uri: str | None,
             checkpoint: str | None, batch_size: int, output: str | None = None, verbose: bool = False) -> Evaluation:
    """Score ``model`` on labelled ``samples`` and write the evaluation to ``output`` (a folder at any URI; default:
    the run's next ``evaluations/<N>/``).

    Raises:
        DataError: the samples carry no targets (``predict`` reads unlabelled data), or none is left to score.
        TwinkleError: no run to write beside and no ``output``.
    """
    if not samples.labelled:
        raise DataError(f"'{samples.source}' carries no targets, so it cannot be scored; add the label column the "
                        "run trained on, or use predict for unlabelled data")
    count = len(samples.dataset)
    if count == 0:
        raise EmptyDataError(f"'{samples.source}' has no sample the run can score ({samples.details}); give labelled "
                             "samples of the run's classes")
    if output is None and run_uri is None:
        raise TwinkleError("this model belongs to no run, so its evaluation has nowhere to go; pass output='folder'")
    loader = DataLoader(samples.dataset, batch_size=batch_size, shuffle=False, collate_fn=samples.collate_fn)
    with quiet_lightning(verbose):
        trainer = L.Trainer(accelerator="auto", devices=1, logger=False, enable_checkpointing=False,
                            enable_progress_bar=verbose, enable_model_summary=False)
        figures = trainer.test(model, loader, verbose=False)[0]
        if model.evaluation_needs_outputs:
            outputs = torch.cat([torch.as_tensor(o).cpu() for o in trainer.predict(model, loader)])
            targets = torch.cat([batch[1].cpu() for batch in loader])
        else:  # the report is the test figures alone
            outputs, targets = torch.empty(0), torch.empty(0)
    report = model.evaluation_report(outputs, targets, spec)
    metrics = {name.removeprefix("test_"): float(value) for name, value in figures.items()}
    metrics.update(report.metrics)
    evaluation = Evaluation(metrics, report.tables, {}, count, samples.source, samples.fingerprint,
                            dict(samples.details), checkpoint, run_uri, created=time.time())
    if not is_global_zero():
        return evaluation
    if output is None:
        assert run_uri is not None
        evaluation.number, output = store.next_folder(store.run_id(run_uri), "evaluations")
    evaluation.folder = output
    for name, image in report.plots.items():
        evaluation.files[name] = join(output, name)
        atomic_write_bytes(evaluation.files[name], image)
    atomic_write_text(join(output, "evaluation.json"), json.dumps(evaluation.to_dict(), indent=2, default=str) + "\n")
    if run_uri is not None:  # to the trackers the run reported to (report_to), into the same tracker runs
        from twinkle_core.engine.reporting import report_evaluation

        report_evaluation(store, run_uri, evaluation.metrics, int(evaluation.number or 0),
                          [*evaluation.files.values(), join(output, "evaluation.json")])
    return evaluation
