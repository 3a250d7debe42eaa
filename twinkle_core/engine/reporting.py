"""A run's reports to experiment trackers (``report_to``; ``twinkle_core.tracking``): what a fit and an evaluation
send, from rank 0 only.

A fit sends, when it starts, the parameters — the hyperparameters given and each of the plan's choices as
``plan.<name>`` — and the tags (``twinkle.uri``, ``twinkle.data_uri``, ``twinkle.data_fingerprint``,
``twinkle.algorithm``, ``twinkle.task``, ``twinkle.plugin``, ``twinkle.core_version``, ``twinkle.parent``); every row
Lightning logs, under the names ``metrics.csv`` gets (``ReportingLogger``, beside the CSV logger); and at its end
``plan.json``, ``curves.png``, ``logs/metrics.csv`` and ``weights.json`` (where written), then its status. An
evaluation of the run sends its figures as ``eval_<name>`` at step ``N`` (its number) and its ``evaluation.json`` and
plots under ``evaluations/<N>/``; an export its verification card under ``exports/`` (the exported model too with
``TWINKLE_REPORT_EXPORTS=1``) — to the same tracker runs.
"""

from __future__ import annotations

import importlib.metadata
from typing import TYPE_CHECKING, Any, Mapping

from lightning.pytorch.loggers.logger import Logger
from lightning.pytorch.utilities import rank_zero_only

from twinkle_core.tracking import Reporter, TrackedRun, open_reporter, read_ids
from twinkle_core.uris import filesystem, is_local

if TYPE_CHECKING:
    from twinkle_core.store.catalogue import RunRecord
    from twinkle_core.store.runs import RunStore


class ReportingLogger(Logger):
    """Lightning's logger interface onto a ``Reporter``: each logged row is queued for the run's trackers (rank 0
    only, as Lightning's own loggers)."""

    def __init__(self, reporter: Reporter) -> None:
        """Queue rows to ``reporter``."""
        super().__init__()
        self.reporter = reporter

    @property
    def name(self) -> str:
        """The logger's name."""
        return "trackers"

    @property
    def version(self) -> str:
        """No versions of its own (each tracker keeps its run's id)."""
        return ""

    @rank_zero_only
    def log_metrics(self, metrics: Mapping[str, float], step: int | None = None) -> None:
        """Queue the row."""
        self.reporter.log_metrics(metrics, step or 0)

    @rank_zero_only
    def log_hyperparams(self, params: Any, *args: Any, **kwargs: Any) -> None:
        """Nothing: the run's parameters are sent when it starts (``open_run_reporter``)."""


def tracked_run(store: RunStore, record: RunRecord) -> TrackedRun:
    """The tracker's view of ``record``."""
    return TrackedRun(record.uri, f"{record.user}/{record.project}/{record.run}", record.user, record.project,
                      store.run_dir(record.id))


def _plugin(algorithm: str) -> str | None:
    """``distribution version`` of the plugin that registered ``algorithm``."""
    from twinkle_core.lookup import get_component

    try:
        plugin = get_component("algorithm", algorithm).plugin
        return f"{plugin} {importlib.metadata.version(plugin)}"
    except Exception:  # an algorithm given as a class, a plugin not installed as a distribution
        return None


def open_run_reporter(store: RunStore, record: RunRecord, names: list[str] | None, params: Mapping[str, Any],
                      tags: Mapping[str, Any], parent_uri: str | None = None) -> Reporter | None:
    """A reporter for a fit of ``record`` to the trackers ``names`` (``None`` for none) with its parameters and
    tags queued; a continued run (``parent_uri``) reports to its parent's tracker runs."""
    if not names:
        return None
    parent_ids: dict[str, str] = {}
    if parent_uri:
        parent = store.get(parent_uri)
        parent_ids = read_ids(store.run_dir(parent.id))
    reporter = open_reporter(list(names), tracked_run(store, record), parent_ids)
    if reporter is None:
        return None
    try:
        core = importlib.metadata.version("twinkle-core")
    except importlib.metadata.PackageNotFoundError:  # a source tree, not installed
        core = "0+unknown"
    reporter.set_tags({"twinkle.uri": record.uri, "twinkle.algorithm": record.algorithm, "twinkle.task": record.task,
                       "twinkle.plugin": _plugin(record.algorithm), "twinkle.core_version": core,
                       "twinkle.parent": parent_uri, **tags})
    reporter.log_params(params)
    return reporter


def send_run_files(store: RunStore, record: RunRecord, reporter: Reporter) -> None:
    """Queue the run's files: ``plan.json``, ``curves.png``, ``logs/metrics.csv``, ``weights.json`` (those that
    exist on this machine)."""
    for parts, folder in ((("plan.json",), ""), (("curves.png",), ""), (("logs", "metrics.csv"), "logs"),
                          (("weights.json",), "")):
        _send_file(reporter, store.path(record.id, *parts), folder)


def _send_file(reporter: Reporter, uri: str, folder: str) -> None:
    """Queue the file at ``uri`` where it exists on this machine (a store on object storage sends none)."""
    fs, path = filesystem(uri)
    if is_local(fs) and fs.exists(path):
        reporter.log_artifact(path, folder)


EXPORTS_VARIABLE = "TWINKLE_REPORT_EXPORTS"
"""Set to ``1`` to send exported models themselves to the run's trackers (their verification card is always sent:
the files can be gigabytes)."""


def _run_reporter(store: RunStore, run_uri: str) -> Reporter | None:
    """A reporter to the trackers the run's fit reported to (its ``report_to``), reopening the same tracker runs
    (``trackers.json``); ``None`` when it reports to none."""
    record = store.get(run_uri)
    names = record.hyperparams.get("report_to")
    if isinstance(names, str):
        names = [n.strip() for n in names.split(",") if n.strip()]
    names = [n for n in (names or []) if n != "none"]
    return open_reporter(names, tracked_run(store, record)) if names else None


def report_export(store: RunStore, run_uri: str, output: str) -> dict[str, Any] | None:
    """Send an export of the run ``run_uri`` to the trackers its fit reported to, under ``exports/``: the
    verification card ``<output>.json``, and the exported file (or a folder's files) where ``EXPORTS_VARIABLE`` is
    ``1``; what each sent (``Reporter.close``), or ``None`` when the run reports to none."""
    import os

    reporter = _run_reporter(store, run_uri)
    if reporter is None:
        return None
    _send_file(reporter, f"{output.rstrip('/')}.json", "exports")
    if os.environ.get(EXPORTS_VARIABLE) == "1":
        fs, path = filesystem(output)
        if is_local(fs) and fs.isdir(path):
            name = path.rstrip("/").rsplit("/", 1)[-1]
            for file in sorted(fs.find(path)):
                inner = file[len(path.rstrip("/")) + 1:].rsplit("/", 1)
                _send_file(reporter, file, "/".join(["exports", name, *inner[:-1]]))
        else:
            _send_file(reporter, output, "exports")
    return reporter.close("finished")


def report_evaluation(store: RunStore, run_uri: str, metrics: Mapping[str, float], number: int,
                      files: list[str]) -> dict[str, Any] | None:
    """Send an evaluation of the run ``run_uri`` — its ``metrics``, its ``number`` among the run's evaluations, its
    ``files`` (``evaluation.json``, plots) — to the trackers its fit reported to (its ``report_to``), into the same
    tracker runs; returns what each sent (``Reporter.close``), or ``None`` when the run reports to none."""
    reporter = _run_reporter(store, run_uri)
    if reporter is None:
        return None
    reporter.log_metrics({f"eval_{name}": value for name, value in metrics.items()}, number)
    for uri in files:
        _send_file(reporter, uri, f"evaluations/{number}")
    return reporter.close("finished")


__all__ = ["EXPORTS_VARIABLE", "ReportingLogger", "open_run_reporter", "report_evaluation", "report_export",
           "send_run_files", "tracked_run"]
