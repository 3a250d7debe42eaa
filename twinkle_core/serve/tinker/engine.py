"""The Tinker API's engine: one thread that runs every request on the training backend, in the order requests
were queued — except that, on a backend whose shared passes pay (``TrainingBackend.shares_passes``: an
accelerator), passes (``forward``/``forward_backward``) waiting on the same base model run as one batch
(``TrainingBackend.forward_backward_many``), so several users' steps share one pass over the base's weights. A pass
is only gathered from behind other work when no earlier request of its model is still waiting (a model's requests
keep their order). On a CPU a pass costs what its rows cost, and a batch would only make each user wait for the
others' rows (``bench/tinker_api.py``): there passes run one by one, as they come.

A pass or a ``Call`` is sent to the backend without waiting when the backend can take calls that way (a
``BackendProcess``: ``begin``): while it works, the engine turns the previous answer into its reply (encoding it,
writing the loss curve), so with several users queued the backend does not wait for the API process between
steps. Anything else (a plain callable: saving, loading, sampling, writing a model out) first waits for what is in
flight, so every request still sees the backend as the requests before it left it."""

from __future__ import annotations

import threading
from collections import deque
from dataclasses import dataclass
from typing import Any, Callable

from twinkle_core.errors import TwinkleError
from twinkle_core.lowlevel import ForwardRequest, ForwardResult, TrainingBackend

MAX_BATCH_ROWS = 64
"""The most datums one batched pass takes."""


@dataclass
class Pass:
    """A forward(-backward) pass of ``model`` (anything with ``id`` and ``base``): the backend ``request`` and
    what its result becomes (``done``: the future's answer)."""

    model: Any
    request: ForwardRequest
    done: Callable[[ForwardResult], Any]


@dataclass
class Call:
    """The backend call ``method(*args)`` on behalf of ``model`` (anything with ``id`` and ``base``), and what its
    answer becomes (``done``, run on the engine thread in request order)."""

    model: Any
    method: str
    args: tuple[Any, ...]
    done: Callable[[Any], Any]


MAX_IN_FLIGHT = 2
"""Calls sent to the backend and not yet answered: the one it works on and the one after it."""


class Engine:
    """The engine thread (see the module docstring). ``prepare(model)`` runs before a model's work (it loads a
    model that was written out back into the backend)."""

    def __init__(self, backend: TrainingBackend, prepare: Callable[[Any], None]) -> None:
        """Start the thread."""
        self.backend, self.prepare = backend, prepare
        self.batches = backend.shares_passes()
        self._begin: Callable[..., Callable[[], Any]] = getattr(backend, "begin", None) or _begin_here(backend)
        self._queue: deque[tuple[Any, Any]] = deque()
        self._ready = threading.Condition()
        self._stopped = False
        threading.Thread(target=self._loop, name="tinker-engine", daemon=True).start()

    def submit(self, future: Any, work: Callable[[], Any] | Pass | Call) -> None:
        """Queue ``work`` (a callable, a ``Pass`` or a ``Call``); its answer goes to ``future`` (``None``: kept
        nowhere)."""
        with self._ready:
            self._queue.append((future, work))
            self._ready.notify()

    def stop(self) -> None:
        """Take no more work; what is queued is dropped."""
        with self._ready:
            self._stopped = True
            self._queue.clear()
            self._ready.notify()

    def _loop(self) -> None:
        in_flight: deque[tuple[Any, Call, Callable[[], Any]]] = deque()
        while True:
            with self._ready:
                while not self._queue and not self._stopped and not in_flight:
                    self._ready.wait()
                if self._stopped:
                    return
                taken = self._queue.popleft() if self._queue else None
                batch = ([taken, *self._gather(taken[1])] if taken and isinstance(taken[1], Pass) and self.batches
                         else [])
            if taken is None:  # nothing new: reply to what the backend has been working on
                _reply(*in_flight.popleft())
                continue
            future, work = taken
            call = _as_call(work) if not batch else None
            if call is not None:
                self._send(future, call, in_flight)
                continue
            while in_flight:  # everything else sees the backend as every earlier request left it
                _reply(*in_flight.popleft())
            if batch:
                self._passes(batch)
            else:
                _answer(future, work)

    def _send(self, future: Any, call: Call, in_flight: deque[tuple[Any, Call, Callable[[], Any]]]) -> None:
        """Send ``call`` to the backend (its model loaded first) and, with ``MAX_IN_FLIGHT`` sent, reply to the
        oldest."""
        try:
            self.prepare(call.model)
            answer = self._begin(call.method, *call.args)
        except Exception as err:  # noqa: BLE001 — its future answers the error, in order
            answer = _raising(err)
        in_flight.append((future, call, answer))
        while len(in_flight) >= MAX_IN_FLIGHT:
            _reply(*in_flight.popleft())

    def _gather(self, first: Pass) -> list[tuple[Any, Pass]]:
        """The queued passes that can join ``first``'s batch (same base, room left, nothing of their model
        waiting ahead of them), taken out of the queue (called with the lock held)."""
        taken, kept, blocked = [], deque(), set()
        rows = len(first.request.data)
        for future, work in self._queue:
            fits = (isinstance(work, Pass) and work.model.id not in blocked and work.model.base == first.model.base
                    and rows + len(work.request.data) <= MAX_BATCH_ROWS)
            if fits:
                taken.append((future, work))
                rows += len(work.request.data)
            else:
                kept.append((future, work))
                model = getattr(work, "model", None)  # a Pass's, or the model a queued call works on
                if model is not None:
                    blocked.add(model.id)
        self._queue = kept
        return taken

    def _passes(self, batch: list[tuple[Any, Pass]]) -> None:
        """Run the batch as one ``forward_backward_many``; if a request's data are refused, each runs alone so
        only its own future answers the error."""
        try:
            for _, work in batch:
                self.prepare(work.model)
            results = self.backend.forward_backward_many([work.request for _, work in batch])
        except TwinkleError:
            if len(batch) == 1:
                _answer(batch[0][0], lambda: self._alone(batch[0][1]))
                return
            for future, work in batch:
                _answer(future, lambda w=work: self._alone(w))
            return
        except Exception as err:  # noqa: BLE001 — every future of the batch answers, none hangs
            for future, _ in batch:
                _finish(future, error=(f"{type(err).__name__}: {err}", "server"))
            return
        for (future, work), result in zip(batch, results):
            _answer(future, lambda w=work, r=result: w.done(r))

    def _alone(self, work: Pass) -> Any:
        self.prepare(work.model)
        return work.done(self.backend.forward_backward_many([work.request])[0])


def _as_call(work: Any) -> Call | None:
    """``work`` as a backend ``Call`` (a pass is ``forward_backward_many`` of its one request), or ``None`` for a
    plain callable."""
    if isinstance(work, Call):
        return work
    if isinstance(work, Pass):
        return Call(work.model, "forward_backward_many", ([work.request],), lambda results, w=work: w.done(results[0]))
    return None


def _reply(future: Any, call: Call, answer: Callable[[], Any]) -> None:
    """Wait for a sent call's answer and reply with what ``call.done`` makes of it."""
    _answer(future, lambda: call.done(answer()))


def _begin_here(backend: TrainingBackend) -> Callable[..., Callable[[], Any]]:
    """For a backend in this process: ``begin`` runs the call at once; its answer (or error) is read later."""

    def begin(method: str, *args: Any) -> Callable[[], Any]:
        try:
            value = getattr(backend, method)(*args)
        except Exception as err:  # noqa: BLE001 — raised when the answer is read
            return _raising(err)
        return lambda: value

    return begin


def _raising(err: Exception) -> Callable[[], Any]:
    def read() -> Any:
        raise err

    return read


def _answer(future: Any, work: Callable[[], Any]) -> None:
    """Run ``work`` and put its answer (or its error: ``user`` for a ``TwinkleError``) in ``future``."""
    try:
        result = work()
    except TwinkleError as err:
        _finish(future, error=(str(err), "user"))
    except Exception as err:  # noqa: BLE001 — any failure answers the future, never hangs it
        _finish(future, error=(f"{type(err).__name__}: {err}", "server"))
    else:
        _finish(future, result)


def _finish(future: Any, result: Any = None, error: tuple[str, str] | None = None) -> None:
    if future is not None:
        future.finish(result, error)
