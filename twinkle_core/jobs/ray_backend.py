"""Ray Train as the scale-out engine (``Trainer(backend="ray", workers=N)``; the ``twinkle-core[ray]`` extra).

:func:`run_on_ray` hands a :class:`~twinkle_core.jobs.Job` to Ray Train's ``TorchTrainer``: ``N`` workers, each
running the job's worker (:mod:`twinkle_core.jobs.worker`) inside Ray's torch process group, with Lightning on
Ray's DDP strategy and cluster environment (``RayDDPStrategy``, ``RayLightningEnvironment``). The run store
stays Twinkle's: rank 0 creates the one run and writes its checkpoints there. When a worker dies, Ray's
``FailureConfig(max_failures=job.max_restarts)`` restarts the group; the restarted workers find the job's
run and resume it exactly from Twinkle's last checkpoint (the same run id, a ``restart`` alert).

Ray's own files (its run folder) go into the job folder. Connects to ``RAY_ADDRESS`` when set, else the Ray
instance this process started (``ray.init``), else a local one without a dashboard.
"""

from __future__ import annotations

import os
from typing import Any

from twinkle_core.engine.result import FitResult
from twinkle_core.errors import TwinkleError
from twinkle_core.jobs.folder import JobFolder
from twinkle_core.jobs.spec import JOB_DIR_ENV, Job, current_job_dir, job_dir
from twinkle_core.processes import LAUNCHER_ENV



def _train_loop(config: dict[str, Any]) -> None:
    """One Ray Train worker: set the ranks from Ray's context, then run the job's worker."""
    import ray.train

    context = ray.train.get_context()
    env = {LAUNCHER_ENV: "ray", "WORLD_SIZE": str(context.get_world_size()), "RANK": str(context.get_world_rank()),
           "LOCAL_RANK": str(context.get_local_rank()), "LOCAL_WORLD_SIZE": str(context.get_local_world_size()),
           "NODE_RANK": str(context.get_node_rank()), JOB_DIR_ENV: config["folder"]}
    if config.get("home"):
        env["TWINKLE_HOME"] = config["home"]
    os.environ.update(env)
    JobFolder(config["folder"]).write(f"ray-worker-{context.get_world_rank()}.json",
               {"pid": os.getpid(), "rank": context.get_world_rank()})
    from twinkle_core.jobs.worker import run

    run(config["folder"])


def run_on_ray(job: Job, workers: int, folder: str | None = None, use_gpu: bool = False) -> FitResult:
    """Train ``job`` on ``workers`` Ray Train workers; returns the run's result.

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
        _train_loop,
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
