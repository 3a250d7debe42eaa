"""The Tinker API's endpoints, mounted by ``twinkle serve --tinker`` at ``/tinker`` (the SDK's ``base_url`` is
``http://HOST:PORT/tinker``; its paths are ``/api/v1/...`` below that, apart from the job API's ``/api/v1``).

Who asks: the SDK sends its API key as ``X-API-Key``; it must start with ``tml-``, so a Twinkle token is given as
``tml-<token>`` (the bare token works too). With auth off every request is the local user. Errors are JSON with a
``detail`` naming the field: 400 for a request the server cannot take (the model's state is unchanged), 404 for
what the caller does not have (another user's model, checkpoint or future too), 429 over a limit.
"""

from __future__ import annotations

import asyncio
import json
from typing import Annotated, Any, Callable

from fastapi import APIRouter, Depends, HTTPException, Request, Response
from fastapi.exceptions import RequestValidationError
from pydantic import BaseModel, ConfigDict, Field, ValidationError

from twinkle_core.errors import TwinkleError
from twinkle_core.lowlevel import AdamSettings, LoraSettings, SampleSettings, ScoresWanted
from twinkle_core.serve.deps import Service, service
from twinkle_core.serve.tinker import wire
from twinkle_core.serve.tinker.ordering import NotFound
from twinkle_core.serve.tinker.state import POLL_SECONDS, Refused, TinkerService

router = APIRouter(tags=["tinker"])

# The calls of a training step (forward_backward, optim_step, asample, retrieve_future) are ``async``: they only
# check, queue and answer (the engine thread does the work), so they run on the event loop without a hop to the
# thread pool and back; calls that touch files or the catalogue stay plain ``def``.


async def tinker_user(request: Request, svc: Annotated[Service, Depends(service)]) -> str:
    """The caller's name, from ``X-API-Key: tml-<token>`` (401 without a known token; the local user with auth
    off)."""
    if not svc.config.auth:
        from twinkle_core.store.catalogue import default_user

        return default_user()
    key = request.headers.get("x-api-key", "").strip()
    user = svc.accounts.by_token(key.removeprefix("tml-")) if key else None
    if user is None:
        raise HTTPException(401, "send a Twinkle token as the Tinker API key: api_key='tml-<token>' (twinkle users "
                                 "token NAME)")
    return user.name


User = Annotated[str, Depends(tinker_user)]


async def _state(request: Request) -> TinkerService:
    # async, as every dependency here: FastAPI runs a plain ``def`` dependency in its thread pool, and the hop
    # costs more than the lookup
    return request.app.state.tinker


State = Annotated[TinkerService, Depends(_state)]


def _answer(work: Callable[[], Any]) -> Any:
    """``work()``, its errors as HTTP errors with a JSON detail (never an empty 400: the SDK retries those)."""
    try:
        return work()
    except NotFound as err:
        raise HTTPException(404, str(err)) from None
    except Refused as err:
        raise HTTPException(429, str(err)) from None
    except TwinkleError as err:
        raise HTTPException(400, str(err)) from None


class _Body(BaseModel):
    model_config = ConfigDict(extra="ignore")


class LoraConfig(_Body):
    """The SDK's ``LoraConfig``."""

    rank: int = Field(32, ge=1, le=1024)
    train_unembed: bool = True
    train_mlp: bool = True
    train_attn: bool = True
    seed: int | None = None


class CreateModel(_Body):
    """``create_model``: a LoRA training model on a base."""

    session_id: str
    model_seq_id: int = 0
    base_model: str
    lora_config: LoraConfig = Field(default_factory=LoraConfig)


class ModelRef(_Body):
    """A request naming a training model."""

    model_id: str


class Adam(_Body):
    """The SDK's ``AdamParams`` (finite numbers only)."""

    model_config = ConfigDict(extra="ignore", allow_inf_nan=False)

    learning_rate: float = Field(1e-4, ge=0)
    beta1: float = Field(0.9, ge=0, lt=1)
    beta2: float = Field(0.95, ge=0, lt=1)
    eps: float = Field(1e-12, gt=0)
    weight_decay: float = Field(0.0, ge=0)
    grad_clip_norm: float = Field(0.0, ge=0)


class OptimStep(_Body):
    """``optim_step`` (its ``adam_params`` checked in the route, so that a refused step keeps its place in the
    model's order)."""

    model_id: str
    seq_id: int
    adam_params: dict[str, Any] | None = Field(
        None, description="the SDK's AdamParams (``Adam``): learning_rate ≥ 0, beta1 and beta2 in [0, 1), eps > 0, "
                          "weight_decay ≥ 0, grad_clip_norm ≥ 0, all finite")


class SaveWeights(_Body):
    """``save_weights`` and ``save_weights_for_sampler`` (named, or for a new sampling session)."""

    model_id: str
    seq_id: int
    path: str | None = None
    overwrite: bool = True
    sampling_session_seq_id: int | None = None


class LoadWeights(_Body):
    """``load_weights`` into a model, or (with ``session_id``) into a new one."""

    path: str
    optimizer: bool = False
    model_id: str | None = None
    seq_id: int | None = None
    session_id: str | None = None
    model_seq_id: int | None = None


class CreateSampler(_Body):
    """``create_sampling_session`` on saved weights or a base model."""

    session_id: str
    sampling_session_seq_id: int = 0
    model_path: str | None = None
    base_model: str | None = None


class Chunk(_Body):
    """A ``ModelInput`` chunk (token ids only)."""

    type: str = "encoded_text"
    tokens: list[int] = Field(default_factory=list)


class Prompt(_Body):
    """The SDK's ``ModelInput``."""

    chunks: list[Chunk]


class Sampling(_Body):
    """The SDK's ``SamplingParams``."""

    max_tokens: int = Field(16, ge=1, le=4096)
    temperature: float = Field(1.0, ge=0)
    top_p: float = Field(1.0, gt=0, le=1)
    top_k: int = -1
    seed: int | None = None
    stop: str | list[str] | list[int] | None = None


class Sample(_Body):
    """``asample`` (and ``compute_logprobs``)."""

    sampling_session_id: str
    prompt: Prompt
    num_samples: int = Field(1, ge=1, le=64)
    sampling_params: Sampling = Field(default_factory=Sampling)
    prompt_logprobs: bool | None = False
    topk_prompt_logprobs: int = Field(0, ge=0, le=1024)
    topk_sample_logprobs: int = Field(0, ge=0, le=1024)
    prompt_logprobs_last_n: int | None = Field(None, ge=1)
    seq_id: int = 0
    # asked of a sampler the SDK knows and this server does not serve: refused by name, never ignored
    target_prompt_logprobs: Any = None
    prompt_alt_tokens_k: int = 0
    record_stability_info: bool | None = None

    def unserved(self) -> str | None:
        """The first option this server does not serve that the request asks for, if any."""
        for name, value in (("target_prompt_logprobs", self.target_prompt_logprobs),
                            ("prompt_alt_tokens_k", self.prompt_alt_tokens_k),
                            ("record_stability_info", self.record_stability_info)):
            if value:
                return name
        return None


class Retrieve(_Body):
    """``retrieve_future``."""

    request_id: str


class Session(_Body):
    """A request naming a session."""

    session_id: str


# ---------------------------------------------------------------------- set-up
@router.post("/client/config")
async def client_config(user: User) -> dict[str, Any]:
    """What the SDK may use: no JWT exchange; forward-backward bodies uncompressed (the server reads zstd too)."""
    return {"pjwt_auth_enabled": False, "proto_compress_fwdbwd": False}


@router.post("/client/dynamic_config")
async def dynamic_config(user: User) -> dict[str, Any]:
    """Defaults (no sample cancellation)."""
    return {}


@router.post("/telemetry")
async def telemetry(user: User) -> dict[str, str]:
    """Accepted and dropped: nothing the SDK reports leaves the server or is kept."""
    return {"status": "accepted"}


@router.post("/create_session")
async def create_session(user: User, state: State) -> dict[str, Any]:
    """A new session of the caller."""
    return {"session_id": state.create_session(user), "type": "create_session"}


@router.post("/session_heartbeat")
async def heartbeat(body: Session, user: User, state: State) -> Response:
    """Alive; 410 (the SDK stops beating) for a session the server does not know (or ended: its client was silent
    too long)."""
    if not state.heartbeat(user, body.session_id):
        return Response('{"detail": "session not found"}', status_code=410, media_type="application/json")
    return Response('{"type": "session_heartbeat"}', media_type="application/json")


@router.post("/sessions/{session_id}/finish", status_code=204)
def finish_session(session_id: str, user: User, state: State) -> Response:
    """End the session: its training models are unloaded (their runs end ``stopped``; checkpoints stay)."""
    _answer(lambda: state.end_session(user, session_id))
    return Response(status_code=204)


@router.get("/get_server_capabilities")
async def capabilities(user: User, state: State) -> dict[str, Any]:
    """The base models this server trains and samples."""
    return {"supported_models": [{"model_name": b.name, "max_context_length": b.max_context_length,
                                  "trainable": True, "sampleable": True} for b in state.bases.values()]}


@router.get("/healthz")
async def healthz() -> dict[str, str]:
    """Alive."""
    return {"status": "ok"}


# ---------------------------------------------------------------------- models
def _future(future: Any, **extra: Any) -> dict[str, Any]:
    return {"request_id": future.id, **extra}


@router.post("/create_model")
def create_model(body: CreateModel, user: User, state: State) -> dict[str, Any]:
    """A LoRA training model on ``base_model`` (a future answering its ``model_id``)."""
    lora = LoraSettings(body.lora_config.rank, body.lora_config.train_attn, body.lora_config.train_mlp,
                        body.lora_config.train_unembed, body.lora_config.seed)
    _answer(lambda: state.admit(user))
    model_id, future = _answer(lambda: state.create_model(user, body.session_id, body.model_seq_id, body.base_model,
                                                          lora))
    return _future(future, model_id=model_id)


@router.post("/get_info")
async def get_info(body: ModelRef, user: User, state: State) -> dict[str, Any]:
    """The model's base, adapters and local tokenizer."""
    return _answer(lambda: state.info(user, body.model_id))


@router.post("/unload_model")
def unload_model(body: ModelRef, user: User, state: State) -> dict[str, Any]:
    """Forget the model (its run ends ``stopped``; checkpoints stay)."""
    _answer(lambda: state.unload(user, body.model_id))
    return {"model_id": body.model_id, "type": "unload_model"}


@router.post("/forward_backward")
async def forward_backward(request: Request, user: User, state: State) -> dict[str, Any]:
    """A forward (``forward_only``) or forward-backward pass over protobuf data (zstd or not), in the model's
    ``seq_id`` order; data that do not fit are a 400 naming the datum and field, and change nothing."""
    _answer(lambda: state.admit(user))
    body = await request.body()
    parsed = _answer(lambda: wire.read_forward_backward(body, request.headers.get("content-encoding")))
    future = _answer(lambda: state.forward_backward(user, parsed, wire.forward_output))
    return _future(future, model_id=parsed["model_id"])


@router.post("/optim_step")
async def optim_step(body: OptimStep, user: User, state: State) -> dict[str, Any]:
    """An Adam step on the gradients since the last one; settings out of range are a 422 naming the field, and the
    model's later requests are answered (the refused step keeps its place in the order)."""
    _answer(lambda: state.admit(user))
    try:
        adam = AdamSettings(**Adam.model_validate(body.adam_params or {}).model_dump())
    except ValidationError as err:
        errors = [{**e, "loc": ("body", "adam_params", *e["loc"])} for e in err.errors(include_url=False)]
        state.refuse(user, body.model_id, body.seq_id, "; ".join(
            f"adam_params.{'.'.join(str(p) for p in e['loc'])}: {e['msg']}" for e in err.errors(include_url=False)))
        raise RequestValidationError(errors) from None
    return _future(_answer(lambda: state.optim_step(user, body.model_id, body.seq_id, adam)))


@router.post("/save_weights")
def save_weights(body: SaveWeights, user: User, state: State) -> dict[str, Any]:
    """The model's adapters and optimizer state as ``tinker://<model>/weights/<path>``."""
    _answer(lambda: state.admit(user))
    return _future(_answer(lambda: state.checkpoints.save(user, body.model_id, body.seq_id, body.path or "", "weights",
                                              body.overwrite)))


@router.post("/save_weights_for_sampler")
def save_for_sampler(body: SaveWeights, user: User, state: State) -> dict[str, Any]:
    """The model's adapters for sampling: named (``tinker://<model>/sampler_weights/<path>``) or, with
    ``sampling_session_seq_id``, as a new sampling session."""
    _answer(lambda: state.admit(user))
    if body.path:
        return _future(_answer(lambda: state.checkpoints.save(user, body.model_id, body.seq_id, body.path or "",
                                                  "sampler_weights")))
    if body.sampling_session_seq_id is None:
        raise HTTPException(400, "give path (a checkpoint name) or sampling_session_seq_id")
    session = body.model_id.split(":train:", 1)[0]
    return _future(_answer(lambda: state.samplers.from_model(user, body.model_id, body.seq_id, session,
                                                            int(body.sampling_session_seq_id or 0))))


@router.post("/load_weights")
def load_weights(body: LoadWeights, user: User, state: State) -> dict[str, Any]:
    """A checkpoint into the model ``model_id``, or (with ``session_id``) into a new model made from it."""
    _answer(lambda: state.admit(user))
    if body.session_id is not None:
        model_id, future = _answer(lambda: state.create_from_checkpoint(
            user, str(body.session_id), int(body.model_seq_id or 0), body.path, body.optimizer))
        return _future(future, model_id=model_id)
    if body.model_id is None or body.seq_id is None:
        raise HTTPException(400, "give model_id and seq_id (load into a model) or session_id (a new model)")
    return _future(_answer(lambda: state.checkpoints.load(user, str(body.model_id), int(body.seq_id or 0), body.path,
                                              body.optimizer)))


# ---------------------------------------------------------------------- sampling
@router.post("/create_sampling_session")
def create_sampling_session(body: CreateSampler, user: User, state: State) -> dict[str, Any]:
    """A sampling session on saved sampler weights (``model_path``) or a base model."""
    sampler_id = _answer(lambda: state.samplers.create(user, body.session_id, body.sampling_session_seq_id,
                                                      body.model_path, body.base_model))
    return {"sampling_session_id": sampler_id, "type": "create_sampling_session"}


@router.get("/samplers/{sampler_id}")
async def get_sampler(sampler_id: str, user: User, state: State) -> dict[str, Any]:
    """What a sampling session samples with."""
    sampler = _answer(lambda: state.samplers.get(user, sampler_id))
    return {"sampler_id": sampler.id, "base_model": sampler.base, "model_path": sampler.model_path}


@router.post("/asample")
async def asample(body: Sample, user: User, state: State) -> dict[str, Any]:
    """``num_samples`` continuations of the prompt (and, with ``prompt_logprobs``, the prompt's own
    log-probabilities: ``compute_logprobs``)."""
    _answer(lambda: state.admit(user))
    prompt: list[int] = []
    for i, chunk in enumerate(body.prompt.chunks):
        if chunk.type != "encoded_text":
            raise HTTPException(400, f"prompt.chunks[{i}] is a {chunk.type} chunk; this server samples from token "
                                     "ids (encoded_text) only")
        prompt.extend(chunk.tokens)
    unserved = body.unserved()
    if unserved is not None:
        raise HTTPException(400, f"{unserved}: this server does not serve it (it serves prompt_logprobs, "
                                 "topk_prompt_logprobs, topk_sample_logprobs and prompt_logprobs_last_n); "
                                 "leave it unset")
    params = body.sampling_params
    stop = [params.stop] if isinstance(params.stop, str) else params.stop
    settings = SampleSettings(params.max_tokens, params.temperature, params.top_p, params.top_k, params.seed, stop)
    wanted = ScoresWanted(bool(body.prompt_logprobs), body.topk_prompt_logprobs, body.topk_sample_logprobs,
                          body.prompt_logprobs_last_n)
    future = _answer(lambda: state.samplers.sample(user, body.sampling_session_id, prompt, body.num_samples, settings,
                                          wanted, wire.sample_output))
    return _future(future, sample_sequence_ids=[f"{future.id}:{i}" for i in range(body.num_samples)])


# ---------------------------------------------------------------------- futures
@router.post("/retrieve_future")
async def retrieve_future(body: Retrieve, user: User, state: State) -> Response:
    """The request's answer once it is done (protobuf for passes and samples, else JSON; a failure is
    ``{"error", "category"}``), held open up to 25 s while it runs, then ``{"type": "try_again"}``."""
    future = _answer(lambda: state.requests.get(user, body.request_id))
    if not future.done.is_set():
        try:
            await asyncio.wait_for(future.wait_with(asyncio.get_running_loop()), POLL_SECONDS)
        except asyncio.TimeoutError:
            return _json({"type": "try_again", "request_id": future.id, "queue_state": "active"})
    if future.error is not None:
        return _json({"error": future.error[0], "category": future.error[1]})
    if isinstance(future.result, bytes):
        return Response(future.result, media_type=wire.PROTOBUF)
    return _json(future.result or {})


def _json(value: Any) -> Response:
    return Response(json.dumps(value), media_type="application/json")


# ---------------------------------------------------------------------- runs
@router.get("/training_runs")
def training_runs(user: User, state: State, limit: int = 20, offset: int = 0) -> dict[str, Any]:
    """The caller's training runs, newest first."""
    runs = state.checkpoints.runs(user)
    return {"training_runs": runs[offset:offset + limit],
            "cursor": {"offset": offset, "limit": limit, "total_count": len(runs)}}


@router.get("/training_runs/{model_id}")
def training_run(model_id: str, user: User, state: State) -> dict[str, Any]:
    """One of the caller's training runs."""
    for run in state.checkpoints.runs(user):
        if run["training_run_id"] == model_id:
            return run
    raise HTTPException(404, f"training run '{model_id}' not found")


@router.get("/training_runs/{model_id}/checkpoints")
def run_checkpoints(model_id: str, user: User, state: State) -> dict[str, Any]:
    """A training run's checkpoints, oldest first."""
    return {"checkpoints": _answer(lambda: state.checkpoints.list(user, model_id))}


@router.delete("/training_runs/{model_id}/checkpoints/{kind}/{name}", status_code=204)
def delete_checkpoint(model_id: str, kind: str, name: str, user: User, state: State) -> Response:
    """Delete one of the caller's checkpoints (``kind``: ``weights`` or ``sampler_weights``); another user's, or
    one that does not exist, is a 404."""
    _answer(lambda: state.checkpoints.delete(user, model_id, f"{kind}/{name}"))
    return Response(status_code=204)


@router.get("/checkpoints")
def all_checkpoints(user: User, state: State, limit: int = 100, offset: int = 0) -> dict[str, Any]:
    """Every checkpoint of the caller's runs."""
    found = [c for run in state.checkpoints.runs(user) for c in state.checkpoints.list(user, run["training_run_id"])]
    return {"checkpoints": found[offset:offset + limit],
            "cursor": {"offset": offset, "limit": limit, "total_count": len(found)}}


@router.post("/weights_info")
def weights_info(body: dict[str, Any], user: User, state: State) -> dict[str, Any]:
    """What a checkpoint holds: its base and adapters."""
    _, record = _answer(lambda: state.checkpoints.folder(user, str(body.get("tinker_path", ""))))
    lora = record.get("lora", {})
    return {"base_model": record["base_model"], "is_lora": True, "lora_rank": lora.get("rank"),
            "train_unembed": lora.get("train_unembed"), "train_mlp": lora.get("train_mlp"),
            "train_attn": lora.get("train_attn")}
