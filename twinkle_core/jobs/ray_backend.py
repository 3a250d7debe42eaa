"""Ray Train as the scale-out engine (``Trainer(backend="ray", ray_workers=N)``; the ``twinkle-core[ray]`` extra).

``run_on_ray`` hands a ``Job`` to Ray Train's ``TorchTrainer``: ``N`` workers, each
running the job's worker (``twinkle_core.jobs.child``) inside Ray's torch process group, with Lightning on
Ray's DDP strategy and cluster environment (``RayDDPStrategy``, ``RayLightningEnvironment``). The run store
stays Twinkle's: rank 0 creates the one run and writes its checkpoints there. When a worker dies, Ray's
``FailureConfig(max_failures=job.max_restarts)`` restarts the group; the restarted workers find the job's
run and resume it exactly from Twinkle's last checkpoint (the same run id, a ``restart`` alert).

Ray's own files (its run folder) go into the job folder. Connects to ``RAY_ADDRESS`` when set, else the Ray
instance this process started (``ray.init``), else a local one without a dashboard.
"""

from __future__ import annotations

import os
from typing import Any, Callable

from twinkle_core.engine.result import FitResult
from twinkle_core.engine.settings import TrainerSettings
from twinkle_core.errors import TwinkleError
from twinkle_core.jobs.folder import JobFolder
from twinkle_core.jobs.spec import Job, current_job_dir, job_dir
from twinkle_core.processes import inside_ray_worker


def goes_to_ray(settings: TrainerSettings) -> bool:
    """Whether a fit with ``settings`` goes to Ray Train (``backend="ray"``, or ``RAY_ADDRESS`` set with no backend
    named) — never from inside Ray Train's own workers, which train where they are."""
    if inside_ray_worker():
        return False
    return settings.backend == "ray" or (settings.backend is None and bool(os.environ.get("RAY_ADDRESS")))


def check_not_continued_on_ray(continuing: bool) -> None:
    """Ray Train trains a job as a new run: a training that continues a checkpoint is refused (before anything
    starts) — in this process, a job's child and a service's job alike.

    Raises:
        TwinkleError: ``continuing``.
    """
    if continuing:
        raise TwinkleError("backend='ray' trains a job as a new run; continue or resume this checkpoint with "
                           "backend='local' (a Ray job that loses a worker resumes by itself)")


def run_on_ray(job: Job, workers: int, train_loop: Callable[[dict[str, Any]], None], folder: str | None = None,
               use_gpu: bool = False) -> FitResult:
    """Train ``job`` on ``workers`` Ray Train workers, each running ``train_loop`` (the job worker's
    ``ray_train_loop``) on ``{"folder": ..., "home": ...}``; returns the run's result.

    Raises:
        TwinkleError: Ray is not installed (the extra to install), or the job failed (its error).
    """
    try:
        import ray
        from ray.train import FailureConfig, RunConfig, ScalingConfig
        from ray.train.torch import TorchConfig, TorchTrainer
    except ImportError:
        raise TwinkleError("backend='ray' needs Ray Train: pip install 'twinkle-core[ray]'") from None
    folder = folder or current_job_dir() or job_dir(job.home)  # a service job: its own folder, so its run is found
    job.save(folder)
    if not ray.is_initialized():
        ray.init(address=os.environ.get("RAY_ADDRESS") or None, include_dashboard=False, log_to_driver=False)
    trainer = TorchTrainer(
        train_loop,
        train_loop_config={"folder": folder, "home": job.home or os.environ.get("TWINKLE_HOME")},
        torch_config=TorchConfig(backend="nccl" if use_gpu else "gloo"),
        scaling_config=ScalingConfig(num_workers=workers, use_gpu=use_gpu, resources_per_worker={"CPU": 1}),
        run_config=RunConfig(name=os.path.basename(folder), storage_path=os.path.join(os.path.abspath(folder), "ray"),
                             failure_config=FailureConfig(max_failures=job.max_restarts)),
    )
    try:
        trainer.fit()
    except Exception as err:  # noqa: BLE001 — Ray wraps the worker's error; ours is in the job folder
        error = JobFolder(folder).read(JobFolder.ERROR)
        raise TwinkleError(f"{error['type']}: {error['message']}" if error else f"the Ray job failed: {err}") from None
    result = JobFolder(folder).read(JobFolder.RESULT)
    if result is None:
        raise TwinkleError(f"the Ray job ended without a result; see {folder}")
    return FitResult.from_dict(result)
