"""``TrainedModel``: what is asked of the model a session trained or continued — the model to export, an
evaluation on labelled data, predictions, an export's inference card — handed out by the session as Lightning's
trainer hands each concern to a connector. It reads the session's state (its last fit's result and model, or the
checkpoint it continues) and never trains."""

from __future__ import annotations

import copy
import os
from typing import Any

from twinkle_core.algorithm import Algorithm
from twinkle_core.data.processor import PrepareContext, PreparedData
from twinkle_core.data.spec import DataSpec
from twinkle_core.engine.checkpoints import load_checkpoint
from twinkle_core.engine.evaluation import Evaluation, evaluate
from twinkle_core.engine.prediction import Predictions, predict
from twinkle_core.errors import TwinkleError
from twinkle_core.uris import join


class TrainedModel:
    """The trained model of one session (``Session.trained``)."""

    def __init__(self, session: Any) -> None:
        """Answer for ``session`` (a ``Session``: its ``result``, ``algorithm``, ``prepared`` and ``continuation``
        say which model; its processor, settings and store read the data)."""
        self.session = session

    def model_for_export(self) -> tuple[Algorithm, PreparedData, str | None, str | None]:
        """The model to export (best checkpoint's weights), its data, its run URI and checkpoint URI."""
        s = self.session
        if s.result is not None and s.algorithm is not None and s.prepared is not None:
            model = self._unsplit() if _laid_out(s.algorithm) else _copy_model(s.algorithm)
            best = s.result.best_checkpoint or s.result.last_checkpoint
            if best:
                model.load_state_dict(load_checkpoint(best)["state_dict"])
            return model, s.prepared, s.result.run_uri, best
        if s.continuation is not None:
            ready = s.prepare(str(s.continuation.record.data_uri))
            ready.algorithm.load_state_dict(s.continuation.state_dict)
            return ready.algorithm, ready.data, s.continuation.parent_run, s.continuation.checkpoint_uri
        raise TwinkleError("nothing to export yet: call fit() first, or use Trainer.from_checkpoint(...)")

    def evaluate(self, data: str, *, batch_size: int | None = None, output: str | None = None) -> Evaluation:
        """Score the best checkpoint's model on the labelled data at ``data``, read with the run's data spec, and
        store the evaluation with the run (``twinkle_core.engine.evaluation``)."""
        s = self.session
        uri = s.store.resolve(str(data))
        model, spec, run_uri, checkpoint = self._trained_model(uri)
        processor = s.processor_for(uri)[0]
        context = PrepareContext(home=s.store.home, model_input=s.model_input_for(model), seed=s.settings.seed)
        samples = processor.read_samples(uri, spec, context)
        size = batch_size or model.eval_batch_size(s.settings.batch_size)
        return evaluate(s.store, model, spec, samples, run_uri=run_uri, checkpoint=checkpoint, batch_size=size,
                        output=output, verbose=s.verbose)

    def predict(self, data: Any, output: str | None = None, *, batch_size: int | None = None, devices: int = 1,
                overwrite: bool = False, draw: bool = False) -> Predictions:
        """Predict every sample of ``data`` (a URI, or in-memory samples the run's processor takes) with the best
        checkpoint's model and write the rows to ``output`` (``twinkle_core.engine.prediction``).

        Raises:
            TwinkleError: ``draw`` for a task that finds no boxes, or for in-memory images (nothing to draw on).
        """
        from twinkle_core.predictions import check_output

        s = self.session
        if output is not None:
            check_output(output, overwrite)
        in_memory = not isinstance(data, (str, os.PathLike))
        # in-memory samples go to the processor that read the training data
        uri = (str(s.new_data or (s.prepared.source if s.prepared else "")) if in_memory
               else s.store.resolve(str(data)))
        model, spec, run_uri, checkpoint = self._trained_model(uri)
        if draw and model.task_info.kind != "detection":
            raise TwinkleError(f"draw=True draws boxes, and {type(model).__name__} ({model.task}) finds none; "
                               "leave draw off")
        if draw and in_memory:
            raise TwinkleError("draw=True draws on the image files; in-memory images have none — pass a folder or URI")
        processor = s.processor_for(uri)[0]
        if in_memory:
            samples = processor.samples_from(data, spec)
        else:
            context = PrepareContext(home=s.store.home, model_input=s.model_input_for(model),
                                     seed=s.settings.seed)
            samples = processor.read_samples(uri, spec, context, targets=False)

        def where() -> str:
            if output is not None:
                return output
            if run_uri is None:
                raise TwinkleError("this model belongs to no run, so its predictions have nowhere to go; pass output=")
            return join(s.store.next_folder(s.store.run_id(run_uri), "predictions")[1], model.prediction_file)

        size = batch_size or model.eval_batch_size(s.settings.batch_size)
        return predict(model, spec, samples, where, devices=devices, batch_size=size, run_uri=run_uri,
                       checkpoint=checkpoint, verbose=s.verbose, draw=draw)

    def inference_card(self, model: Algorithm, prepared: PreparedData, run_uri: str | None,
                       checkpoint: str | None) -> dict[str, Any]:
        """The inference card of an export of ``model`` (``engine.exports.inference_card``), with the
        preprocessing of the processor that read its data."""
        from twinkle_core.engine.exports import inference_card

        s = self.session
        card = inference_card(model, prepared.spec, {}, run_uri, checkpoint)
        card["algorithm_name"] = s.choice.name  # what ONNX-only predict loads to decode boxes (a registered name)
        if prepared.source:
            processor, component, _ = s.processor_for(prepared.source)
            card["preprocessing"] = processor.preprocessing(prepared.spec)
            card["processor"] = component.qualified_name if component is not None else None
        return card

    def _trained_model(self, uri: str) -> tuple[Algorithm, DataSpec, str | None, str | None]:
        """The trained model with its best weights, its data spec, its run and checkpoint: after ``fit``, that
        run's; for a session from a checkpoint, the run's best checkpoint (or the file given), built from the
        spec in the checkpoint — the training data is not read."""
        s = self.session
        if s.result is not None and s.algorithm is not None and s.prepared is not None:
            model, prepared, run_uri, best = self.model_for_export()
            return model, prepared.spec, run_uri, best
        if s.continuation is None:
            raise TwinkleError("nothing trained yet: call fit() first, or use Trainer.from_checkpoint(run)")
        record = s.continuation.record
        if not record.data_spec:
            raise TwinkleError(f"checkpoint '{s.continuation.checkpoint_uri}' holds no data spec (written before "
                               "0.2); evaluate it after continuing it for one step")
        spec = DataSpec.from_dict(record.data_spec)
        routed = s.route_for(uri)[1]
        model = s.choice.cls.from_hyperparams(routed.algorithm, task=s.task, typed=True)
        s.build_network(model, spec)
        best = s.best_checkpoint or s.continuation.checkpoint_uri
        state = (s.continuation.state_dict if best == s.continuation.checkpoint_uri
                 else load_checkpoint(best)["state_dict"])
        model.load_state_dict(state)
        return model, spec, record.run, best

    def _unsplit(self) -> Algorithm:
        """A new, whole instance of the algorithm ``fit`` trained (one split over devices — FSDP2, tensor parallel
        — cannot be copied): built from the same hyperparameters and data spec, for the checkpoint's weights."""
        s = self.session
        assert s.prepared is not None
        algorithm = s.choice.cls.from_hyperparams(s.trained_hyperparams, task=s.task, typed=True)
        s.build_network(algorithm, s.prepared.spec)
        return algorithm


def _laid_out(algorithm: Algorithm) -> bool:
    """Whether training split the algorithm's parameters over devices (they are ``DTensor``s, or this process
    holds some pipeline stages only)."""
    from torch.distributed.tensor import DTensor

    return algorithm.pipeline is not None or any(isinstance(p, DTensor) for p in algorithm.parameters())



def _copy_model(algorithm: Algorithm) -> Algorithm:
    """A deep copy of a trained algorithm.

    Tensors a module computes from its parameters and keeps as plain attributes — ``torch.nn.utils.weight_norm``'s
    ``weight`` after a training step — are not graph leaves, and ``copy.deepcopy`` refuses them; they are
    recomputed before every forward, so they are detached first.
    """
    import torch

    for module in algorithm.modules():
        for name, value in list(vars(module).items()):
            if isinstance(value, torch.Tensor) and not value.is_leaf:
                setattr(module, name, value.detach())
    return copy.deepcopy(algorithm)


__all__ = ["TrainedModel"]
