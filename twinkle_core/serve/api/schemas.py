"""What the API answers, route by route: the response models its OpenAPI schema describes.

Records that carry open-ended content (a run's hyperparameters and plan, a published model's card) declare the
fields every client may rely on and allow the rest (``extra="allow"``): the schema says what is always there,
and nothing a route returned before is dropped.
"""

from __future__ import annotations

from typing import Any

from pydantic import BaseModel, ConfigDict, Field

from twinkle_core.store.catalogue import RunStatus


class Health(BaseModel):
    """``GET /health``."""

    status: str = Field(description="'ok' while the server answers")


class ServerInfo(BaseModel):
    """``GET /server``: the server's limits, data roots, live workers and jobs per state."""

    auth: bool
    data_roots: list[str]
    max_running_per_user: int | None
    max_queued_per_user: int | None
    max_wall_clock_seconds: float | None
    max_body_bytes: int
    max_upload_bytes: int
    ray: bool = Field(description="whether jobs with backend='ray' go to the server's Ray cluster")
    workers: int = Field(description="worker processes alive now")
    jobs: dict[str, int] = Field(description="the caller's jobs per state (an admin's: every user's)")
    api_processes: int = Field(description="processes answering the API on the server's socket")
    answered_by: int = Field(description="the process id of the API process that answered this request")


class Me(BaseModel):
    """``GET /me``: who the token belongs to."""

    name: str
    admin: bool


class AlgorithmSummary(BaseModel):
    """One registered algorithm (``GET /algorithms``)."""

    name: str
    tasks: list[str]
    plugin: str | None
    description: str | None


class HyperparameterInfo(BaseModel):
    """One hyperparameter an algorithm, its optimizer, its data processors or the trainer takes."""

    name: str
    type: str = Field(description="its type as text ('float', 'int >= 1', \"'ddp' | 'fsdp2' | None\")")
    default: Any = None
    required: bool
    owner: str = Field(description="algorithm, optimizer, data or trainer")
    help: str
    choices: list[Any] | None = Field(default=None, description="the allowed values, when they are a closed set")


class AlgorithmDetail(BaseModel):
    """``GET /algorithms/{name}``: the algorithm's tasks and every hyperparameter it takes."""

    name: str
    tasks: list[str]
    hyperparameters: list[HyperparameterInfo]


class JobLogs(BaseModel):
    """``GET /jobs/{id}/logs``: up to 64 KiB of a job's output."""

    text: str
    offset: int = Field(description="where this text starts (bytes)")
    next_offset: int = Field(description="where the next read continues")


class MetricRows(BaseModel):
    """Every metric row a run logged (``step``, ``epoch``, losses, validation metrics)."""

    run: str | None = Field(description="the run's URI (none while the job has not created it)")
    rows: list[dict[str, Any]]


class RunSummary(BaseModel):
    """One run in ``GET /runs``."""

    uri: str
    id: str
    user: str
    project: str
    run: str
    algorithm: str
    task: str
    status: RunStatus
    created: float
    updated: float
    finished: float | None
    metrics: dict[str, Any]
    data_uri: str | None
    data_fingerprint: str | None
    parent: str | None
    mode: str | None
    error: str | None


class RunDetail(RunSummary):
    """``GET /runs/{owner}/{project}/{run}``: the run's whole record."""

    model_config = ConfigDict(extra="allow")

    seq: int
    hyperparams: dict[str, Any]
    plan: dict[str, Any] = Field(description="the resource plan, with its decisions and estimates")
    hardware: str | None
    measured: dict[str, Any]
    best_checkpoint: str | None
    exports: list[Any]
    alerts: list[Any] = Field(description="alerts raised while it trained (restarts among them)")


class FileEntry(BaseModel):
    """One file of a run or a published model."""

    path: str = Field(description="relative to the run's (or model's) folder")
    bytes: int


class ModelSummary(BaseModel):
    """One published model (``twinkle://models/NAME``); its card's other fields follow."""

    model_config = ConfigDict(extra="allow")

    name: str
    run: str | None = Field(default=None, description="the run it was published from")


class ModelDetail(ModelSummary):
    """``GET /models/{name}``: the model's card and files."""

    files: list[FileEntry]


class Upload(BaseModel):
    """An upload: ``data`` is the server-side path to submit jobs on."""

    name: str
    data: str
    bytes: int


class UploadEntry(Upload):
    """One of your uploads (``GET /uploads``)."""

    kind: str = Field(description="'file' or 'folder' (an unpacked archive)")


class AuditEntry(BaseModel):
    """One audit-log entry: who did what, when and from where."""

    id: int
    time: float
    user: str
    action: str
    job: str | None
    client: str | None
    detail: dict[str, Any]
