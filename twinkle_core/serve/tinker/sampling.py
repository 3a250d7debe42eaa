"""The Tinker API's sampling sessions (a connector of ``TinkerService``): on saved sampler weights, on a base model,
or made from a training model's adapters at once (``save_weights_and_get_sampling_client``)."""

from __future__ import annotations

import threading
import uuid
from dataclasses import dataclass
from typing import Any, Callable

from twinkle_core.errors import TwinkleError
from twinkle_core.lowlevel import SampleSettings, ScoresWanted, TrainingBackend
from twinkle_core.serve.tinker.checkpoints import TinkerCheckpoints
from twinkle_core.serve.tinker.models import TrainingModel
from twinkle_core.serve.tinker.ordering import Future, NotFound, Requests


@dataclass
class Sampler:
    """A sampling session: its owner and what it samples with (a weights folder, or a base model's name)."""

    id: str
    user: str
    weights: str
    base: str
    model_path: str | None = None


class Samplers:
    """Every user's sampling sessions and their sampling requests."""

    def __init__(self, backend: TrainingBackend, requests: Requests, checkpoints: TinkerCheckpoints,
                 bases: dict[str, Any], lock: threading.Lock, session: Callable[[str, str], None],
                 model: Callable[[str, str], TrainingModel]) -> None:
        """Sample on ``backend``; ``bases``: the served base models by name; ``session(user, session_id)`` and
        ``model(user, model_id)`` raise ``NotFound`` for what ``user`` does not have."""
        self.backend, self.requests, self.checkpoints, self.bases = backend, requests, checkpoints, bases
        self.lock, self.session, self.model = lock, session, model
        self.sessions: dict[str, Sampler] = {}

    def create(self, user: str, session: str, number: int, model_path: str | None, base_model: str | None) -> str:
        """A sampling session on saved sampler weights (``model_path``) or a base model.

        Raises:
            NotFound: an unknown session or checkpoint. TwinkleError: a base model not served here.
        """
        self.session(user, session)
        sampler_id = f"{session}:sample:{number}"
        if model_path:
            folder, record = self.checkpoints.folder(user, model_path)
            sampler = Sampler(sampler_id, user, folder, record["base_model"], model_path)
        elif base_model in self.bases:
            sampler = Sampler(sampler_id, user, base_model, base_model)
        else:
            raise TwinkleError(f"base_model '{base_model}' is not served here; choose one of "
                               f"{', '.join(sorted(self.bases))}")
        with self.lock:
            self.sessions[sampler_id] = sampler
        return sampler_id

    def from_model(self, user: str, model_id: str, seq_id: int, session: str, number: int) -> Future:
        """Queue saving the model's adapters for sampling and open a sampling session on them (the SDK's
        ``save_weights_and_get_sampling_client``); the answer is the session's id."""
        model = self.model(user, model_id)
        name = f"sampler-{number}-{uuid.uuid4().hex[:6]}"
        saved = self.checkpoints.save(user, model_id, seq_id, name, "sampler_weights")
        sampler_id = f"{session}:sample:{number}"
        answer = self.requests.new(user)

        def wait() -> None:  # runs after the save, on the engine thread (queued behind it)
            saved.done.wait()
            if saved.error:
                answer.finish(error=saved.error)
                return
            with self.lock:
                self.sessions[sampler_id] = Sampler(sampler_id, user, self.checkpoints.folder_of(
                    model, "sampler_weights", name), model.base, saved.result["path"])
            answer.finish({"sampling_session_id": sampler_id, "path": saved.result["path"],
                           "type": "save_weights_for_sampler"})

        threading.Thread(target=wait, daemon=True).start()
        return answer

    def get(self, user: str, sampler_id: str) -> Sampler:
        """``user``'s sampling session.

        Raises:
            NotFound: none.
        """
        found = self.sessions.get(sampler_id)
        if found is None or found.user != user:
            raise NotFound(f"sampling session '{sampler_id}' not found")
        return found

    def sample(self, user: str, sampler_id: str, prompt: list[int], count: int, settings: SampleSettings,
               wanted: ScoresWanted, encode: Callable[[Any, Any], bytes]) -> Future:
        """Queue sampling ``count`` continuations of ``prompt`` (with the scores ``wanted`` asks for: the prompt's own
        log-probabilities, its and the samples' top tokens).

        Raises:
            NotFound: no such sampling session. TwinkleError: an empty prompt, no samples or tokens asked for,
                scores the prompt cannot give (``ScoresWanted.check``).
        """
        sampler = self.get(user, sampler_id)
        if not prompt:
            raise TwinkleError("prompt is empty: give at least one token")
        if count < 1 or settings.max_tokens < 1:
            raise TwinkleError("num_samples and sampling_params.max_tokens must be at least 1")
        wanted.check(len(prompt))

        def work() -> bytes:
            sequences, scored = self.backend.sample(sampler.weights, prompt, count, settings, wanted)
            return encode(sequences, scored)

        return self.requests.now(user, work)


__all__ = ["Sampler", "Samplers"]
