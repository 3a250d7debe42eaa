"""The Tinker-compatible training API of ``twinkle serve --tinker``: the official ``tinker`` SDK drives LoRA
training and sampling on the server's base models, step by step (``routes``: the endpoints; ``state``: sessions,
models, futures and the engine thread; ``wire``: the protocol's protobuf messages; ``remote``: the training backend
in a process of its own)."""

from __future__ import annotations

from typing import Any


def mount(app: Any, config: Any, store: Any) -> None:
    """Serve the Tinker API at ``/tinker/api/v1`` of ``app``, on the training backend ``config`` names, built with
    its base-model folders in a process of its own (``remote.BackendProcess``; a backend registered as an object
    rather than a ``"module:attr"`` target runs in this process).

    Raises:
        TwinkleError: no such backend (its plugin not installed), or the ``tinker`` package missing.
    """
    from twinkle_core.lookup import get_component
    from twinkle_core.serve.tinker import wire
    from twinkle_core.serve.tinker.routes import router
    from twinkle_core.serve.tinker.state import TinkerService

    wire.schema()  # fail now, by name, without the SDK's schema
    component = get_component("training_backend", config.tinker_backend)
    kwargs = {"models": dict(config.tinker_models)}
    if isinstance(component.target, str):  # in a process of its own, whose registry finds it as this one does
        from twinkle_core.serve.tinker.remote import BackendProcess

        backend = BackendProcess(config.tinker_backend, kwargs)
    else:
        backend = component.load()(**kwargs)
    app.state.tinker = TinkerService(store, backend, config.tinker_max_models_per_user, config.tinker_idle_seconds,
                                     config.tinker_max_requests_per_minute, config.tinker_session_seconds,
                                     config.tinker_report_to)
    app.include_router(router, prefix="/tinker/api/v1")
