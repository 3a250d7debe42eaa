"""The planner's layout against every layout a person could pick (issue 27), measured, then on paper.

**Measured.** ``llama-60m`` (8 decoder layers, width 512; a 4,096-id vocabulary learned from CPython's help topics:
27 M parameters) under a per-process memory cap that plain data parallel does not fit. On 2 processes and on 4
(CPU, gloo, one thread each), every layout of data-parallel FSDP2 × tensor parallel × pipeline stages that the
model can take trains the same 12 optimizer steps of 4 windows × 64 tokens (fp32, the same seed), each with the
largest micro-batch the planner's memory arithmetic fits under the cap (the rest of the batch accumulated); each
records its tokens/s (the job's, over the measured training time), its peak resident memory per process and the
planner's estimated step. Beside them: the planner's pick for the same job (``Trainer.plan`` with
``memory_limit_bytes``), its rank among the layouts that fit, and its ratio to the fastest and to the median.

**On paper.** torchtitan's published runs — Llama 3.1 8B on 8 H100s with FSDP (5,762 tokens/s per GPU; local
batch 2, 8,192 tokens) and Llama 3.1 70B on 256 H100s with FSDP 32 × TP 8 (829 tokens/s per GPU) — planned for
the same clusters from the models' shapes (measured on the meta device: nothing allocated): the layout the planner
picks and its estimated tokens/s per device beside the published figure.

    python bench/layouts.py            # about 10 minutes on 2 cores; writes bench/results/layouts.json

Run with ``--run DEVICES TP PP MICRO OUT DATA`` it trains one layout (Lightning starts the other ranks by running this
file again) and writes ``OUT/rank<N>.json``.
"""

from __future__ import annotations

import fnmatch
import json
import os
import platform
import resource
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

os.environ.setdefault("OMP_NUM_THREADS", "1")
os.environ.setdefault("PYTHONWARNINGS", "ignore")

MODEL = "llama-60m"
SETTINGS = {"max_seq_len": 64, "vocab_size": 4096, "effective_batch_size": 4, "max_steps": 12, "max_epochs": 1,
            "lr": 1e-3, "scheduler": "none", "val_generations": 0, "progress_bar": False, "accelerator": "cpu",
            "seed": 0}
"""The same tokens for every layout: 12 steps × 4 windows × 64 tokens (small batches: the training state, not the
activations, is what does not fit, as for large models)."""
CAP_SHARE = 0.75
"""The memory cap per process (``memory_limit_bytes``), as a share of what one process needs for plain data
parallel: the planner plans for 80 % of the cap (0.6 of plain data parallel), so plain data parallel does not fit
and layouts that shard or split the state do."""
PUBLISHED = [
    {"model": "8b", "devices": 8, "nodes": 1, "global_batch": 16, "published_layout": "FSDP 8",
     "published_tokens_per_second_per_gpu": 5762},
    {"model": "70b", "devices": 8, "nodes": 32, "global_batch": 512, "published_layout": "FSDP 32 × TP 8",
     "published_tokens_per_second_per_gpu": 829},
]
"""torchtitan's docs/performance.md: Llama 3.1 on H100s (96 GB HBM2e), 8,192-token sequences. The 70B run's global
batch is not stated beside its figure; 512 (16 per FSDP rank) is assumed — the time estimate does not depend on it
unless the layout has pipeline stages."""


def layouts(devices: int, heads: int, layers: int) -> list[tuple[int, int, int]]:
    """Every ``(dp, tp, pp)`` of ``devices`` the model can take: tp dividing the heads, pp at most the layers."""
    out = []
    for tp in (1, 2, 4, 8):
        for pp in (1, 2, 4, 8):
            if devices % (tp * pp) == 0 and heads % tp == 0 and pp <= layers:
                out.append((devices // (tp * pp), tp, pp))
    return out


def run_one(devices: int, tensor: int, stages: int, micro: int, out: Path, data: str) -> None:
    """Train one layout in this job (``--run``) with micro-batches of ``micro`` windows per replica (accumulating
    the rest of the effective batch) and write this rank's figures."""
    from twinkle_core import Trainer

    hp = {**SETTINGS, "devices": devices, "batch_size": micro}
    if tensor > 1:
        hp["tensor_parallel_size"] = tensor
    if stages > 1:
        hp["pipeline_parallel_size"] = stages
    if tensor == stages == 1:
        hp["strategy"] = "fsdp2"
    started = time.perf_counter()
    result = Trainer(MODEL, hyperparams=hp, project="layouts", verbose=False).fit(data)
    rank = int(os.environ.get("RANK", os.environ.get("LOCAL_RANK", 0)))
    from twinkle_core import RunStore

    record = RunStore().get(result.run_uri) if rank == 0 else None
    (out / f"rank{rank}.json").write_text(json.dumps({
        "peak_rss_bytes": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024,
        "wall_seconds": time.perf_counter() - started, "status": result.status,
        "measured": record.measured if record is not None else None,
        "layout": result.plan.estimates.get("layout"), "train_loss": result.metrics.get("train_loss")}))


def planned(facts: dict, devices: int, dp: int, tp: int, pp: int, cap: int):  # noqa: ANN201 (a Layout)
    """The planner's arithmetic for a layout as the bench runs it: the largest micro-batch, from a replica's whole
    share of the batch halving down, whose memory per process fits (``twinkle_core.planning.layout``: FSDP2 over
    dp, fp32), with that memory and the estimated step (the smallest micro-batch's when none fits)."""
    from dataclasses import fields

    from twinkle_core.planning import Hardware, ModelFacts
    from twinkle_core.planning.layout import layout_for

    known = ModelFacts(**{f.name: facts[f.name] for f in fields(ModelFacts) if f.name in facts})
    cpu = Hardware("cpu", devices, "cpu", cap, False, False, os.cpu_count() or 1, cap)
    batch, micro = SETTINGS["effective_batch_size"], SETTINGS["effective_batch_size"] // dp
    while True:
        layout = layout_for(known, cpu, batch, micro, False, dp, tp, pp)
        if micro == 1 or layout.memory["total"] <= layout.budget_bytes:
            return layout
        micro //= 2


def plain_bytes(facts: dict, devices: int) -> int:
    """Bytes per process plain data parallel needs (fp32): the whole training state (16 B per parameter) and a
    replica's batch of activations."""
    batch = SETTINGS["effective_batch_size"] // devices
    return int(16 * int(facts["parameters"]) + int(facts["activation_bytes_per_sample"]) * batch)


def measured(data: Path, home: Path) -> dict:
    """Plan and train every layout on 2 and 4 processes; the table and the planner's standing."""
    from twinkle_core import Trainer
    from twinkle_llm.presets import PRESETS

    shape = PRESETS["llama"]["60m"]
    os.environ["TWINKLE_HOME"] = str(home)
    tokens = SETTINGS["max_steps"] * SETTINGS["effective_batch_size"] * SETTINGS["max_seq_len"]
    report: dict = {"model": MODEL, "settings": SETTINGS, "tokens": tokens, "worlds": {}}
    for devices in (2, 4):
        per_device = {**SETTINGS, "devices": devices, "batch_size": SETTINGS["effective_batch_size"] // devices}
        facts = Trainer(MODEL, hyperparams=per_device, verbose=False).plan(str(data)).estimates
        plain = plain_bytes(facts, devices)
        cap = int(CAP_SHARE * plain)
        pick = Trainer(MODEL, hyperparams={**per_device, "memory_limit_bytes": cap}, verbose=False).plan(str(data))
        chosen = pick.estimates.get("layout")
        picked = (chosen["data"], chosen["tensor"], chosen["pipeline"]) if chosen else None
        rows = [{"layout": "plain data parallel (DDP)", "dp": devices, "tp": 1, "pp": 1, "needed_bytes": plain,
                 "fits_cap": plain <= 0.8 * cap}]
        for dp, tp, pp in layouts(devices, shape["num_key_value_heads"], shape["num_hidden_layers"]):
            layout = planned(facts, devices, dp, tp, pp, cap)
            row = {"layout": f"dp {dp} × tp {tp} × pp {pp}", "dp": dp, "tp": tp, "pp": pp,
                   "micro_batch_size": layout.micro_batch_size, "needed_bytes": layout.memory["total"],
                   "fits_cap": layout.memory["total"] <= layout.budget_bytes,
                   "estimated_step_seconds": round(layout.step_seconds, 3)}
            rows.append(row)
            if not row["fits_cap"] and (dp, tp, pp) != picked:
                continue
            out = Path(tempfile.mkdtemp(prefix=f"layout-{devices}-"))
            env = {**os.environ, "TWINKLE_USER": "bench"}
            done = subprocess.run([sys.executable, __file__, "--run", str(devices), str(tp), str(pp),
                                   str(row["micro_batch_size"]), str(out), str(data)], env=env, capture_output=True,
                                  text=True, timeout=1800)
            if done.returncode != 0:
                row["error"] = done.stderr[-1500:]
                continue
            ranks = [json.loads((out / f"rank{r}.json").read_text()) for r in range(devices)]
            seconds = float(ranks[0]["measured"]["train_seconds"])
            row.update(tokens_per_second=round(tokens / seconds, 1), train_seconds=round(seconds, 2),
                       peak_rss_mb=round(max(r["peak_rss_bytes"] for r in ranks) / 1e6, 1),
                       final_train_loss=ranks[0]["train_loss"])
            print(devices, row["layout"], row.get("tokens_per_second"), row.get("peak_rss_mb"), flush=True)
        ran = sorted((r for r in rows if "tokens_per_second" in r and r["fits_cap"]),
                     key=lambda r: -r["tokens_per_second"])
        mine = next((r for r in rows if (r["dp"], r["tp"], r["pp"]) == picked and "tokens_per_second" in r), None)
        median = statistics.median(r["tokens_per_second"] for r in ran) if ran else None
        report["worlds"][str(devices)] = {
            "cap_bytes_per_process": cap, "plain_data_parallel_bytes": plain,
            "planner_pick": f"dp {picked[0]} × tp {picked[1]} × pp {picked[2]}" if picked else "none fits",
            "planner_micro_batch_size": chosen["micro_batch_size"] if chosen else None,
            "planner_reason": next((d.reason for d in pick.decisions if d.name == "layout"), None),
            "rank_of_pick": ran.index(mine) + 1 if mine in ran else None, "layouts_run": len(ran),
            "pick_to_fastest": round(mine["tokens_per_second"] / ran[0]["tokens_per_second"], 3) if mine else None,
            "pick_to_median": round(mine["tokens_per_second"] / median, 3) if mine and median else None,
            "rows": rows}
    return report


def on_paper() -> list[dict]:
    """The planner's layouts and estimates for torchtitan's published clusters."""
    import torch
    from transformers import AutoModelForCausalLM

    from torch.distributed.tensor.parallel import RowwiseParallel

    from twinkle_core.planning import Hardware, measure, plan_layout
    from twinkle_llm.model import build_config
    from twinkle_llm.parallel import llama_plan
    from twinkle_llm.presets import PRESETS

    out = []
    for case in PUBLISHED:
        config = build_config("llama", {**PRESETS["llama"][case["model"]], "vocab_size": 128256})
        with torch.device("meta"):
            model = AutoModelForCausalLM.from_config(config, dtype=torch.float32)
            row_wise = [m for name, m in model.named_modules()
                        if any(fnmatch.fnmatchcase(name, pattern) for pattern, style in llama_plan(config, 1).items()
                               if isinstance(style, RowwiseParallel))]  # as the planner reads CausalLM's plan
            facts = measure(model, torch.randint(0, 128256, (2, 8192)), row_wise, sequence_parallel=True,
                            shard_units=len(model.model.layers))
        cluster = Hardware.cluster(devices=case["devices"], device_memory="96GB", nodes=case["nodes"],
                                   interconnect="nvlink+infiniband")
        layout = plan_layout(facts, cluster, case["global_batch"], 1, mixed=True)
        devices = case["devices"] * case["nodes"]
        estimate = (case["global_batch"] * 8192 / layout.step_seconds / devices) if layout and layout.step_seconds \
            else None
        published = case["published_tokens_per_second_per_gpu"]
        out.append({**case, "parameters": facts.parameters, "flops_per_token": facts.flops_per_sample / 8192,
                    "planner_layout": layout.describe() if layout else "none fits",
                    "planner_memory_gb": round(layout.memory["total"] / 1e9, 1) if layout else None,
                    "planner_seconds": layout.seconds if layout else None,
                    "planner_alternatives": layout.alternatives if layout else None,
                    "estimated_tokens_per_second_per_gpu": round(estimate) if estimate else None,
                    "estimate_to_published": round(estimate / published, 3) if estimate else None})
        print(out[-1]["model"], out[-1]["planner_layout"], out[-1]["estimated_tokens_per_second_per_gpu"], flush=True)
    return out


def main() -> int:
    """Measure, plan on paper, write ``bench/results/layouts.json``."""
    from twinkle_llm.samples import write_topics

    if sys.argv[1:2] == ["--run"]:
        devices, tensor, stages, micro = (int(v) for v in sys.argv[2:6])
        run_one(devices, tensor, stages, micro, Path(sys.argv[6]), sys.argv[7])
        return 0
    folder = Path(tempfile.mkdtemp(prefix="twinkle-layouts-"))
    data = write_topics(folder / "topics.jsonl")
    started = time.time()
    report = {"machine": {"cpus": os.cpu_count(), "python": platform.python_version()},
              "on_paper": on_paper(), "measured": measured(data, folder / "home")}
    report["seconds"] = round(time.time() - started, 1)
    path = Path(__file__).with_name("results") / "layouts.json"
    path.write_text(json.dumps(report, indent=2) + "\n")
    print(f"wrote {path}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
