"""The Tinker API's engine: one thread that runs every request on the training backend, in the order requests
were queued — except that, on a backend whose shared passes pay (``TrainingBackend.shares_passes``: an
accelerator), passes (``forward``/``forward_backward``) waiting on the same base model run as one batch
(``TrainingBackend.forward_backward_many``), so several users' steps share one pass over the base's weights. A pass
is only gathered from behind other work when no earlier request of its model is still waiting (a model's requests
keep their order). On a CPU a pass costs what its rows cost, and a batch would only make each user wait for the
others' rows (``bench/tinker_api.py``): there passes run one by one, as they come."""

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


class Engine:
    """The engine thread (see the module docstring). ``prepare(model)`` runs before a model's work (it loads a
    model that was written out back into the backend)."""

    def __init__(self, backend: TrainingBackend, prepare: Callable[[Any], None]) -> None:
        """Start the thread."""
        self.backend, self.prepare = backend, prepare
        self.batches = backend.shares_passes()
        self._queue: deque[tuple[Any, Any]] = deque()
        self._ready = threading.Condition()
        self._stopped = False
        threading.Thread(target=self._loop, name="tinker-engine", daemon=True).start()

    def submit(self, future: Any, work: Callable[[], Any] | Pass) -> None:
        """Queue ``work`` (a callable, or a ``Pass``); its answer goes to ``future`` (``None``: kept nowhere)."""
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
        while True:
            with self._ready:
                while not self._queue and not self._stopped:
                    self._ready.wait()
                if self._stopped:
                    return
                future, work = self._queue.popleft()
                batch = ([(future, work), *(self._gather(work) if self.batches else [])] if isinstance(work, Pass)
                         else [])
            if batch:
                self._passes(batch)
            else:
                _answer(future, work)

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
