"""``TinkerService``: the state behind the Tinker API — sessions, training models, sampling sessions and futures
— and the one engine thread that runs every request on the training backend.

- **Futures.** Every training, sampling or model-creating request is answered at once with a request id; the work
  runs on the engine thread and its result (JSON, or protobuf bytes) waits in a ``Future`` that
  ``retrieve_future`` long-polls. Request ids carry the server's boot id, so a future lost in a restart is told
  apart from one that never existed (an error naming the restart, not a hang or a 404).
- **Order.** A training model's requests run in their ``seq_id`` order whatever order they arrive in (a
  ``forward_backward`` split into chunks posts them out of order); a request refused at submission still takes
  its place in the order, so the ones after it are not held back. A repeated ``(model, seq_id)`` gets the first
  one's request id.
- **Owners.** Every session, model, sampler, checkpoint and future belongs to the user who made it; another user's
  is unknown to the caller (404).
- **Memory.** A model idle longer than ``idle_seconds`` (and between steps: no gradients waiting for an
  ``optim_step``) is written out — adapters and optimizer state — and dropped from the backend; its next request
  loads it back first, so nothing is lost. Each user may submit ``max_requests_per_minute`` requests (429 past it:
  the SDK waits and resends).
- **Runs.** A training model is a run of the store (project ``tinker``): its losses in ``logs/metrics.csv``, its
  checkpoints in ``tinker/weights/<name>/`` and ``tinker/sampler_weights/<name>/`` (``tinker://<model>/weights/
  <name>``); a model the server forgot (restarted) is found again through its run.
"""

from __future__ import annotations

import asyncio
import itertools
import json
import os
import re
import threading
import time
import uuid
from dataclasses import dataclass, field
from typing import Any, Callable

from twinkle_core.errors import TwinkleError
from twinkle_core.lowlevel import (
    AdamSettings,
    Datum,
    ForwardRequest,
    LoraSettings,
    SampleSettings,
    TrainingBackend,
    check_data,
    get_loss,
)
from twinkle_core.lowlevel.losses import REQUIRED
from twinkle_core.serve.tinker.engine import Call, Engine, Pass
from twinkle_core.store.catalogue import RunStatus
from twinkle_core.store.runs import RunStore
from twinkle_core.uris import run_uri

PROJECT = "tinker"
"""The store project every Tinker training model's run belongs to."""
CATALOGUE_SECONDS = 2.0
"""How often a training model's latest metrics go into its run's catalogue row (``metrics.csv`` gets every step)."""

ALGORITHM = "tinker-lora"
"""The algorithm name Tinker training runs are recorded under."""
POLL_SECONDS = 25.0
"""How long ``retrieve_future`` holds a poll open (the SDK gives up on one after 45 s)."""
KEEP_ANSWERS_SECONDS = 600.0
"""How long a future's answer is kept after it is ready (a client polls within seconds; then it is freed)."""
_NAME = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_.\-]{0,127}$")
_DELETING = ".deleting-"
"""What a checkpoint folder's name carries while ``delete_checkpoint`` removes it."""


def _in_passing(name: str) -> bool:
    """Whether checkpoint folder ``name`` is being written (``.partial``) or removed: neither listed nor loaded."""
    return name.endswith(".partial") or _DELETING in name


class NotFound(TwinkleError):
    """A session, model, sampler, checkpoint or future the caller does not have (404)."""


class Refused(TwinkleError):
    """A request the caller may not make now: over a limit (429)."""


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


@dataclass
class TrainingModel:
    """A training model: its owner, base, adapters, run, vocabulary size and its requests' order."""

    id: str
    user: str
    base: str
    lora: LoraSettings
    run_id: str
    vocab: int
    next_seq: int = 1
    waiting: dict[int, tuple[Future, Callable[[], Any] | None]] = field(default_factory=dict)
    by_seq: dict[int, str] = field(default_factory=dict)
    steps: int = 0
    pending_loss: float | None = None
    used: float = field(default_factory=time.monotonic)
    has_gradients: bool = False
    offloaded: bool = False
    offloads: int = 0
    catalogued: float = 0.0
    """When (``time.monotonic``) its latest metrics last went into the run's catalogue row."""
    uncatalogued: dict[str, Any] | None = None


@dataclass
class Sampler:
    """A sampling session: its owner and what it samples with (a weights folder, or a base model's name)."""

    id: str
    user: str
    weights: str
    base: str
    model_path: str | None = None


class TinkerService:
    """The Tinker API's state and engine (see the module docstring)."""

    def __init__(self, store: RunStore, backend: TrainingBackend, max_models_per_user: int = 8,
                 idle_seconds: float | None = 600.0, max_requests_per_minute: int | None = None) -> None:
        """Serve ``backend``'s base models, recording runs in ``store``; any run left ``running`` by a server that
        died is marked ``interrupted`` (its checkpoints stay loadable). ``idle_seconds``: write out models idle
        that long (``None``: never); ``max_requests_per_minute``: each user's submissions (``None``: no limit)."""
        self.store, self.backend, self.max_models_per_user = store, backend, max_models_per_user
        self.idle_seconds, self.max_requests_per_minute = idle_seconds, max_requests_per_minute
        self._recent: dict[str, list[float]] = {}
        self.boot = uuid.uuid4().hex[:8]
        self.lock = threading.Lock()
        self.engine = Engine(backend, self._loaded)
        self.sessions: dict[str, str] = {}
        self.models: dict[str, TrainingModel] = {}
        self.samplers: dict[str, Sampler] = {}
        self.futures: dict[str, Future] = {}
        self._ids = itertools.count(1)
        self.bases = {b.name: b for b in backend.base_models()}
        for run in store.list():
            if run.algorithm == ALGORITHM and run.status == RunStatus.RUNNING:
                store.end_run(run.id, RunStatus.INTERRUPTED, "the server stopped while the model was loaded; "
                              "load a checkpoint to continue")
        threading.Thread(target=self._sweep, name="tinker-sweep", daemon=True).start()

    # ------------------------------------------------------------ limits and memory
    def admit(self, user: str) -> None:
        """Count a submission of ``user``.

        Raises:
            Refused: over ``max_requests_per_minute`` in the last minute.
        """
        if self.max_requests_per_minute is None:
            return
        now = time.monotonic()
        with self.lock:
            recent = [t for t in self._recent.get(user, []) if now - t < 60.0]
            if len(recent) >= self.max_requests_per_minute:
                self._recent[user] = recent
                raise Refused(f"more than {self.max_requests_per_minute} requests in a minute; this server limits "
                              "each user to that (the SDK waits and sends it again)")
            self._recent[user] = [*recent, now]

    def _sweep(self) -> None:
        """Every few seconds, write out the models idle past ``idle_seconds`` (on the engine thread) and free the
        answers kept past ``KEEP_ANSWERS_SECONDS``."""
        interval = max(0.2, min(5.0, float(self.idle_seconds or 20.0) / 4))
        while True:
            time.sleep(interval)
            now = time.monotonic()
            with self.lock:
                idle = [m for m in self.models.values() if not m.offloaded and not m.has_gradients
                        and not m.waiting and now - m.used > float(self.idle_seconds or 0)] \
                    if self.idle_seconds is not None else []
                expired = [key for key, f in self.futures.items()
                           if f.done.is_set() and now - f.finished > KEEP_ANSWERS_SECONDS]
                for key in expired:
                    del self.futures[key]
                for model in self.models.values():
                    model.by_seq = {seq: key for seq, key in model.by_seq.items() if key in self.futures}
            for model in idle:
                self.engine.submit(None, _on(model, lambda m=model: self._offload(m)))

    def _offload_folder(self, model: TrainingModel) -> str:
        return self.store.path(model.run_id, "tinker", "offloaded")

    def _offload(self, model: TrainingModel) -> None:
        """Write the model's adapters and optimizer state to its run and drop it from the backend (engine
        thread; skipped if it was used meanwhile)."""
        if model.offloaded or model.has_gradients or time.monotonic() - model.used <= float(self.idle_seconds or 0):
            return
        if self.models.get(model.id) is not model:
            return
        import shutil

        folder = self._offload_folder(model)
        shutil.rmtree(f"{folder}.partial", ignore_errors=True)
        self.backend.save(model.id, f"{folder}.partial", optimizer=True)
        shutil.rmtree(folder, ignore_errors=True)
        os.replace(f"{folder}.partial", folder)
        self.backend.unload(model.id)
        model.offloaded, model.offloads = True, model.offloads + 1

    def _loaded(self, model: TrainingModel) -> None:
        """Load an offloaded model back (engine thread), exactly as it was written out."""
        model.used = time.monotonic()
        if not model.offloaded:
            return
        self.backend.create(model.id, model.base, model.lora)
        self.backend.load(model.id, self._offload_folder(model), optimizer=True)
        model.offloaded = False

    def close(self) -> None:
        """Stop taking work; runs of loaded models end ``stopped`` (their checkpoints stay loadable)."""
        self.engine.stop()
        for model in self.models.values():
            self._catalogue(model)
            self.store.end_run(model.run_id, RunStatus.STOPPED, only_running=True)

    # ------------------------------------------------------------ sessions
    def create_session(self, user: str) -> str:
        """A new session of ``user``."""
        session = f"s{uuid.uuid4().hex[:12]}"
        with self.lock:
            self.sessions[session] = user
        return session

    def _session(self, user: str, session: str) -> None:
        if self.sessions.get(session) != user:
            raise NotFound(f"session '{session}' not found")

    def known_session(self, user: str, session: str) -> bool:
        """Whether ``session`` is ``user``'s."""
        return self.sessions.get(session) == user

    # ------------------------------------------------------------ futures
    def _future(self, user: str) -> Future:
        future = Future(f"{self.boot}-{next(self._ids)}", user)
        with self.lock:
            self.futures[future.id] = future
        return future

    def future(self, user: str, request_id: str) -> Future:
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

    def _run(self, future: Future, work: Callable[[], Any] | Pass | Call) -> None:
        """Queue ``work`` on the engine; its answer goes to ``future``."""
        self.engine.submit(future, work)

    def _in_order(self, model: TrainingModel, seq_id: int, user: str, work: Callable[[], Any] | Pass | Call | None,
                  refused: str | None = None) -> Future:
        """Queue ``work`` as ``model``'s request ``seq_id`` (run when every earlier one has been queued); a
        repeated ``seq_id`` returns its first future. ``refused``: the request failed its checks (its future
        answers that error, and its place in the order is kept)."""
        with self.lock:
            known = model.by_seq.get(seq_id)
            if known is not None and known in self.futures:
                return self.futures[known]
        future = self._future(user)
        with self.lock:
            model.by_seq[seq_id] = future.id
            if refused is not None:
                future.finish(error=(refused, "user"))
                work = None
            if seq_id < model.next_seq:  # an id already passed (a client that restarted its counter): run now
                if work is not None:
                    self._run(future, self._with_model(model, work))
                return future
            model.waiting[seq_id] = (future, work)
            while model.next_seq in model.waiting:
                queued, job = model.waiting.pop(model.next_seq)
                if job is not None:
                    self._run(queued, self._with_model(model, job))
                model.next_seq += 1
        return future

    def _with_model(self, model: TrainingModel,
                    work: Callable[[], Any] | Pass | Call) -> Callable[[], Any] | Pass | Call:
        """``work``, run once ``model`` is in the backend (loaded back if it was written out; the engine does it
        for a ``Pass``)."""
        if isinstance(work, (Pass, Call)):
            return work

        def run() -> Any:
            self._loaded(model)
            try:
                return work()
            finally:
                model.used = time.monotonic()

        return _on(model, run)

    def _now(self, user: str, work: Callable[[], Any]) -> Future:
        future = self._future(user)
        self._run(future, work)
        return future

    # ------------------------------------------------------------ models
    def model(self, user: str, model_id: str) -> TrainingModel:
        """``user``'s loaded training model ``model_id``.

        Raises:
            NotFound: none loaded (another user's, or one the server has forgotten: load its checkpoint).
        """
        found = self.models.get(model_id)
        if found is None or found.user != user:
            raise NotFound(f"model '{model_id}' not found (a model of a restarted server is loaded again from its "
                           "checkpoint: create_training_client_from_state)")
        return found

    def create_model(self, user: str, session: str, model_seq_id: int, base_model: str, lora: LoraSettings,
                     checkpoint: str | None = None, optimizer: bool = False) -> tuple[str, Future]:
        """A new training model on ``base_model`` (``<session>:train:<n>``, the id the SDK expects), recorded as a
        run; with ``checkpoint`` (a folder ``save`` wrote) its state is loaded into it.

        Raises:
            NotFound: an unknown session. TwinkleError: an unknown base model. Refused: over the per-user limit.
        """
        self._session(user, session)
        model_id = f"{session}:train:{model_seq_id}"
        with self.lock:
            if model_id in self.models:  # the same request again (a client's retry): its first answer
                if self.models[model_id].user != user:
                    raise NotFound(f"session '{session}' not found")
                known = self.futures.get(self.models[model_id].by_seq.get(0, ""))
                if known is None:
                    known = Future(f"{self.boot}-{next(self._ids)}", user)
                    known.finish({"model_id": model_id, "type": "create_model"})
                    self.futures[known.id] = known
                return model_id, known
            if base_model not in self.bases:
                raise TwinkleError(f"base_model '{base_model}' is not served here; choose one of "
                                   f"{', '.join(sorted(self.bases)) or 'none (start the server with --tinker-model)'}")
            owned = sum(1 for m in self.models.values() if m.user == user)
            if owned >= self.max_models_per_user:
                raise Refused(f"you have {owned} training models loaded, the most this server allows per user; "
                              "unload one (end its session) first")
        run = self.store.create_run(user, PROJECT, algorithm=ALGORITHM, task="causal_lm", mode="tinker",
                                    hyperparams={"base_model": base_model, "lora_rank": lora.rank,
                                                 "train_attn": lora.train_attn, "train_mlp": lora.train_mlp,
                                                 "train_unembed": lora.train_unembed, "tinker_model_id": model_id})
        model = TrainingModel(model_id, user, base_model, lora, run.id, vocab=0)
        future = self._future(user)
        with self.lock:
            self.models[model_id] = model
            model.by_seq[0] = future.id

        def work() -> dict[str, Any]:
            try:
                info = self.backend.create(model_id, base_model, lora)
                model.vocab = int(info.get("vocab_size", 0))
                if checkpoint is not None:
                    self.backend.load(model_id, checkpoint, optimizer)
            except BaseException:
                with self.lock:
                    self.models.pop(model_id, None)
                self.store.end_run(run.id, RunStatus.FAILED, "the model could not be created")
                raise
            self.store.update(run.id, measured={"trainable_parameters": info.get("trainable_parameters")})
            if checkpoint is not None:  # the SDK's create_training_client_from_state waits for a load's answer
                return {"model_id": model_id, "type": "load_weights"}
            return {"model_id": model_id, "type": "create_model"}

        self._run(future, work)
        return model_id, future

    def info(self, user: str, model_id: str) -> dict[str, Any]:
        """What ``get_info`` answers: the base's name and local tokenizer, the adapters' rank."""
        model = self.model(user, model_id)
        tokenizer = self.bases[model.base].tokenizer
        return {"model_id": model_id, "type": "get_info", "is_lora": True, "lora_rank": model.lora.rank,
                "model_name": model.base,
                "model_data": {"model_name": model.base, "arch": "transformer",
                               **({"tokenizer_id": tokenizer} if tokenizer and ":" not in tokenizer else {})}}

    def unload(self, user: str, model_id: str) -> None:
        """Forget a loaded model (its run ends ``stopped``; its checkpoints stay)."""
        model = self.model(user, model_id)
        with self.lock:
            self.models.pop(model_id, None)
        self._catalogue(model)
        self.store.end_run(model.run_id, RunStatus.STOPPED, only_running=True)
        self._now(user, lambda: self.backend.unload(model_id))

    def end_session(self, user: str, session: str) -> None:
        """End a session: its training models are unloaded."""
        self._session(user, session)
        for model in [m for m in self.models.values() if m.id.startswith(f"{session}:")]:
            self.unload(user, model.id)
        with self.lock:
            self.sessions.pop(session, None)

    # ------------------------------------------------------------ training
    @staticmethod
    def check_data(model: TrainingModel, data: list[Datum], loss_fn: str) -> None:
        """The request's data fit the model and the loss (``twinkle_core.lowlevel.check_data``), before it is
        queued.

        Raises:
            TwinkleError: an unknown loss, a missing input, lengths that differ, a token outside the vocabulary.
        """
        get_loss(loss_fn)
        check_data(data, model.vocab, REQUIRED[loss_fn], loss_fn)

    def forward_backward(self, user: str, request: dict[str, Any], encode: Callable[[Any], bytes]) -> Future:
        """Queue a forward (``forward_only``) or forward-backward pass; a request whose data do not fit is refused
        in its place (``check_data``) and changes nothing."""
        model = self.model(user, request["model_id"])
        loss_fn, data, backward = request["loss_fn"], request["data"], not request["forward_only"]
        try:
            self.check_data(model, data, loss_fn)
        except TwinkleError as err:
            self._in_order(model, request["seq_id"], user, None, refused=str(err))
            raise
        loss, settings = get_loss(loss_fn), request["loss_fn_config"]

        def done(result: Any) -> bytes:
            model.used = time.monotonic()
            if backward:
                model.pending_loss = (model.pending_loss or 0.0) + result.metrics["loss:sum"]
                model.has_gradients = True
            return encode(result)

        work = Pass(model, ForwardRequest(model.id, data, loss, settings, backward), done)
        return self._in_order(model, request["seq_id"], user, work)

    def optim_step(self, user: str, model_id: str, seq_id: int, adam: AdamSettings) -> Future:
        """Queue an Adam step; its loss (summed since the last step) is written to the run's metrics."""
        model = self.model(user, model_id)

        def done(metrics: dict[str, float]) -> dict[str, Any]:
            model.used = time.monotonic()
            model.steps += 1
            model.has_gradients = False
            self._log(model, {"step": model.steps, "train_loss": model.pending_loss,
                              "learning_rate": adam.learning_rate, "grad_norm": metrics.get("grad_norm")})
            model.pending_loss = None
            return {"type": "optim_step", "metrics": {k: float(v) for k, v in metrics.items()}}

        return self._in_order(model, seq_id, user, Call(model, "optim_step", (model.id, adam), done))

    def _log(self, model: TrainingModel, row: dict[str, Any]) -> None:
        """Append a metric row to the run's ``logs/metrics.csv`` (the engine thread is its only writer)."""
        import csv

        path = self.store.path(model.run_id, "logs", "metrics.csv")
        os.makedirs(os.path.dirname(path), exist_ok=True)
        fresh = not os.path.exists(path)
        with open(path, "a", encoding="utf-8", newline="") as handle:
            writer = csv.DictWriter(handle, fieldnames=list(row))
            if fresh:
                writer.writeheader()
            writer.writerow({k: "" if v is None else v for k, v in row.items()})
        model.uncatalogued = {"train_loss": row.get("train_loss"), "step": model.steps}
        if time.monotonic() - model.catalogued >= CATALOGUE_SECONDS:
            self._catalogue(model)

    def _catalogue(self, model: TrainingModel) -> None:
        """The model's latest metrics into its run's catalogue row (the dashboard's list; ``metrics.csv`` has
        every step): at most every ``CATALOGUE_SECONDS`` while it trains — a database write per step was a seventh
        of the server's time — and when it stops."""
        if model.uncatalogued is not None:
            self.store.update(model.run_id, metrics=model.uncatalogued)
            model.uncatalogued = None
        model.catalogued = time.monotonic()

    # ------------------------------------------------------------ checkpoints
    def _folder(self, model: TrainingModel, kind: str, name: str) -> str:
        return self.store.path(model.run_id, "tinker", kind, name)

    @staticmethod
    def check_name(name: str) -> None:
        """A checkpoint name the paths can carry.

        Raises:
            TwinkleError: empty, too long, or with characters other than letters, digits, ``_``, ``.``, ``-``.
        """
        if not _NAME.match(name or ""):
            raise TwinkleError(f"checkpoint name {name!r}: use 1–128 letters, digits, '_', '.' or '-' (no '/')")

    def save(self, user: str, model_id: str, seq_id: int, name: str, kind: str, overwrite: bool = True) -> Future:
        """Queue writing the model's state (``weights``: adapters and optimizer) or its adapters for sampling
        (``sampler_weights``) as checkpoint ``name``; the answer is its ``tinker://`` path."""
        model = self.model(user, model_id)
        self.check_name(name)
        folder = self._folder(model, kind, name)
        path = f"tinker://{model_id}/{kind}/{name}"

        def work() -> dict[str, Any]:
            if os.path.exists(folder) and not overwrite:
                raise TwinkleError(f"checkpoint '{path}' exists; save under another name or with overwrite")
            partial = f"{folder}.partial"
            import shutil

            shutil.rmtree(partial, ignore_errors=True)
            self.backend.save(model.id, partial, optimizer=kind == "weights")
            uri = f"{run_uri(model.run_id)}/tinker/{kind}/{name}"
            with open(os.path.join(partial, "checkpoint.json"), "w", encoding="utf-8") as handle:
                json.dump({"tinker_path": path, "twinkle_uri": uri, "model_id": model.id, "base_model": model.base,
                           "lora": vars(model.lora), "kind": kind, "step": model.steps, "time": time.time()}, handle)
            shutil.rmtree(folder, ignore_errors=True)
            os.replace(partial, folder)  # a kill before this line leaves the previous checkpoint whole
            return {"path": path, "type": "save_weights" if kind == "weights" else "save_weights_for_sampler"}

        return self._in_order(model, seq_id, user, work)

    def sampler_from_model(self, user: str, model_id: str, seq_id: int, session: str, number: int) -> Future:
        """Queue saving the model's adapters for sampling and open a sampling session on them (the SDK's
        ``save_weights_and_get_sampling_client``); the answer is the session's id."""
        model = self.model(user, model_id)
        name = f"sampler-{number}-{uuid.uuid4().hex[:6]}"
        saved = self.save(user, model_id, seq_id, name, "sampler_weights")
        sampler_id = f"{session}:sample:{number}"
        answer = self._future(user)

        def wait() -> None:  # runs after the save, on the engine thread (queued behind it)
            saved.done.wait()
            if saved.error:
                answer.finish(error=saved.error)
                return
            with self.lock:
                self.samplers[sampler_id] = Sampler(sampler_id, user, self._folder(model, "sampler_weights", name),
                                                    model.base, saved.result["path"])
            answer.finish({"sampling_session_id": sampler_id, "path": saved.result["path"],
                           "type": "save_weights_for_sampler"})

        threading.Thread(target=wait, daemon=True).start()
        return answer

    def checkpoint_folder(self, user: str, path: str) -> tuple[str, dict[str, Any]]:
        """The folder and record of ``user``'s checkpoint ``tinker://<model>/<kind>/<name>`` (the model need not
        be loaded: its run is found in the store).

        Raises:
            NotFound: not a checkpoint of ``user``'s.
        """
        parts = path.removeprefix("tinker://").split("/") if path.startswith("tinker://") else []
        if len(parts) != 3 or parts[1] not in ("weights", "sampler_weights"):
            raise NotFound(f"checkpoint '{path}' not found (a tinker://<model>/weights/<name> path)")
        model_id, kind, name = parts
        if not _NAME.match(name) or _in_passing(name):
            raise NotFound(f"checkpoint '{path}' not found")
        run_id = self.models[model_id].run_id if model_id in self.models and self.models[model_id].user == user \
            else self._run_of(user, model_id)
        folder = self.store.path(run_id, "tinker", kind, name)
        try:
            with open(os.path.join(folder, "checkpoint.json"), encoding="utf-8") as handle:
                return folder, json.load(handle)
        except (OSError, ValueError):
            raise NotFound(f"checkpoint '{path}' not found") from None

    def delete_checkpoint(self, user: str, model_id: str, checkpoint_id: str) -> None:
        """Delete ``user``'s checkpoint ``<kind>/<name>`` of training run ``model_id``: renamed out of the listing at
        once, then removed (a reader sees it whole or not at all). Samplers already made from it keep their copy.

        Raises:
            NotFound: not a checkpoint of ``user``'s.
        """
        import shutil

        folder, _ = self.checkpoint_folder(user, f"tinker://{model_id}/{checkpoint_id}")
        doomed = f"{folder}{_DELETING}{uuid.uuid4().hex[:8]}"
        try:
            os.rename(folder, doomed)
        except FileNotFoundError:
            raise NotFound(f"checkpoint 'tinker://{model_id}/{checkpoint_id}' not found") from None
        shutil.rmtree(doomed, ignore_errors=True)

    def _run_of(self, user: str, model_id: str) -> str:
        for run in self.store.list(user=user, project=PROJECT):
            if (run.hyperparams or {}).get("tinker_model_id") == model_id:
                return run.id
        raise NotFound(f"model '{model_id}' not found")

    def load(self, user: str, model_id: str, seq_id: int, path: str, optimizer: bool) -> Future:
        """Queue loading checkpoint ``path`` (adapters, and with ``optimizer`` the optimizer state) into a loaded
        model."""
        model = self.model(user, model_id)
        folder, record = self.checkpoint_folder(user, path)
        if optimizer and record.get("kind") != "weights":
            raise TwinkleError(f"'{path}' holds sampler weights, without optimizer state; load it without the "
                               "optimizer, or load a save_state checkpoint")

        def work() -> dict[str, Any]:
            self.backend.load(model.id, folder, optimizer)
            model.steps = int(record.get("step", model.steps)) if optimizer else model.steps
            return {"type": "load_weights", "path": path, "model_id": model.id}

        return self._in_order(model, seq_id, user, work)

    def create_from_checkpoint(self, user: str, session: str, model_seq_id: int, path: str,
                               optimizer: bool) -> tuple[str, Future]:
        """A new training model made from checkpoint ``path`` (its base and adapter shape), its state loaded."""
        folder, record = self.checkpoint_folder(user, path)
        lora = LoraSettings(**{k: v for k, v in record["lora"].items() if k in LoraSettings.__dataclass_fields__})
        model_id, future = self.create_model(user, session, model_seq_id, record["base_model"], lora, folder,
                                             optimizer and record.get("kind") == "weights")
        if optimizer:
            self.models[model_id].steps = int(record.get("step", 0))
        return model_id, future

    # ------------------------------------------------------------ sampling
    def create_sampler(self, user: str, session: str, number: int, model_path: str | None,
                       base_model: str | None) -> str:
        """A sampling session on saved sampler weights (``model_path``) or a base model."""
        self._session(user, session)
        sampler_id = f"{session}:sample:{number}"
        if model_path:
            folder, record = self.checkpoint_folder(user, model_path)
            sampler = Sampler(sampler_id, user, folder, record["base_model"], model_path)
        elif base_model in self.bases:
            sampler = Sampler(sampler_id, user, base_model, base_model)
        else:
            raise TwinkleError(f"base_model '{base_model}' is not served here; choose one of "
                               f"{', '.join(sorted(self.bases))}")
        with self.lock:
            self.samplers[sampler_id] = sampler
        return sampler_id

    def sampler(self, user: str, sampler_id: str) -> Sampler:
        """``user``'s sampling session.

        Raises:
            NotFound: none.
        """
        found = self.samplers.get(sampler_id)
        if found is None or found.user != user:
            raise NotFound(f"sampling session '{sampler_id}' not found")
        return found

    def sample(self, user: str, sampler_id: str, prompt: list[int], count: int, settings: SampleSettings,
               prompt_logprobs: bool, encode: Callable[[Any, Any], bytes]) -> Future:
        """Queue sampling ``count`` continuations of ``prompt`` (and its own log-probabilities when asked)."""
        sampler = self.sampler(user, sampler_id)
        if not prompt:
            raise TwinkleError("prompt is empty: give at least one token")
        if count < 1 or settings.max_tokens < 1:
            raise TwinkleError("num_samples and sampling_params.max_tokens must be at least 1")

        def work() -> bytes:
            sequences, scored = self.backend.sample(sampler.weights, prompt, count, settings, prompt_logprobs)
            return encode(sequences, scored)

        return self._now(user, work)

    # ------------------------------------------------------------ listing
    def training_runs(self, user: str) -> list[dict[str, Any]]:
        """``user``'s Tinker training runs (loaded or not), newest first, as the SDK's ``TrainingRun``."""
        found = []
        for run in self.store.list(user=user, project=PROJECT):
            hyper = run.hyperparams or {}
            model_id = hyper.get("tinker_model_id")
            if not model_id:
                continue
            checkpoints = self.checkpoints(user, model_id, run.id)
            last = {kind: next((c for c in reversed(checkpoints) if c["checkpoint_type"] == kind), None)
                    for kind in ("training", "sampler")}
            found.append({"training_run_id": model_id, "base_model": hyper.get("base_model"), "model_owner": user,
                          "is_lora": True, "lora_rank": hyper.get("lora_rank"), "corrupted": False,
                          "last_request_time": _iso(run.updated), "last_checkpoint": last["training"],
                          "last_sampler_checkpoint": last["sampler"], "user_metadata": {"twinkle_run": run.id}})
        return sorted(found, key=lambda r: r["last_request_time"], reverse=True)

    def checkpoints(self, user: str, model_id: str, run_id: str | None = None) -> list[dict[str, Any]]:
        """The checkpoints of ``user``'s training run ``model_id``, oldest first, as the SDK's ``Checkpoint``."""
        run_id = run_id or self._run_of(user, model_id)
        found = []
        for kind, label in (("weights", "training"), ("sampler_weights", "sampler")):
            root = self.store.path(run_id, "tinker", kind)
            for name in sorted(os.listdir(root)) if os.path.isdir(root) else []:
                record_file = os.path.join(root, name, "checkpoint.json")
                if _in_passing(name) or not os.path.exists(record_file):
                    continue
                with open(record_file, encoding="utf-8") as handle:
                    record = json.load(handle)
                size = sum(os.path.getsize(os.path.join(root, name, f)) for f in os.listdir(os.path.join(root, name)))
                found.append({"checkpoint_id": f"{kind}/{name}", "checkpoint_type": label,
                              "time": _iso(record.get("time", 0)), "tinker_path": record["tinker_path"],
                              "size_bytes": size, "public": False})
        return sorted(found, key=lambda c: c["time"])


def _on(model: TrainingModel, work: Callable[[], Any]) -> Callable[[], Any]:
    """``work``, marked as working on ``model`` (the engine batches no later pass of it ahead of ``work``)."""
    work.model = model  # type: ignore[attr-defined]
    return work


def _iso(seconds: float) -> str:
    from datetime import datetime, timezone

    return datetime.fromtimestamp(float(seconds or 0), tz=timezone.utc).isoformat()
