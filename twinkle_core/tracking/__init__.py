"""Experiment trackers: a run reports to the trackers a team already runs (``report_to``, HF Trainer's name).

``Trainer(..., report_to=["mlflow"])`` (``twinkle train --report-to mlflow``, ``report_to`` in a job file or a
service request) sends a run to each named tracker: its parameters (the hyperparameters and the plan's choices),
tags (the ``twinkle://`` URI, the data fingerprint, the algorithm, task, plugin and core versions), every metric row
``metrics.csv`` gets under the same names (validation per epoch included), the evaluations' figures, and files
(``plan.json``, the curves, the evaluations' tables and plots). Each tracker is configured by its own standard
settings (``MLFLOW_TRACKING_URI``, ``MLFLOW_EXPERIMENT_NAME``; ``WANDB_PROJECT``, ``WANDB_MODE``;
``TENSORBOARD_LOGGING_DIR``) — see each built-in's docstring.

* **A tracker is a plugin.** ``Tracker`` is the extension point's base class: a plugin registers its own with
  ``register_trackers`` (``register("neptune", "my_plugin.trackers:NeptuneTracker")``), as it registers an
  exporter; core's three (``mlflow``, ``tensorboard``, ``wandb``) are registered the same way and need their
  library (the extras ``twinkle-core[mlflow]``, ``[tensorboard]``, ``[wandb]``; ``[trackers]``: all three).
* **Never in the training's way.** Only the process of rank 0 reports. The training only queues what is to be sent
  (``Reporter``); a thread per tracker sends it. A tracker that fails (its server down, a bad URI) is warned about
  once; what it could not send is kept and sent again when it answers (first after ``RETRY_SECONDS``, then at
  doubling intervals), and whatever is still unsent when the run ends (after ``CLOSE_SECONDS`` at most) is written to
  ``trackers/<name>.unsent.jsonl`` in the run's folder and counted in the run's record (``measured["trackers"]``).
* **One tracker run per training.** Each tracker's id of the run (MLflow's run id, W&B's id, TensorBoard's folder)
  is written to ``trackers.json`` in the run's folder as soon as the tracker has it: a resumed run, a run continued
  from a checkpoint (``from_checkpoint``) and the run's evaluations report to the same tracker run.
"""

from __future__ import annotations

import json
import logging
import os
import threading
import time
from abc import ABC, abstractmethod
from collections import deque
from dataclasses import dataclass, field
from typing import Any, ClassVar, Mapping

from twinkle_core.errors import HyperparameterError, UnknownComponentError

logger = logging.getLogger(__name__)

RETRY_SECONDS = 2.0
"""How long a tracker that failed is left before the next try (doubling after each failure, up to 60 s)."""

CLOSE_SECONDS = 10.0
"""How long the end of a run waits for its trackers to send what is queued (all trackers together; a tracker that
fails is retried until then)."""

IDS_FILE = "trackers.json"
"""The file in a run's folder that holds each tracker's id of the run."""


class TrackerError(HyperparameterError):
    """``report_to`` names a tracker that cannot be used: no plugin registered the name, or its library is not
    installed (the message names the extra to install)."""


@dataclass(frozen=True)
class TrackedRun:
    """The run a tracker reports.

    Attributes:
        uri: ``twinkle://user/project/runN``.
        name: ``user/project/runN`` (the tracker run's name).
        user, project: whose, and which project.
        run_dir: the run's folder (a tracker may keep files there: TensorBoard's events by default).
        resume_id: this tracker's id of the same training (a resumed or continued run's, an evaluation's run):
            report to it rather than to a new tracker run; ``None``: a new one.
    """

    uri: str
    name: str
    user: str
    project: str
    run_dir: str
    resume_id: str | None = None


class Tracker(ABC):
    """An experiment tracker (``report_to=[name]``; register one with ``register_trackers``).

    One instance reports one run, from one thread (the ``Reporter``'s): ``start`` first, then any of the
    ``log_*`` calls, then ``finish``. A call that raises is retried later with the same arguments (see the module
    docstring), so each must be safe to repeat after a failure. Values are plain: parameters and tags are strings,
    metrics floats.
    """

    name: ClassVar[str] = ""
    """The name ``report_to`` takes."""

    extra: ClassVar[str] = ""
    """The pip extra that installs the tracker's library (named when it is missing)."""

    library: ClassVar[str] = ""
    """The module the tracker needs (``"mlflow"``): ``report_to`` is refused before the run when it is missing."""

    @abstractmethod
    def start(self, run: TrackedRun) -> str:
        """Open (or, with ``run.resume_id``, reopen) the tracker's run; return its id there."""

    @abstractmethod
    def log_params(self, params: Mapping[str, str]) -> None:
        """Record the run's parameters."""

    @abstractmethod
    def set_tags(self, tags: Mapping[str, str]) -> None:
        """Record the run's tags."""

    @abstractmethod
    def log_metrics(self, metrics: Mapping[str, float], step: int) -> None:
        """Record one row of metrics at optimizer step ``step``."""

    @abstractmethod
    def log_artifact(self, path: str, folder: str = "") -> None:
        """Keep the file at ``path`` with the run, under ``folder`` (``""``: at the top)."""

    @abstractmethod
    def finish(self, status: str) -> None:
        """The run ended: ``"finished"``, ``"failed"`` or ``"stopped"`` (an evaluation ends its report with
        ``"finished"``)."""


def tracker_class(name: str) -> type[Tracker]:
    """The registered tracker ``name``, its library imported — when the training is configured, as HF Trainer's
    callbacks do: a library that is missing or broken is refused before any run exists, and its import (a second
    for MLflow) is not paid during the fit.

    Raises:
        UnknownComponentError: no tracker of that name (the registered ones listed).
        TrackerError: its library is not installed or does not import (the extra named).
    """
    import importlib

    from twinkle_core.lookup import get_component

    component = get_component("tracker", name)
    cls = component.load()
    library = getattr(cls, "library", "")
    if library:
        try:
            importlib.import_module(library)
        except ImportError as err:
            raise TrackerError(f"report_to='{name}' needs the {library} package, which does not import ({err}): "
                               f"pip install 'twinkle-core[{cls.extra or name}]'") from None
    return cls


def check_report_to(names: list[str] | None) -> list[str]:
    """``names`` checked (each registered and its library installed), without repeats; ``[]`` for none.

    Raises:
        TrackerError: a name no plugin registered (the registered ones listed), or a tracker's library missing.
    """
    checked: list[str] = []
    for name in names or []:
        if name in ("none", ""):
            continue
        try:
            tracker_class(name)
        except UnknownComponentError as err:
            raise TrackerError(f"report_to='{name}': {err}") from None
        if name not in checked:
            checked.append(name)
    return checked


def read_ids(run_dir: str) -> dict[str, str]:
    """The tracker ids ``trackers.json`` in ``run_dir`` holds (none when there is no file)."""
    from twinkle_core.uris import filesystem, join

    fs, path = filesystem(join(run_dir, IDS_FILE))
    try:
        with fs.open(path, "r") as handle:
            data = json.load(handle)
    except (FileNotFoundError, OSError, ValueError):
        return {}
    return {str(k): str(v) for k, v in data.items()} if isinstance(data, dict) else {}


@dataclass
class _Channel:
    """One tracker's queue, thread and counts."""

    name: str
    tracker: Tracker
    calls: deque[tuple[str, tuple[Any, ...]]] = field(default_factory=deque)
    sent: int = 0
    error: str | None = None
    warned: bool = False
    started: bool = False
    run_id: str | None = None
    closing: bool = False
    thread: threading.Thread | None = None


class Reporter:
    """Sends one run to its trackers without holding up the training (see the module docstring): every call queues
    and returns at once; a thread per tracker sends, in order, retrying what failed."""

    def __init__(self, trackers: Mapping[str, Tracker], run: TrackedRun, ids_path: str | None = None,
                 unsent_dir: str | None = None, retry_seconds: float = RETRY_SECONDS,
                 resume_ids: Mapping[str, str] | None = None) -> None:
        """Report ``run`` to ``trackers`` (by name); each tracker's id is written to ``ids_path`` (JSON) when it has
        one, and what is unsent at ``close`` to ``unsent_dir/<name>.unsent.jsonl``. A tracker reopens the tracker
        run of the id the run's folder holds (``trackers.json``), else of ``resume_ids[name]`` (a continued run:
        its parent's)."""
        self.run, self.ids_path, self.unsent_dir, self.retry_seconds = run, ids_path, unsent_dir, retry_seconds
        self._lock = threading.Condition()
        self._deadline = float("inf")
        self._ids = {**(resume_ids or {}), **(read_ids(run.run_dir) if ids_path is not None else {})}
        self.channels = [_Channel(name, tracker) for name, tracker in trackers.items()]
        for channel in self.channels:
            channel.thread = threading.Thread(target=self._send, args=(channel,), daemon=True,
                                              name=f"twinkle-tracker-{channel.name}")
            channel.thread.start()

    def _queue(self, method: str, *args: Any) -> None:
        with self._lock:
            for channel in self.channels:
                if not channel.closing:
                    channel.calls.append((method, args))
            self._lock.notify_all()

    def log_params(self, params: Mapping[str, Any]) -> None:
        """Queue the run's parameters (values as text)."""
        self._queue("log_params", {str(k): _text(v) for k, v in params.items()})

    def set_tags(self, tags: Mapping[str, Any]) -> None:
        """Queue the run's tags."""
        self._queue("set_tags", {str(k): _text(v) for k, v in tags.items() if v is not None})

    def log_metrics(self, metrics: Mapping[str, Any], step: int) -> None:
        """Queue a row of metrics (the finite numbers of it)."""
        row = {str(k): float(v) for k, v in metrics.items() if _finite_number(v)}
        if row:
            self._queue("log_metrics", row, int(step))

    def log_artifact(self, path: str, folder: str = "") -> None:
        """Queue a file to keep with the run."""
        self._queue("log_artifact", str(path), folder)

    def _send(self, channel: _Channel) -> None:
        """The tracker's thread: start it, then send each call in order; on a failure warn once, wait, retry."""
        delay = self.retry_seconds
        while True:
            with self._lock:
                while not channel.calls and not channel.closing:
                    self._lock.wait()
                if not channel.calls and channel.closing:
                    return
                method, args = channel.calls[0] if channel.started else ("start", ())
            try:
                if method == "start":
                    resume = self._ids.get(channel.name) or self.run.resume_id
                    channel.run_id = str(channel.tracker.start(TrackedRun(
                        self.run.uri, self.run.name, self.run.user, self.run.project, self.run.run_dir, resume)))
                    channel.started = True
                    self._remember(channel)
                else:
                    getattr(channel.tracker, method)(*args)
                    with self._lock:
                        if channel.calls:  # (close() may have given up on it meanwhile, listing it as unsent)
                            channel.calls.popleft()
                            channel.sent += 1
                channel.error, delay = None, self.retry_seconds
            except Exception as err:  # a tracker's own failure: never the training's
                channel.error = f"{type(err).__name__}: {str(err).splitlines()[0][:300] if str(err) else ''}"
                if not channel.warned:
                    channel.warned = True
                    logger.warning("report_to '%s' failed (%s); the training goes on, and what it could not send "
                                   "is kept and sent again when it answers", channel.name, channel.error)
                with self._lock:
                    if channel.closing:  # close() waits for it until its deadline: then what is queued is unsent
                        left = self._deadline - time.monotonic()
                        if left <= 0:
                            return
                        self._lock.wait(timeout=min(delay, left))
                    else:
                        self._lock.wait(timeout=delay)
                delay = min(delay * 2, 60.0)

    def _remember(self, channel: _Channel) -> None:
        """Write the tracker's id of the run beside the others (``trackers.json``)."""
        if self.ids_path is None or channel.run_id is None:
            return
        from twinkle_core.store.atomic import atomic_write_text

        with self._lock:
            self._ids[channel.name] = channel.run_id
            atomic_write_text(self.ids_path, json.dumps(self._ids, indent=2) + "\n")

    def close(self, status: str | None, timeout: float | None = None) -> dict[str, dict[str, Any]]:
        """Queue ``finish(status)`` (``None``: no finish — the run goes on elsewhere), wait up to ``timeout`` seconds
        (default ``CLOSE_SECONDS``) for every tracker to send what it has, and return what each did: its run id,
        calls sent and unsent, its last error and the file listing what was not sent."""
        if status is not None:
            self._queue("finish", status)
        deadline = time.monotonic() + (CLOSE_SECONDS if timeout is None else timeout)
        with self._lock:
            self._deadline = deadline
            for channel in self.channels:
                channel.closing = True
            self._lock.notify_all()
        for channel in self.channels:
            assert channel.thread is not None
            channel.thread.join(max(0.0, deadline - time.monotonic()))
        summary: dict[str, dict[str, Any]] = {}
        with self._lock:
            for channel in self.channels:
                unsent = list(channel.calls)
                channel.calls.clear()
                error = channel.error
                if error is None and unsent:  # its thread still waits on the tracker: it did not answer in time
                    error = f"no answer within {CLOSE_SECONDS if timeout is None else timeout:g} s of the run's end"
                entry: dict[str, Any] = {"id": channel.run_id, "sent": channel.sent, "unsent": len(unsent),
                                         "error": error}
                if unsent and self.unsent_dir is not None:
                    entry["unsent_file"] = self._write_unsent(channel.name, unsent)
                summary[channel.name] = entry
        return summary

    def _write_unsent(self, name: str, calls: list[tuple[str, tuple[Any, ...]]]) -> str:
        from twinkle_core.store.atomic import atomic_write_text
        from twinkle_core.uris import join

        assert self.unsent_dir is not None
        path = join(self.unsent_dir, f"{name}.unsent.jsonl")
        atomic_write_text(path, "".join(json.dumps({"call": method, "args": list(args)}, default=str) + "\n"
                                        for method, args in calls))
        return path


def _text(value: Any) -> str:
    """A parameter or tag value as text (JSON for lists and mappings)."""
    if isinstance(value, str):
        return value
    if isinstance(value, (list, tuple, dict)):
        return json.dumps(value, default=str)
    return str(value)


def _finite_number(value: Any) -> bool:
    try:
        number = float(value)
    except (TypeError, ValueError):
        return False
    return number == number and abs(number) != float("inf")


def open_reporter(names: list[str], run: TrackedRun, resume_ids: Mapping[str, str] | None = None) -> Reporter | None:
    """A ``Reporter`` for the trackers ``names`` (``None`` for none), each resuming the tracker run
    ``resume_ids[name]`` where the run has no id of its own yet (a continued run: its parent's)."""
    from twinkle_core.uris import join

    if not names:
        return None
    trackers = {name: tracker_class(name)() for name in names}
    return Reporter(trackers, run, join(run.run_dir, IDS_FILE), join(run.run_dir, "trackers"),
                    resume_ids=resume_ids)


def default_folder(run: TrackedRun, variable: str, inside: str) -> str:
    """A tracker's folder for ``run``: ``$variable/<user>/<project>/<run>`` where the variable is set, else
    ``inside`` in the run's folder."""
    root = os.environ.get(variable)
    return os.path.join(root, run.name) if root else os.path.join(run.run_dir, inside)


__all__ = ["CLOSE_SECONDS", "IDS_FILE", "RETRY_SECONDS", "Reporter", "TrackedRun", "Tracker", "TrackerError",
           "check_report_to", "default_folder", "open_reporter", "read_ids", "tracker_class"]
