"""The training process's memory allocator: glibc's ``malloc`` thresholds, raised where the plan says so.

glibc serves a large allocation (at first 128 KiB or more) with its own ``mmap`` and gives it back when it is
freed, and trims the top of its heap once enough there is free; it raises both thresholds as the process frees
larger blocks, but not far enough for a training's mix of steps, validation, data and logging. A CPU training step
allocates and frees the same activations and gradients every step, so steps keep mapping fresh pages that the
kernel zeroes and faults in: ResNet-18 on the digits at batch 32, four epochs, 3,400-5,700 page faults a step and
2.6-3.0 s of the process's system time in a 14-16 s fit. ``"retain"`` keeps freed memory in the process instead —
blocks below ``RETAIN_MMAP_THRESHOLD`` come from the heap, and up to ``RETAIN_TRIM_THRESHOLD`` of freed heap stays
mapped — as jemalloc or tcmalloc given with ``LD_PRELOAD`` would (PyTorch's CPU performance guide), set from inside
the process with ``mallopt``: the same fit then takes about one page fault a step and 0.8-0.95 s of system time.
The process's memory stays at its peak between steps instead of falling back (its peak itself does not move: 1.38
GB either way there). Elsewhere (musl, macOS, Windows) nothing is set.

``AllocatorDecider`` (``twinkle_core.planning.deciders``) chooses from the speed probe
(``twinkle_core.engine.probes``); ``engine.run`` applies the plan's choice in each training process. Once set,
glibc's thresholds stay fixed (it adapts them only until ``mallopt`` sets one): a probe that measured ``"retain"``
leaves the process with glibc's initial thresholds for the plan to raise again.
"""

from __future__ import annotations

import ctypes
import functools
import platform
from typing import Literal

Allocator = Literal["default", "retain"]
"""``"default"``: glibc's thresholds as they are; ``"retain"``: freed memory kept in the process (see the module)."""

M_TRIM_THRESHOLD, M_MMAP_THRESHOLD = -1, -3
"""``mallopt``'s parameters (glibc's ``malloc.h``)."""

GLIBC_DEFAULT_THRESHOLD = 128 * 1024
"""glibc's initial mmap and trim thresholds (bytes)."""

RETAIN_MMAP_THRESHOLD = 32 * 1024 * 1024
"""Allocations below this come from the heap under ``"retain"`` (glibc's upper bound for the threshold on 64-bit
systems: ``4 × 1024 × 1024 × sizeof(long)``)."""

RETAIN_TRIM_THRESHOLD = 1024 * 1024 * 1024
"""Under ``"retain"``, freed heap memory up to this stays mapped (beyond it, the top is given back)."""


@functools.lru_cache(maxsize=1)
def _glibc() -> ctypes.CDLL | None:
    if platform.system() != "Linux" or platform.libc_ver()[0] != "glibc":
        return None
    try:
        libc = ctypes.CDLL(None)
        libc.mallopt.argtypes, libc.mallopt.restype = [ctypes.c_int, ctypes.c_int], ctypes.c_int
        libc.malloc_trim.argtypes, libc.malloc_trim.restype = [ctypes.c_size_t], ctypes.c_int
    except (OSError, AttributeError):
        return None
    return libc


def tunable() -> bool:
    """Whether this process's allocator is glibc's, whose thresholds ``set_allocator`` can set."""
    return _glibc() is not None


def set_allocator(mode: Allocator) -> bool:
    """Set the process's ``malloc`` thresholds: ``"retain"`` (see the module) or ``"default"`` (glibc's initial
    128 KiB ones, fixed; on ``"default"`` freed memory is given back at once with ``malloc_trim``). Returns whether
    they were set (``False``: not glibc)."""
    libc = _glibc()
    if libc is None:
        return False
    if mode == "retain":
        ok = libc.mallopt(M_MMAP_THRESHOLD, RETAIN_MMAP_THRESHOLD) and libc.mallopt(M_TRIM_THRESHOLD,
                                                                                     RETAIN_TRIM_THRESHOLD)
    else:
        ok = libc.mallopt(M_MMAP_THRESHOLD, GLIBC_DEFAULT_THRESHOLD) and libc.mallopt(M_TRIM_THRESHOLD,
                                                                                       GLIBC_DEFAULT_THRESHOLD)
        libc.malloc_trim(0)
    return bool(ok)


def page_faults() -> int:
    """The process's minor page faults so far (``getrusage``; 0 where there is no ``resource`` module)."""
    try:
        import resource
    except ImportError:  # Windows
        return 0
    return int(resource.getrusage(resource.RUSAGE_SELF).ru_minflt)


__all__ = ["Allocator", "RETAIN_MMAP_THRESHOLD", "RETAIN_TRIM_THRESHOLD", "page_faults", "set_allocator", "tunable"]
