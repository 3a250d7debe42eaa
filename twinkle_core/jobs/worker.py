"""The old name of ``twinkle_core.jobs.child`` (a job's training process; "worker" now means a service worker
only), kept for this release: importing it warns, and ``python -m twinkle_core.jobs.worker JOB_DIR`` — in
torchrun command lines written before — still runs the job."""

from __future__ import annotations

import sys
import warnings

from twinkle_core.jobs.child import ray_train_loop, run, weights_digest

warnings.warn("twinkle_core.jobs.worker is renamed twinkle_core.jobs.child", DeprecationWarning, stacklevel=2)

__all__ = ["ray_train_loop", "run", "weights_digest"]

if __name__ == "__main__":
    if len(sys.argv) != 2:
        sys.exit("usage: python -m twinkle_core.jobs.child JOB_DIR")
    sys.exit(run(sys.argv[1]))
