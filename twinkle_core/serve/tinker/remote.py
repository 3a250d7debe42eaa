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
from collections import deque
from typing import Any, Callable

from twinkle_core.errors import TwinkleError
from twinkle_core.lowlevel import (
    AdamSettings,
    BaseModel,
    Datum,
    ForwardRequest,
    ForwardResult,
    Loss,
    LoraSettings,
    PromptScores,
    SampleSettings,
    ScoresWanted,
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
        self._pending: deque[_Answer] = deque()
        self._gone: TwinkleError | None = None
        threading.Thread(target=self._read, name="tinker-backend-answers", daemon=True).start()
        self._bases: list[BaseModel] = self._call("base_models")
        self._shares: bool = self._call("shares_passes")

    def begin(self, name: str, *args: Any) -> Callable[[], Any]:
        """Send the call ``name(*args)`` to the child without waiting for it; returns a function that waits for
        its answer (raising its error). The child answers in sending order, so a caller may send its next call
        while the child works on this one, and read this answer meanwhile. A thread reads every answer as it comes,
        so neither process ever waits on a full pipe."""
        answer = _Answer()
        with self._lock:
            if self._gone is not None:
                raise self._gone
            self._pending.append(answer)
            try:
                self._conn.send((name, args))
            except (EOFError, OSError) as err:
                self._fail(err)
        return answer.get

    def _read(self) -> None:
        """The answers' thread: each answer goes to the oldest call still waiting; when the child is gone, every
        waiting call answers that."""
        while True:
            try:
                ok, value = self._conn.recv()
            except (EOFError, OSError) as err:
                with self._lock:
                    self._fail(err)
                return
            with self._lock:
                self._pending.popleft().set(ok, value)

    def _fail(self, err: BaseException) -> None:
        """(lock held) The child is gone: this and every waiting call answer a ``TwinkleError`` saying so."""
        if self._gone is None:
            code = self._process.exitcode
            self._gone = TwinkleError(f"the Tinker training backend's process ended (exit code {code}: "
                                      f"{err or 'closed'}) and its models with it; restart the server")
        while self._pending:
            self._pending.popleft().set(False, self._gone)

    def _call(self, name: str, *args: Any) -> Any:
        return self.begin(name, *args)()

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
               wanted: ScoresWanted) -> tuple[list[Sequence], PromptScores | None]:
        """As ``TrainingBackend.sample``, in the child."""
        return self._call("sample", weights, prompt, count, settings, wanted)

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


class _Answer:
    """A call's answer, once the child has sent it."""

    def __init__(self) -> None:
        self._ready = threading.Event()
        self._ok, self._value = False, None

    def set(self, ok: bool, value: Any) -> None:
        """Keep the answer (``ok``: a value, else an exception to raise) and wake the waiting caller."""
        self._ok, self._value = ok, value
        self._ready.set()

    def get(self) -> Any:
        """Wait for the answer; return it, or raise its error."""
        self._ready.wait()
        if self._ok:
            return self._value
        raise self._value


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
