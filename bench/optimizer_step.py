"""One optimizer step over ResNet-18's 11 M parameters on one CPU thread: torch's default per-tensor loop,
``foreach`` and the fused kernel ``Algorithm.build_optimizer`` now picks (``Algorithm.optimizer_kernel``).

Side by side in one run, each the median of 15 steps after a warm-up; writes ``bench/results/optimizer_step.json``.

    python bench/optimizer_step.py
"""

from __future__ import annotations

import json
import os
import platform
import statistics
import time
from pathlib import Path

os.environ.setdefault("OMP_NUM_THREADS", "1")


def main() -> int:
    """Time each kernel of AdamW, Adam and SGD and write the figures."""
    import timm
    import torch

    torch.set_num_threads(1)
    model = timm.create_model("resnet18", num_classes=10, in_chans=1)
    params = list(model.parameters())
    for p in params:
        p.grad = torch.randn_like(p)
    figures: dict[str, object] = {"parameters": sum(p.numel() for p in params)}
    for name, cls in {"adamw": torch.optim.AdamW, "adam": torch.optim.Adam, "sgd": torch.optim.SGD}.items():
        row = {}
        for kernel, options in {"loop": {"foreach": False}, "foreach": {"foreach": True},
                                "fused": {"fused": True}}.items():
            optimizer = cls(params, lr=1e-3, **options, **({"momentum": 0.9} if name == "sgd" else {}))
            optimizer.step()
            times = []
            for _ in range(15):
                start = time.perf_counter()
                optimizer.step()
                times.append(time.perf_counter() - start)
            row[f"{kernel}_ms"] = round(1000 * statistics.median(times), 1)
        row["loop_over_fused"] = round(row["loop_ms"] / row["fused_ms"], 1)
        figures[name] = row
    figures["machine"] = f"{platform.machine()} {os.cpu_count()} cores, torch {torch.__version__}, one thread"
    out = Path(__file__).resolve().parent / "results" / "optimizer_step.json"
    out.write_text(json.dumps(figures, indent=2) + "\n")
    print(json.dumps(figures, indent=2))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
