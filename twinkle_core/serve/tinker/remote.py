"""The Tinker API's training backend in a process of its own, so that its passes and the API's HTTP work run on
two cores instead of sharing one interpreter's lock.

``BackendProcess`` is a ``TrainingBackend`` whose every call is sent through a pipe to a child process holding the
real backend (a fresh interpreter that finds it in the plugin registry by its name) and answered from it;
the engine thread blocks on the answer without holding the interpreter lock, so the API process keeps answering
HTTP while a pass runs. Arguments and answers are the backend's plain dataclasses, strings and NumPy arrays (the
loss is a module-level function, pickled by name); nothing else crosses. The child dies with the server (a SIGKILL
of the server takes it along); if it ends on its own, every call after that is a ``TwinkleError`` saying so, so
futures answer an error instead of hanging.
"""

from __future__ import annotations

import os
import pickle
import signal
import threading
from typing import Any

from twinkle_core.errors import TwinkleError
from twinkle_core.lowlevel import (
    AdamSettings,
    BaseModel,
    Datum,
    ForwardRequest,
    ForwardResult,
    Loss,
    LoraSettings,
    SampleSettings,
    Sequence,
    TrainingBackend,
)


class BackendProcess(TrainingBackend):
    """The registered training backend ``name`` built with ``kwargs`` in a child process (see the module
    docstring); the child finds it through the plugin registry, as the server does."""

    def __init__(self, name: str, kwargs: dict[str, Any]) -> None:
        """Start the child and wait until its backend is built (its error, if building fails, is raised here).

        Raises:
            TwinkleError: the backend could not be built, or its process ended.
        """
        import multiprocessing

        context = multiprocessing.get_context("spawn")  # a fresh interpreter: it imports the backend, not Lightning
        self._conn, child = context.Pipe()
        self._process = context.Process(target=_serve, args=(child, name, kwargs, os.getpid()),
                                        name="tinker-backend", daemon=True)
        self._process.start()
        child.close()
        self._lock = threading.Lock()
        self._bases: list[BaseModel] = self._call("base_models")
        self._shares: bool = self._call("shares_passes")

    def _call(self, name: str, *args: Any) -> Any:
        with self._lock:
            try:
                self._conn.send((name, args))
                ok, value = self._conn.recv()
            except (EOFError, OSError) as err:
                code = self._process.exitcode
                raise TwinkleError(f"the Tinker training backend's process ended (exit code {code}: {err or 'closed'}) "
                                   "and its models with it; restart the server") from None
        if ok:
            return value
        raise value

    def base_models(self) -> list[BaseModel]:
        """The base models the child's backend offers (asked once, at start)."""
        return list(self._bases)

    def shares_passes(self) -> bool:
        """The child's backend's answer (asked once, at start)."""
        return self._shares

    def create(self, model_id: str, base_model: str, lora: LoraSettings) -> dict[str, Any]:
        """As ``TrainingBackend.create``, in the child."""
        return self._call("create", model_id, base_model, lora)

    def forward_backward(self, model_id: str, data: list[Datum], loss: Loss, settings: dict[str, Any],
                         backward: bool) -> ForwardResult:
        """As ``TrainingBackend.forward_backward``, in the child."""
        return self._call("forward_backward", model_id, data, loss, settings, backward)

    def forward_backward_many(self, requests: list[ForwardRequest]) -> list[ForwardResult]:
        """As ``TrainingBackend.forward_backward_many``, in the child."""
        return self._call("forward_backward_many", requests)

    def optim_step(self, model_id: str, adam: AdamSettings) -> dict[str, float]:
        """As ``TrainingBackend.optim_step``, in the child."""
        return self._call("optim_step", model_id, adam)

    def save(self, model_id: str, folder: str, optimizer: bool) -> None:
        """As ``TrainingBackend.save``, in the child."""
        return self._call("save", model_id, folder, optimizer)

    def load(self, model_id: str, folder: str, optimizer: bool) -> None:
        """As ``TrainingBackend.load``, in the child."""
        return self._call("load", model_id, folder, optimizer)

    def sample(self, weights: str, prompt: list[int], count: int, settings: SampleSettings,
               prompt_logprobs: bool) -> tuple[list[Sequence], list[float] | None]:
        """As ``TrainingBackend.sample``, in the child."""
        return self._call("sample", weights, prompt, count, settings, prompt_logprobs)

    def unload(self, model_id: str) -> None:
        """As ``TrainingBackend.unload``, in the child."""
        return self._call("unload", model_id)

    def close(self) -> None:
        """Stop the child (its models are dropped)."""
        try:
            with self._lock:
                self._conn.send(None)
        except OSError:
            pass
        self._process.join(timeout=10)
        if self._process.exitcode is None:
            self._process.kill()


def _serve(conn: Any, backend_name: str, kwargs: dict[str, Any], server: int) -> None:
    """The child: build the backend, then answer calls until the pipe closes (or the server is gone)."""
    from twinkle_core.jobs.launcher import signal_when_gone

    signal_when_gone(server, signal.SIGKILL)
    try:
        from twinkle_core.lookup import load_component

        backend = load_component("training_backend", backend_name)(**kwargs)
    except BaseException as err:  # noqa: BLE001 — the parent raises it at start
        backend, failure = None, err
    while True:
        try:
            message = conn.recv()
        except (EOFError, OSError):
            return
        if message is None:
            return
        name, args = message
        try:
            if backend is None:
                raise failure
            answer = (True, getattr(backend, name)(*args))
        except BaseException as err:  # noqa: BLE001 — every call is answered
            answer = (False, _portable(err))
        conn.send(answer)


def _portable(err: BaseException) -> BaseException:
    """``err`` if it survives pickling whole; else a ``TwinkleError`` (for one) or ``RuntimeError`` with its text."""
    try:
        pickle.loads(pickle.dumps(err))
        return err
    except Exception:  # noqa: BLE001 — an exception whose constructor pickling cannot call again
        kind = TwinkleError if isinstance(err, TwinkleError) else RuntimeError
        return kind(f"{type(err).__name__}: {err}")
