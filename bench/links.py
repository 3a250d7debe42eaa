"""What a collective costs between CPU processes on this machine (gloo over loopback, one thread each): the
figures behind ``twinkle_core.planning.timing.GLOO_LOOPBACK``.

For 2 and 4 processes, the mean time of an all-reduce, an all-gather and a reduce-scatter of 1 kB, 512 kB, 4 MB and
64 MB per process, and the bytes per second that makes.

    python bench/links.py            # about a minute; writes bench/results/links.json
"""

from __future__ import annotations

import json
import os
import socket
import sys
import time
from pathlib import Path

os.environ.setdefault("OMP_NUM_THREADS", "1")

SIZES = (256, 131_072, 1 << 20, 16 << 20)
"""fp32 elements per process: 1 kB, 512 kB, 4 MB, 64 MB."""


def _measure(rank: int, world: int, port: int, out: str) -> None:
    import torch
    import torch.distributed as dist

    torch.set_num_threads(1)
    dist.init_process_group("gloo", init_method=f"tcp://127.0.0.1:{port}", rank=rank, world_size=world)
    rows = []
    for size in SIZES:
        tensor = torch.ones(size)
        gathered, scattered = torch.empty(size * world), torch.empty(size // world)
        for op in ("all_reduce", "all_gather", "reduce_scatter"):
            repeats = 20 if size < (1 << 20) else 3
            dist.barrier()
            started = time.perf_counter()
            for _ in range(repeats):
                if op == "all_reduce":
                    dist.all_reduce(tensor)
                elif op == "all_gather":
                    dist.all_gather_into_tensor(gathered, tensor)
                else:
                    dist.reduce_scatter_tensor(scattered, tensor)
            seconds = (time.perf_counter() - started) / repeats
            rows.append({"processes": world, "op": op, "bytes": size * 4, "seconds": round(seconds, 6),
                         "bytes_per_second": round(size * 4 / seconds)})
    if rank == 0:
        Path(out).write_text(json.dumps(rows))
    dist.destroy_process_group()


def main() -> int:
    """Measure on 2 and 4 processes; write ``bench/results/links.json``."""
    import tempfile

    import torch.multiprocessing as mp

    rows = []
    for world in (2, 4):
        with socket.socket() as probe:
            probe.bind(("127.0.0.1", 0))
            port = probe.getsockname()[1]
        out = Path(tempfile.mkdtemp(prefix="links-")) / "rows.json"
        mp.spawn(_measure, args=(world, port, str(out)), nprocs=world)
        rows += json.loads(out.read_text())
    for row in rows:
        print(row["processes"], row["op"], row["bytes"], f"{row['seconds'] * 1e3:.2f} ms",
              f"{row['bytes_per_second'] / 1e9:.2f} GB/s")
    path = Path(__file__).with_name("results") / "links.json"
    path.write_text(json.dumps({"machine": {"cpus": os.cpu_count(), "python": sys.version.split()[0]},
                                "rows": rows}, indent=2) + "\n")
    print(f"wrote {path}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
