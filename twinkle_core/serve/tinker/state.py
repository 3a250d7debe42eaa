"""``TinkerService``: the state behind the Tinker API — sessions, training models and the one engine thread that
runs every request on the training backend — with its connectors: ``ordering.Requests`` (futures and each model's
request order), ``checkpoints.TinkerCheckpoints`` (save, load, list, delete) and ``sampling.Samplers`` (sampling
sessions).

- **Owners.** Every session, model, sampler, checkpoint and future belongs to the user who made it; another user's
  is unknown to the caller (404).
- **Sessions.** A session whose client sent neither a heartbeat (the SDK beats every 10 s) nor a request for
  ``session_seconds`` has lost its client (one that exited without closing): it is ended, each of its models'
  state saved first as checkpoint ``EXPIRED_CHECKPOINT`` (loadable, as any ``save_state``) and then unloaded, so
  abandoned models neither hold memory nor count against their user's limit.
- **Memory.** A model idle longer than ``idle_seconds`` (and between steps: no gradients waiting for an
  ``optim_step``) is written out — adapters and optimizer state — and dropped from the backend; its next request
  loads it back first, so nothing is lost. Each user may submit ``max_requests_per_minute`` requests (429 past it:
  the SDK waits and resends).
- **Runs.** A training model is a run of the store (project ``tinker``): its losses in ``logs/metrics.csv``, its
  checkpoints in ``tinker/weights/<name>/`` and ``tinker/sampler_weights/<name>/`` (``tinker://<model>/weights/
  <name>``); a model the server forgot (restarted) is found again through its run.
"""

from __future__ import annotations

import os
import threading
import time
import uuid
from typing import Any, Callable

from twinkle_core.errors import TwinkleError
from twinkle_core.lowlevel import (
    AdamSettings,
    Datum,
    ForwardRequest,
    LoraSettings,
    TrainingBackend,
    check_data,
    get_loss,
)
from twinkle_core.lowlevel.losses import REQUIRED
from twinkle_core.serve.tinker.checkpoints import TinkerCheckpoints
from twinkle_core.serve.tinker.engine import Call, Engine, Pass
from twinkle_core.serve.tinker.models import ALGORITHM, PROJECT, TrainingModel
from twinkle_core.serve.tinker.ordering import Future, NotFound, Requests, working_on
from twinkle_core.serve.tinker.sampling import Samplers
from twinkle_core.store.catalogue import RunStatus
from twinkle_core.store.runs import RunStore

CATALOGUE_SECONDS = 2.0
"""How often a training model's latest metrics go into its run's catalogue row (``metrics.csv`` gets every step)."""

POLL_SECONDS = 25.0
"""How long ``retrieve_future`` holds a poll open (the SDK gives up on one after 45 s)."""

EXPIRED_CHECKPOINT = "session-expired"
"""The checkpoint (``tinker://<model>/weights/session-expired``) an expired session's models are saved as."""


class Refused(TwinkleError):
    """A request the caller may not make now: over a limit (429)."""


class TinkerService:
    """The Tinker API's state and engine (see the module docstring)."""

    def __init__(self, store: RunStore, backend: TrainingBackend, max_models_per_user: int = 8,
                 idle_seconds: float | None = 600.0, max_requests_per_minute: int | None = None,
                 session_seconds: float | None = 120.0, report_to: list[str] | None = None) -> None:
        """Serve ``backend``'s base models, recording runs in ``store``; any run left ``running`` by a server that
        died is marked ``interrupted`` (its checkpoints stay loadable). ``idle_seconds``: write out models idle
        that long (``None``: never); ``max_requests_per_minute``: each user's submissions (``None``: no limit);
        ``session_seconds``: end sessions silent that long (``None``: never); ``report_to``: the experiment
        trackers each training model's run reports its parameters and metric rows to (``twinkle_core.tracking``)."""
        self.store, self.backend, self.max_models_per_user = store, backend, max_models_per_user
        self.report_to = list(report_to or [])
        self.idle_seconds, self.max_requests_per_minute = idle_seconds, max_requests_per_minute
        self.session_seconds = session_seconds
        self.beats: dict[str, float] = {}
        """Each session's last sign of its client (a heartbeat or a request), ``time.monotonic``."""
        self._recent: dict[str, list[float]] = {}
        self.lock = threading.Lock()
        self.engine = Engine(backend, self._loaded)
        self.requests = Requests(self.engine, self.lock, self._loaded)
        self.sessions: dict[str, str] = {}
        self.models: dict[str, TrainingModel] = {}
        self.bases = {b.name: b for b in backend.base_models()}
        self.checkpoints = TinkerCheckpoints(store, backend, self.requests, self.models, self.model)
        self.samplers = Samplers(backend, self.requests, self.checkpoints, self.bases, self.lock, self._session,
                                 self.model)
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
        """Every few seconds, end the sessions silent past ``session_seconds``, write out the models idle past
        ``idle_seconds`` (on the engine thread) and free the answers kept too long (``Requests.expire``)."""
        interval = max(0.2, min(5.0, float(self.idle_seconds or 20.0) / 4, float(self.session_seconds or 20.0) / 4))
        while True:
            time.sleep(interval)
            now = time.monotonic()
            with self.lock:
                idle = [m for m in self.models.values() if not m.offloaded and not m.has_gradients
                        and not m.waiting and now - m.used > float(self.idle_seconds or 0)] \
                    if self.idle_seconds is not None else []
                loaded = list(self.models.values())
                silent = [session for session, beat in self.beats.items()
                          if self.session_seconds is not None and now - beat > self.session_seconds]
            for session in silent:
                self._expire(session)
            self.requests.expire(now, loaded)
            for model in idle:
                self.engine.submit(None, working_on(model, lambda m=model: self._offload(m)))

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
            self.beats[session] = time.monotonic()
        return session

    def _session(self, user: str, session: str) -> None:
        if self.sessions.get(session) != user:
            raise NotFound(f"session '{session}' not found")
        self.beats[session] = time.monotonic()

    def heartbeat(self, user: str, session: str) -> bool:
        """``user``'s client of ``session`` is alive; whether the session is known (an expired one is not)."""
        if self.sessions.get(session) != user:
            return False
        self.beats[session] = time.monotonic()
        return True

    def _expire(self, session: str) -> None:
        """End ``session``, whose client went silent: each of its models' state saved as ``EXPIRED_CHECKPOINT``
        (on the engine thread, loaded back first if it was written out), then unloaded, its run ``stopped`` with
        the reason."""
        with self.lock:
            self.sessions.pop(session, None)
            self.beats.pop(session, None)
            models = [m for m in self.models.values() if m.id.startswith(f"{session}:")]
            for model in models:
                self.models.pop(model.id, None)
        for model in models:
            def save(m: TrainingModel = model) -> None:
                self._loaded(m)
                self.checkpoints.write(m, "weights", EXPIRED_CHECKPOINT)
                self.backend.unload(m.id)

            self._catalogue(model)
            self.store.end_run(model.run_id, RunStatus.STOPPED, f"its session ended: the client sent nothing for "
                               f"{self.session_seconds:g} s; its state is checkpoint tinker://{model.id}/weights/"
                               f"{EXPIRED_CHECKPOINT}", only_running=True)
            self.engine.submit(None, working_on(model, save))

    # ------------------------------------------------------------ models
    def model(self, user: str, model_id: str) -> TrainingModel:
        """``user``'s loaded training model ``model_id``.

        Raises:
            NotFound: none loaded (another user's, or one the server has forgotten: load its checkpoint).
        """
        found = self.models.get(model_id)
        if found is None or found.user != user:
            raise NotFound(f"model '{model_id}' not found (a model of a restarted server, or of a session that "
                           "expired, is loaded again from its checkpoint: create_training_client_from_state)")
        self.beats[model_id.split(":train:", 1)[0]] = time.monotonic()  # a request: its client is alive
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
            again = self.models.get(model_id)  # the same request again (a client's retry): its first answer
            if again is not None and again.user != user:
                raise NotFound(f"session '{session}' not found")
            known = self.requests.futures.get(again.by_seq.get(0, "")) if again is not None else None
        if again is not None:
            return model_id, known or self.requests.answered(user, {"model_id": model_id, "type": "create_model"})
        with self.lock:
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
        if self.report_to:
            from twinkle_core.engine.reporting import open_run_reporter

            model.reporter = open_run_reporter(self.store, run, self.report_to, run.hyperparams, {})
        future = self.requests.new(user)
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
                self._close_reporter(model, "failed")
                raise
            self.store.update(run.id, measured={"trainable_parameters": info.get("trainable_parameters")})
            if checkpoint is not None:  # the SDK's create_training_client_from_state waits for a load's answer
                return {"model_id": model_id, "type": "load_weights"}
            return {"model_id": model_id, "type": "create_model"}

        self.engine.submit(future, work)
        return model_id, future

    def info(self, user: str, model_id: str) -> dict[str, Any]:
        """What ``get_info`` answers: the base's name, its local tokenizer folder (what the SDK's ``get_tokenizer``
        loads with ``AutoTokenizer``), the adapters' rank."""
        model = self.model(user, model_id)
        tokenizer = self.bases[model.base].tokenizer
        if tokenizer and os.path.isfile(tokenizer):  # the SDK's get_tokenizer loads a folder (AutoTokenizer)
            tokenizer = os.path.dirname(os.path.abspath(tokenizer))
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
        self._close_reporter(model, "stopped")
        self.requests.now(user, lambda: self.backend.unload(model_id))

    def _close_reporter(self, model: TrainingModel, status: str) -> None:
        """The model's run ended: its trackers told so, from a thread (their last sends never hold a request up);
        what each sent goes into the run's record (``measured["trackers"]``)."""
        reporter, model.reporter = model.reporter, None
        if reporter is None:
            return

        def close() -> None:
            summary = reporter.close(status)
            record = self.store.catalogue.get(model.run_id)
            self.store.update(model.run_id, measured={**(record.measured if record else {}), "trackers": summary})

        threading.Thread(target=close, name=f"tinker-trackers-{model.run_id}", daemon=True).start()

    def end_session(self, user: str, session: str) -> None:
        """End a session: its training models are unloaded."""
        self._session(user, session)
        for model in [m for m in self.models.values() if m.id.startswith(f"{session}:")]:
            self.unload(user, model.id)
        with self.lock:
            self.sessions.pop(session, None)
            self.beats.pop(session, None)

    # ------------------------------------------------------------ training
    @staticmethod
    def check_data(model: TrainingModel, data: list[Datum], loss_fn: str, settings: dict[str, Any] | None = None
                   ) -> None:
        """The request's data fit the model and the loss (``twinkle_core.lowlevel.check_data``), and its
        ``loss_fn_config`` the loss, before it is queued.

        Raises:
            TwinkleError: an unknown loss or settings it cannot use, a missing input, lengths that differ, a token
                outside the vocabulary.
        """
        get_loss(loss_fn, settings or {})
        check_data(data, model.vocab, REQUIRED[loss_fn], loss_fn)

    def forward_backward(self, user: str, request: dict[str, Any], encode: Callable[[Any], bytes]) -> Future:
        """Queue a forward (``forward_only``) or forward-backward pass; a request whose data do not fit is refused
        in its place (``check_data``) and changes nothing."""
        model = self.model(user, request["model_id"])
        loss_fn, data, backward = request["loss_fn"], request["data"], not request["forward_only"]
        with self.requests.refusing(model, request["seq_id"], user):
            self.check_data(model, data, loss_fn, request["loss_fn_config"])
        loss, settings = get_loss(loss_fn), request["loss_fn_config"]

        def done(result: Any) -> bytes:
            model.used = time.monotonic()
            if backward:
                model.pending_loss = (model.pending_loss or 0.0) + result.metrics["loss:sum"]
                model.has_gradients = True
            return encode(result)

        work = Pass(model, ForwardRequest(model.id, data, loss, settings, backward), done)
        return self.requests.in_order(model, request["seq_id"], user, work)

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

        return self.requests.in_order(model, seq_id, user, Call(model, "optim_step", (model.id, adam), done))

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
        if model.reporter is not None:
            model.reporter.log_metrics({k: v for k, v in row.items() if k != "step" and v is not None}, model.steps)
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

    def create_from_checkpoint(self, user: str, session: str, model_seq_id: int, path: str,
                               optimizer: bool) -> tuple[str, Future]:
        """A new training model made from checkpoint ``path`` (its base and adapter shape), its state loaded.

        Raises:
            NotFound: no such checkpoint of ``user``'s, or session. Refused: over the per-user limit.
        """
        folder, record = self.checkpoints.folder(user, path)
        lora = LoraSettings(**{k: v for k, v in record["lora"].items() if k in LoraSettings.__dataclass_fields__})
        model_id, future = self.create_model(user, session, model_seq_id, record["base_model"], lora, folder,
                                             optimizer and record.get("kind") == "weights")
        if optimizer:
            self.models[model_id].steps = int(record.get("step", 0))
        return model_id, future

    def refuse(self, user: str, model_id: str, seq_id: int, message: str) -> None:
        """Request ``seq_id`` of ``user``'s model ``model_id`` was refused before it reached the service (the
        route's validation): it keeps its place in the model's order (``Requests.refuse``); nothing where the
        model is not ``user``'s."""
        model = self.models.get(model_id)
        if model is not None and model.user == user:
            self.requests.refuse(model, seq_id, user, message)
