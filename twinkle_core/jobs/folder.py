"""``JobFolder``: the files a job's processes leave for whoever runs them, named once; ``Outcome``: how
one attempt ended, read from them (the exit statuses are named in ``twinkle_core.processes``).

A job folder holds ``job.json`` (the ``Job``), ``run.json`` (the run its first attempt
created: later attempts resume it), and what the attempt ended with — ``result.json`` (its
``FitResult``), ``error.json`` (the training raised) or ``stopped.json`` (SIGTERM stopped it after a
checkpoint) — beside ``rank-N.json`` (what each rank ended with) and the launcher's own notes. Rank 0 writes them;
every write is atomic.
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from typing import Any, Literal

from twinkle_core.jobs.spec import Job, read_json, write_json
from twinkle_core.processes import EXIT_OK, describe_exit


@dataclass(frozen=True)
class JobFolder:
    """One job's folder (``path``) and the files in it."""

    path: str

    JOB = "job.json"
    RUN = "run.json"
    RESULT = "result.json"
    ERROR = "error.json"
    STOPPED = "stopped.json"
    SUPERVISOR = "supervisor.json"
    LOG = "log.txt"
    """The training process's output, when a service worker runs it."""
    OUTCOMES = (RESULT, ERROR, STOPPED)
    """The files one attempt ends with; a new attempt starts without them."""

    def job(self) -> Job:
        """The job (``job.json``)."""
        return Job.load(self.path)

    def save_job(self, job: Job) -> None:
        """Write ``job.json``."""
        job.save(self.path)

    def run(self) -> str | None:
        """The ``twinkle://`` URI of the job's run, once its first attempt created it."""
        return (read_json(self.path, self.RUN) or {}).get("run")

    def record_run(self, uri: str) -> None:
        """Name the job's run (rank 0, as soon as the run exists)."""
        write_json(self.path, self.RUN, {"run": uri})

    def read(self, name: str) -> dict[str, Any] | None:
        """``name`` parsed, or ``None`` when it is not there (yet)."""
        return read_json(self.path, name)

    def write(self, name: str, data: dict[str, Any]) -> None:
        """Write ``name`` atomically."""
        write_json(self.path, name, data)

    def write_result(self, result: dict[str, Any]) -> None:
        """The attempt trained to its end: its ``FitResult`` as a dict."""
        self.write(self.RESULT, result)

    def write_error(self, kind: str, message: str, traceback: str) -> None:
        """The training raised ``kind: message``."""
        self.write(self.ERROR, {"type": kind, "message": message, "traceback": traceback[-4000:]})

    def write_stopped(self, step: int, checkpoint: str, message: str) -> None:
        """SIGTERM stopped the training after it saved ``checkpoint`` at ``step``."""
        self.write(self.STOPPED, {"step": step, "checkpoint": checkpoint, "message": message})

    def write_rank(self, rank: int, data: dict[str, Any]) -> None:
        """What rank ``rank`` ended with (``rank-N.json``)."""
        self.write(f"rank-{rank}.json", {"rank": rank, **data})

    def clear_outcome(self) -> None:
        """Remove what an earlier attempt ended with, before the next one starts."""
        for name in self.OUTCOMES:
            try:
                os.remove(os.path.join(self.path, name))
            except FileNotFoundError:
                pass


OutcomeKind = Literal["finished", "stopped", "raised", "died"]
"""How an attempt ended (see ``Outcome``)."""


@dataclass(frozen=True)
class Outcome:
    """How one attempt of a job ended.

    Attributes:
        kind: ``finished`` (trained to its end: ``result``), ``stopped`` (SIGTERM after a checkpoint: ``stopped``),
            ``raised`` (the training raised: ``error``) or ``died`` (killed, or gone without a word).
        returncode: the worker's exit status (negative: the signal that killed it).
        run: the job's run, when one was created.
        result, error, stopped: what the attempt wrote (``None``: nothing).
    """

    kind: OutcomeKind
    returncode: int
    run: str | None
    result: dict[str, Any] | None
    error: dict[str, Any] | None
    stopped: dict[str, Any] | None

    @classmethod
    def read(cls, folder: JobFolder, returncode: int) -> Outcome:
        """The outcome of the attempt that just ended with ``returncode`` in ``folder``."""
        result, error, stopped = (folder.read(name) for name in JobFolder.OUTCOMES)
        kind: OutcomeKind = (
            "finished" if returncode == EXIT_OK and result is not None else "raised" if error is not None
            else "stopped" if stopped is not None else "died")
        return cls(kind, returncode, folder.run(), result, error, stopped)

    @property
    def cause(self) -> str:
        """The worker's exit in words (``"killed by signal 9 (SIGKILL)"``), with what it raised when it wrote an
        error (``"exited with status 3 (raised ValueError: ...)"``)."""
        exit_ = describe_exit(self.returncode)
        return f"{exit_} (raised {self.error_message})" if self.error else exit_

    @property
    def error_message(self) -> str:
        """``Type: message`` of what the training raised (empty when it did not)."""
        return f"{self.error['type']}: {self.error['message']}" if self.error else ""
