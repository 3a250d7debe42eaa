"""The declarative ``Trainer``: name an algorithm, point at data; Twinkle does the engineering.

    trainer = Trainer(algorithm="tabular-mlp", task="tabular_classification",
                      hyperparams={"lr": 1e-3, "batch_size": 64, "max_epochs": 30})
    result = trainer.fit(data="s3://bucket/cancer.csv")
    trainer.export(format="onnx", quantize=True)

The facade: a training in this process is its ``Session`` (``Trainer.session``); the
Trainer adds what leaves the process — Ray Train workers, a supervised worker process, exports — and the run
operations (``twinkle_core.operations``).
"""

from __future__ import annotations

from typing import Any

import lightning as L

from twinkle_core.algorithm import Algorithm
from twinkle_core.data.processor import DataProcessor, PreparedData
from twinkle_core.engine.evaluation import Evaluation
from twinkle_core.engine.prediction import Predictions
from twinkle_core.engine.result import FitResult
from twinkle_core.errors import TwinkleError
from twinkle_core.exporting.base import ExportResult
from twinkle_core.jobs import Job, supervise
from twinkle_core.jobs.from_session import job_of
from twinkle_core.jobs.ray_backend import check_not_continued_on_ray, goes_to_ray, run_on_ray
from twinkle_core.jobs.child import ray_train_loop
from twinkle_core.operations import Operations
from twinkle_core.planning import Plan
from twinkle_core.processes import DEFAULT_MAX_RESTARTS
from twinkle_core.session import Session


class SessionAttribute:
    """An attribute of ``Trainer`` that is its session's, read and written through (``trainer.algorithm`` is
    ``trainer.session.algorithm``)."""

    def __set_name__(self, owner: type, name: str) -> None:
        """Remember the attribute's name."""
        self.name = name

    def __get__(self, trainer: Any, owner: type | None = None) -> Any:
        """The session's value (the descriptor itself on the class)."""
        return self if trainer is None else getattr(trainer.session, self.name)

    def __set__(self, trainer: Any, value: Any) -> None:
        """Set the session's value."""
        setattr(trainer.session, self.name, value)


class Trainer(Operations):
    """Train a registered algorithm (or an ``Algorithm`` subclass) on data at any URI.

    Args:
        algorithm: a registered name (``"resnet50"``, ``"plugin:name"``) or an ``Algorithm`` subclass.
        task: the task; by default the algorithm's.
        hyperparams: values routed by name to the algorithm (incl. ``lr``, ``optimizer``, ...), the data
            processor (``label_column``, ``val_fraction``, ...) or the trainer (``batch_size``,
            ``max_epochs``, ``seed``, ...); an unknown name is an error listing the valid ones.
        data_processor: a data processor name (when several serve the task) or a configured
            ``DataProcessor`` instance, e.g. ``FinancialDataProcessor(timeframe="1d")``.
        resource_strategy: a resource strategy name (default: the task's, else ``default``).
        user: the run store user (default ``$TWINKLE_USER`` or the login name).
        project: the run store project (default ``default``).
        home: the run store root (default ``$TWINKLE_HOME`` or ``~/.twinkle``).
        verbose: print the plan and show progress.
        callbacks: extra Lightning callbacks for every fit.
        **options: more hyperparameters, merged over ``hyperparams``.
    """

    algorithm_ref = SessionAttribute()
    choice = SessionAttribute()
    task = SessionAttribute()
    hyperparams = SessionAttribute()
    settings = SessionAttribute()
    data_processor = SessionAttribute()
    resource_strategy = SessionAttribute()
    user = SessionAttribute()
    project = SessionAttribute()
    store = SessionAttribute()
    verbose = SessionAttribute()
    callbacks = SessionAttribute()
    continuation = SessionAttribute()
    new_data = SessionAttribute()
    algorithm = SessionAttribute()
    result = SessionAttribute()
    monitor_config = SessionAttribute()
    budget_config = SessionAttribute()

    def __init__(
        self,
        algorithm: str | type[Algorithm],
        task: str | None = None,
        hyperparams: dict[str, Any] | None = None,
        *,
        data_processor: str | DataProcessor | None = None,
        resource_strategy: str | None = None,
        user: str | None = None,
        project: str | None = None,
        home: str | None = None,
        verbose: bool = True,
        callbacks: list[L.Callback] | None = None,
        **options: Any,
    ) -> None:
        """Resolve the algorithm and task and check every hyperparameter name and type now."""
        self.session = Session(algorithm, task, hyperparams, data_processor=data_processor,
                               resource_strategy=resource_strategy, user=user, project=project, home=home,
                               verbose=verbose, callbacks=callbacks, **options)
        """The training this trainer runs in this process."""

    @classmethod
    def of(cls, session: Session) -> Trainer:
        """The trainer over ``session``."""
        trainer = cls.__new__(cls)
        trainer.session = session
        return trainer

    def valid_hyperparameters(self) -> set[str]:
        """Every name ``hyperparams`` accepts: the algorithm's, the data processors' and the trainer's."""
        return self.session.valid_hyperparameters()

    def plan(self, data: str | None = None) -> Plan:
        """Measure the model and data and return the resource plan (nothing is trained or stored)."""
        return self.session.plan(data)

    def fit(self, data: str | None = None) -> FitResult:
        """Train on ``data`` (any URI; default: ``new_data`` of ``from_checkpoint``) as a new run.

        With ``backend="ray"`` (or ``RAY_ADDRESS`` set) the run trains on Ray Train workers
        (``twinkle_core.jobs.ray_backend``), restarted from its last checkpoint when one dies.
        """
        if self._on_ray():
            check_not_continued_on_ray(self.continuation is not None)
            self.result = run_on_ray(self._job(data, self.settings.max_restarts, "backend='ray'"),
                                     self.settings.ray_workers or 2, ray_train_loop)
            return self.result
        return self.session.fit(data)

    def supervise(self, data: str | None = None, max_restarts: int = DEFAULT_MAX_RESTARTS) -> FitResult:
        """Like ``fit``, in a worker process that is restarted when it dies (SIGKILL, the OOM killer, a
        crash) — from the run's last checkpoint, exactly, up to ``max_restarts`` times; the run keeps one id
        and each restart is an alert (kind ``restart``). See ``twinkle_core.jobs.supervisor``.

        The trainer must be declarative: a registered algorithm name, no configured processor instance, no
        callbacks (a worker process rebuilds it from a ``Job``).

        Raises:
            TwinkleError: the trainer holds code a worker cannot rebuild; the training failed; the worker kept
                dying (the run is then ``failed``).
        """
        self.result = supervise(self._job(data, max_restarts, "supervise()"), verbose=self.session.verbose)
        return self.result

    def _job(self, data: str | None, max_restarts: int, caller: str) -> Job:
        """This trainer as a declarative ``Job`` (refused when it holds code)."""
        return job_of(self.session, data, max_restarts, caller)

    def _on_ray(self) -> bool:
        """Whether this fit goes to Ray Train (``backend="ray"``, or ``RAY_ADDRESS`` set)."""
        return goes_to_ray(self.settings)

    def export(
        self,
        format: str = "onnx",
        output: str | None = None,
        quantize: bool = False,
        **options: Any,
    ) -> ExportResult:
        """Export the best checkpoint's model, verify it on validation data and record it with the run.

        Every export describes itself: its inference card — the task, the graph's input names, dtypes and shapes,
        the class names, how raw data becomes its input (the data processor's ``preprocessing``), what its output
        means, the data spec, its run and checkpoint — is stored in the file's own metadata (ONNX
        ``metadata_props["twinkle"]``, TorchScript's extra file ``twinkle.json``) and, with the verification, in
        ``<output>.json`` beside it; ``twinkle predict model.onnx`` needs nothing else (for tables, image
        classifiers and detectors not even torch or the plugin). Neither card holds a path of this machine.

        Args:
            format: an exporter's name (``"onnx"``, ``"torchscript"``, ...; see ``twinkle exporters list``).
            output: where to write it (any URI); default ``<run>/exports/model[-int8].<suffix>``. The format's
                suffix is added when the name lacks it (``out/yolo3`` → ``out/yolo3.onnx``); a folder gets
                ``model[-int8].<suffix>`` inside it.
            quantize: INT8 (static, calibrated on the run's training data) where the format supports it.
            **options: exporter options, e.g. ``opset_version=15`` for ONNX.
        """
        from twinkle_core.engine.exports import export_run, exporter_for

        exporter = exporter_for(format)  # an unknown format is an error before the model is rebuilt
        model, prepared, run_uri, checkpoint = self.model_for_export()
        card = self.session.inference_card(model, prepared, run_uri, checkpoint)
        return export_run(self.session.store, exporter, model, prepared, run_uri, checkpoint, output, quantize,
                          options, card)

    def evaluate(self, data: str, *, batch_size: int | None = None, output: str | None = None) -> Evaluation:
        """Score the best checkpoint's model on a labelled test set and store the evaluation with its run.

        The data is read with the run's own data spec — the same columns, classes, vocabulary, input size and
        normalisation; nothing is fitted on it — by the run's data processor (``DataProcessor.read_samples``).
        The algorithm's own test figures (``loss``, ``accuracy``, ... computed as validation computes them) come
        with its task's report: for classification, per-class precision, recall and F1 and a confusion matrix
        (JSON and ``confusion_matrix.png``); for regression, MAE, RMSE and R². It is written to the run's
        ``evaluations/<N>/`` and listed by ``twinkle runs show``. Works after ``fit`` and on
        ``Trainer.from_checkpoint(run)`` (the run's best checkpoint; the training data is not read).

        Args:
            data: the test set at any URI, in the format the run trained on, with its label column.
            batch_size: samples per forward pass (default: the algorithm's validation batch size).
            output: a folder to write it to instead of the run's (required for a checkpoint of no run).

        Raises:
            SamplesNotSupportedError: the run's data processor cannot read test data.
            twinkle_core.data.errors.DataError: the data differs from the run's (named, with the fix) or has no
                labels.
        """
        return self.session.evaluate(data, batch_size=batch_size, output=output)

    def predict(self, data: Any, output: str | None = None, *, batch_size: int | None = None, devices: int = 1,
                overwrite: bool = False, draw: bool = False) -> Predictions:
        """The best checkpoint's predictions for every sample of ``data``, in input order, written to a file.

        The samples are read with the run's data spec by its data processor (``DataProcessor.read_samples``;
        labels, if the data has them, are ignored) and predicted in batches; each batch's rows are written as it
        ends (``Algorithm.prediction_rows``: for classification the class, its probability and every class's;
        for regression the value; for detection the image's size and its boxes), each with the sample's id (a
        table's data-row number, an image's path). Files a row carries (a speech model's WAV, a drawn image) go
        to the folder ``<output's name>_files`` beside the output, and the row holds their path.

        Args:
            data: a path or URI in the run's data format, or in-memory samples its processor takes
                (``DataProcessor.samples_from``: a ``pandas.DataFrame`` for a tabular run).
            output: the file to write, by suffix ``.csv``, ``.parquet``, ``.jsonl`` or ``.json`` (detections in
                COCO's shape; other rows an array) (any URI); default the run's ``predictions/<N>/`` and the
                algorithm's ``prediction_file`` (``predictions.csv``; a detector's ``predictions.json``).
            batch_size: samples per forward pass (default: the algorithm's validation batch size).
            devices: processes to predict on (Lightning starts them, as for ``fit``); each predicts its share and
                the output holds every sample exactly once, in input order.
            overwrite: replace an existing ``output`` (else it is refused before anything runs).
            draw: detection only: also write each image with its predicted boxes drawn (ultralytics' ``save``).
        """
        return self.session.predict(data, output, batch_size=batch_size, devices=devices, overwrite=overwrite,
                                    draw=draw)

    def synthesize(self, text: str, output: str | None = None, **options: Any) -> str:
        """Speak ``text`` with the best checkpoint's model and write a WAV file; returns its path.

        For algorithms that generate audio (they define ``synthesize(text, **options)`` returning samples and
        their rate — MelOTTS takes ``lang=`` and ``speaker=``).

        Args:
            text: what to say.
            output: where to write it (any URI); default ``<run>/samples/<text>.wav``.
            **options: the algorithm's synthesis options.
        """
        from twinkle_core.engine.synthesis import synthesize

        model, _, run_uri, _ = self.model_for_export()
        return synthesize(self.session.store, model, run_uri, text, output, options)

    def generate(self, prompt: Any, **options: Any) -> str:
        """The text the best checkpoint's model writes after ``prompt``.

        For algorithms that generate text (they define ``generate(prompt, **options)``): twinkle-llm's models
        take raw text or a conversation (``[{"role": "user", "content": ...}]``) and ``max_new_tokens=``,
        ``temperature=`` (0: greedy), ``top_p=`` and ``seed=``.

        Raises:
            TwinkleError: the algorithm generates no text, or there is nothing trained yet.
        """
        model = self.model_for_export()[0]
        write = getattr(model, "generate", None)
        if not callable(write):
            raise TwinkleError(f"{type(model).__name__} does not generate text (it defines no generate(prompt, ...))")
        return str(write(prompt, **options))

    def model_for_export(self) -> tuple[Algorithm, PreparedData, str | None, str | None]:
        """The model to export (best checkpoint's weights), its data, its run URI and checkpoint URI."""
        return self.session.model_for_export()

    # ---------------------------------------------------------- continuation
    @classmethod
    def from_checkpoint(
        cls,
        checkpoint: str,
        new_data: str | None = None,
        mode: str = "continue",
        hyperparams: dict[str, Any] | None = None,
        *,
        algorithm: str | type[Algorithm] | None = None,
        same_run: bool = False,
        **options: Any,
    ) -> Trainer:
        """A trainer that continues from a run or checkpoint (see ``twinkle_core.engine.continuation``).

        Args:
            checkpoint: ``twinkle://user/project/runN`` (its last checkpoint; the best one for
                ``finetune``) or a checkpoint file at any URI.
            new_data: the data to train on next (default: the checkpoint's data).
            mode: ``resume``, ``continue`` or ``finetune``.
            hyperparams: overrides of the checkpoint's hyperparameters (``max_epochs``, ``lr``, ...).
            algorithm: the checkpoint's algorithm: a registered name it must match, or — for a checkpoint of
                an ``Algorithm`` subclass that is not registered — that class. A checkpoint naming a module
                path that is neither registered nor passed here is refused before anything is imported.
            same_run: with ``mode="resume"``, train on in the run that wrote the checkpoint (one run id: what an
                automatic restart after a crash does) instead of a new child run.
            **options: ``Trainer`` keywords (``user``, ``project``, ``home``, ``verbose``) and more overrides.
        """
        return cls.of(Session.from_checkpoint(checkpoint, new_data, mode, hyperparams, algorithm=algorithm,
                                              same_run=same_run, **options))


__all__ = ["Evaluation", "FitResult", "Predictions", "Trainer"]
