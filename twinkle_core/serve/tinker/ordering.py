"""The Tinker API's futures and the order of a training model's requests (a connector of ``TinkerService``).

- **Futures.** Every training, sampling or model-creating request is answered at once with a request id; the work
  runs on the engine thread and its result (JSON, or protobuf bytes) waits in a ``Future`` that
  ``retrieve_future`` long-polls. Request ids carry the server's boot id, so a future lost in a restart is told
  apart from one that never existed (an error naming the restart, not a hang or a 404). Answers are freed
  ``KEEP_ANSWERS_SECONDS`` after they are ready.
- **Order.** A training model's requests run in their ``seq_id`` order whatever order they arrive in (a
  ``forward_backward`` split into chunks posts them out of order). A request refused before it is queued — by the
  service's checks or by the route's validation (``Requests.refusing``, ``Requests.refuse``) — still takes its
  place in the order, answered with its error, so the ones after it are not held back: a refusal never freezes a
  model. A repeated ``(model, seq_id)`` gets the first one's request id.
"""

from __future__ import annotations

import asyncio
import itertools
import threading
import time
import uuid
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import Any, Callable, Iterator

from twinkle_core.errors import TwinkleError
from twinkle_core.serve.tinker.engine import Call, Engine, Pass

KEEP_ANSWERS_SECONDS = 600.0
"""How long a future's answer is kept after it is ready (a client polls within seconds; then it is freed)."""

Work = Callable[[], Any] | Pass | Call
"""What the engine runs for a request: a plain callable, a forward(-backward) ``Pass`` or a backend ``Call``."""


class NotFound(TwinkleError):
    """A session, model, sampler, checkpoint or future the caller does not have (404)."""


@dataclass
class Future:
    """The answer to one request, once the engine has run it: ``result`` (a JSON dict, or protobuf bytes) or
    ``error`` (message and category: ``user`` for what the request did wrong, ``server`` for the rest)."""

    id: str
    user: str
    done: threading.Event = field(default_factory=threading.Event)
    result: Any = None
    error: tuple[str, str] | None = None
    waiters: list[tuple[asyncio.AbstractEventLoop, asyncio.Future]] = field(default_factory=list)
    guard: threading.Lock = field(default_factory=threading.Lock)
    finished: float = 0.0

    def finish(self, result: Any = None, error: tuple[str, str] | None = None) -> None:
        """Set the answer and wake every poll waiting on it."""
        with self.guard:
            self.result, self.error, self.finished = result, error, time.monotonic()
            self.done.set()
            waiters, self.waiters = self.waiters, []
        for loop, waiter in waiters:
            loop.call_soon_threadsafe(lambda w=waiter: w.done() or w.set_result(None))

    def wait_with(self, loop: asyncio.AbstractEventLoop) -> asyncio.Future:
        """An asyncio future of ``loop`` that is done when this one is."""
        waiter = loop.create_future()
        with self.guard:
            if self.done.is_set():
                waiter.set_result(None)
            else:
                self.waiters.append((loop, waiter))
        return waiter


class Requests:
    """The futures of every user and the queueing of each training model's requests in ``seq_id`` order (see the
    module docstring). A model is anything with ``next_seq``, ``waiting``, ``by_seq`` and ``used``
    (``TrainingModel``); ``prepare(model)`` loads a model that was written out back before its work runs."""

    def __init__(self, engine: Engine, lock: threading.Lock, prepare: Callable[[Any], None]) -> None:
        """Queue work on ``engine``; ``lock`` guards the futures and the models' order (the service's lock)."""
        self.engine, self.lock, self.prepare = engine, lock, prepare
        self.boot = uuid.uuid4().hex[:8]
        self.futures: dict[str, Future] = {}
        self._ids = itertools.count(1)

    def new(self, user: str) -> Future:
        """A new future of ``user``, known by its id until it expires."""
        future = Future(f"{self.boot}-{next(self._ids)}", user)
        with self.lock:
            self.futures[future.id] = future
        return future

    def answered(self, user: str, result: Any) -> Future:
        """A future of ``user`` already answered with ``result``."""
        future = self.new(user)
        future.finish(result)
        return future

    def get(self, user: str, request_id: str) -> Future:
        """``user``'s future ``request_id``; one from before a restart is answered with that error.

        Raises:
            NotFound: no such future of ``user``.
        """
        found = self.futures.get(request_id)
        if found is not None and found.user == user:
            return found
        if found is None and "-" in request_id and request_id.split("-", 1)[0] != self.boot:
            lost = Future(request_id, user)
            lost.finish(error=("the server restarted and this request was lost with it; load your last "
                               "checkpoint (load_state) and send it again", "server"))
            return lost
        raise NotFound(f"request '{request_id}' not found")

    def expire(self, now: float, models: list[Any]) -> None:
        """Free the answers kept past ``KEEP_ANSWERS_SECONDS`` (and ``models``' ids of them)."""
        with self.lock:
            expired = [key for key, f in self.futures.items()
                       if f.done.is_set() and now - f.finished > KEEP_ANSWERS_SECONDS]
            for key in expired:
                del self.futures[key]
            for model in models:
                model.by_seq = {seq: key for seq, key in model.by_seq.items() if key in self.futures}

    def now(self, user: str, work: Callable[[], Any]) -> Future:
        """Queue ``work`` on the engine at once (no model's order); its answer goes to the returned future."""
        future = self.new(user)
        self.engine.submit(future, work)
        return future

    def in_order(self, model: Any, seq_id: int, user: str, work: Work | None, refused: str | None = None) -> Future:
        """Queue ``work`` as ``model``'s request ``seq_id`` (run when every earlier one has been queued); a
        repeated ``seq_id`` returns its first future. ``refused``: the request failed its checks (its future
        answers that error, and its place in the order is kept)."""
        with self.lock:
            known = model.by_seq.get(seq_id)
            if known is not None and known in self.futures:
                return self.futures[known]
        future = self.new(user)
        with self.lock:
            model.by_seq[seq_id] = future.id
            if refused is not None:
                future.finish(error=(refused, "user"))
                work = None
            if seq_id < model.next_seq:  # an id already passed (a client that restarted its counter): run now
                if work is not None:
                    self.engine.submit(future, self._with_model(model, work))
                return future
            model.waiting[seq_id] = (future, work)
            while model.next_seq in model.waiting:
                queued, job = model.waiting.pop(model.next_seq)
                if job is not None:
                    self.engine.submit(queued, self._with_model(model, job))
                model.next_seq += 1
        return future

    def refuse(self, model: Any, seq_id: int, user: str, message: str) -> None:
        """Request ``seq_id`` of ``model`` was refused before it could be queued (``message``): it takes its place
        in the order, answered with that error, so the requests after it run."""
        self.in_order(model, seq_id, user, None, refused=message)

    @contextmanager
    def refusing(self, model: Any, seq_id: int, user: str) -> Iterator[None]:
        """Checks of request ``seq_id`` of ``model`` run inside: a ``TwinkleError`` refuses the request in its place
        in the order (``refuse``) and goes on to the caller."""
        try:
            yield
        except TwinkleError as err:
            self.refuse(model, seq_id, user, str(err))
            raise

    def _with_model(self, model: Any, work: Work) -> Work:
        """``work``, run once ``model`` is in the backend (loaded back if it was written out; the engine does it
        for a ``Pass`` and a ``Call``)."""
        if isinstance(work, (Pass, Call)):
            return work

        def run() -> Any:
            self.prepare(model)
            try:
                return work()
            finally:
                model.used = time.monotonic()

        return working_on(model, run)


def working_on(model: Any, work: Callable[[], Any]) -> Callable[[], Any]:
    """``work``, marked as working on ``model`` (the engine batches no later pass of it ahead of ``work``)."""
    work.model = model  # type: ignore[attr-defined]
    return work


__all__ = ["KEEP_ANSWERS_SECONDS", "Future", "NotFound", "Requests", "Work", "working_on"]
