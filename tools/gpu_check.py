"""GPU smoke checks for a machine with CUDA: the engine's mixed precision and measured MFU, Kronos, the
distribution strategies (FSDP2, DDP over NCCL with and without bf16/PowerSGD gradient compression, DeepSpeed
when installed) on the GPU, llama-60m pre-training (bf16, tokens/s, MFU), twinkle-llm's tensor-parallel plan on a
one-device mesh and llama-60m under FSDP2, the speed probes of issue 51 (``check_speed``: the planner's probe and
choices, SDPA's kernels, torch.compile's cost and gain, the fused LM-head loss), and MelOTTS's quality curve on the GPU
(``TTS_STEPS``, default 3000; the same probe as ``bench/tts_quality.py``: MCD-DTW, closed-set identification,
Whisper WER every ``TTS_EVERY`` steps).

Not part of the test suite (CI has no GPU). Run on a CUDA machine after installing twinkle-core and the
plugins; ``BARS`` is a folder of daily OHLCV CSVs (one per symbol). Prints one JSON line per check and
exits non-zero when one fails.

    BARS=path/to/bars python tools/gpu_check.py
    CHECKS=llm,resnet18 python tools/gpu_check.py     # only those checks
"""

from __future__ import annotations

import importlib.util
import json
import os
import sys
import tempfile
import time
import traceback
from pathlib import Path

import numpy as np
import pandas as pd
import torch

from twinkle_core import Trainer


def check_resnet(work: Path) -> dict:
    """ResNet-18 on digits: the planned precision on CUDA, accuracy, and an ONNX export that matches."""
    from twinkle_vision.samples import write_digits

    data = write_digits(work / "digits")
    trainer = Trainer("resnet18", verbose=False, progress_bar=False,
                      hyperparams={"max_epochs": 4, "lr": 1e-3, "weight_decay": 0.05, "scheduler": "onecycle"})
    start = time.perf_counter()
    result = trainer.fit(data=str(data))
    seconds = time.perf_counter() - start
    exported = trainer.export(format="onnx")
    from twinkle_core import RunStore

    measured = RunStore().get(result.run_uri).measured
    return {"accelerator": result.plan.accelerator, "precision": result.plan.precision,
            "micro_batch": result.plan.micro_batch_size, "val_accuracy": result.metrics.get("val_accuracy"),
            "fit_seconds": round(seconds, 1), "export": str(exported)[:300],
            "utilisation": {k: measured.get(k) for k in ("samples_per_second", "achieved_flops_per_second", "mfu",
                                                         "peak_source", "data_wait_fraction")}}


def _timed_cuda(step, repeats: int = 10) -> float:
    """Median seconds of ``step()`` on the GPU (after two warm-up calls)."""
    for _ in range(2):
        step()
    torch.cuda.synchronize()
    times = []
    for _ in range(repeats):
        start = time.perf_counter()
        step()
        torch.cuda.synchronize()
        times.append(time.perf_counter() - start)
    return sorted(times)[len(times) // 2]


def check_speed(work: Path) -> dict:
    """Issue 51's probes on the GPU: the planner's speed probe and choices for ResNet-18 on digits; SDPA's kernels
    (flash, memory-efficient, math) forward + backward; torch.compile's compile time and step gain on ResNet-18;
    the fused chunked LM-head loss against the logits path (time and peak memory)."""
    import torch.nn.functional as F
    from torch.nn.attention import SDPBackend, sdpa_kernel

    from twinkle_llm.fused_loss import fused_linear_cross_entropy
    from twinkle_vision.samples import write_digits

    out: dict = {}
    os.environ.pop("TWINKLE_PROBE", None)
    data = write_digits(work / "speed-digits")
    plan = Trainer("resnet18", verbose=False, hyperparams={"max_epochs": 2}).plan(str(data))
    out["probe"] = plan.estimates.get("probe")
    out["choices"] = {d.name: (d.value, d.reason) for d in plan.decisions
                      if d.name in ("precision", "memory_format", "num_workers", "torch_threads", "compile",
                                    "allocator")}
    q, k, v = (torch.randn(8, 16, 1024, 64, device="cuda", dtype=torch.bfloat16, requires_grad=True) for _ in range(3))
    for name, backend in (("flash", SDPBackend.FLASH_ATTENTION), ("efficient", SDPBackend.EFFICIENT_ATTENTION),
                          ("math", SDPBackend.MATH)):
        try:
            with sdpa_kernel(backend):
                out[f"sdpa_{name}_ms"] = round(1e3 * _timed_cuda(
                    lambda: F.scaled_dot_product_attention(q, k, v, is_causal=True).sum().backward()), 3)
        except RuntimeError as err:
            out[f"sdpa_{name}_ms"] = f"unavailable: {str(err)[:120]}"
    import timm

    model = timm.create_model("resnet18", num_classes=10).cuda()
    opt = torch.optim.AdamW(model.parameters(), fused=True)
    x, y = torch.randn(128, 3, 64, 64, device="cuda"), torch.randint(0, 10, (128,), device="cuda")

    def step(m):
        def run():
            with torch.autocast("cuda", dtype=torch.bfloat16):
                loss = F.cross_entropy(m(x), y)
            loss.backward()
            opt.step()
            opt.zero_grad(set_to_none=True)
        return run

    out["resnet18_eager_ms"] = round(1e3 * _timed_cuda(step(model)), 3)
    start = time.perf_counter()
    compiled = torch.compile(model)
    step(compiled)()
    torch.cuda.synchronize()
    out["resnet18_compile_seconds"] = round(time.perf_counter() - start, 1)
    out["resnet18_compiled_ms"] = round(1e3 * _timed_cuda(step(compiled)), 3)
    head = torch.nn.Linear(1024, 151_936, bias=False, device="cuda", dtype=torch.bfloat16)
    hidden = torch.randn(8 * 1024, 1024, device="cuda", dtype=torch.bfloat16, requires_grad=True)
    targets = torch.randint(0, 151_936, (8 * 1024,), device="cuda")
    for name, loss_of in (("fused", lambda: fused_linear_cross_entropy(hidden, head, targets)),
                          ("logits", lambda: F.cross_entropy(head(hidden).float(), targets, reduction="sum"))):
        torch.cuda.reset_peak_memory_stats()
        base = torch.cuda.memory_allocated()
        out[f"lm_loss_{name}_ms"] = round(1e3 * _timed_cuda(lambda: loss_of().backward(), 5), 3)
        out[f"lm_loss_{name}_peak_mib"] = round((torch.cuda.max_memory_allocated() - base) / 2**20, 1)
    return out


def check_tts(work: Path) -> dict:
    """melotts-tiny on 400 espeak-ng English clips on the GPU: the plan, and the quality curve on 12 held-out
    sentences (``TTS_MODEL`` picks another size, e.g. ``melotts-base``)."""
    from twinkle_audio.probe import QualityProbe, held_out_corpus, reference_scores

    steps, every = int(os.environ.get("TTS_STEPS", 3000)), int(os.environ.get("TTS_EVERY", 500))
    corpus, texts, recordings = held_out_corpus(str(work / "voice"), 400)
    probe = QualityProbe(texts, recordings, 16000, str(work / "tts_curve.json"), every)
    trainer = Trainer(os.environ.get("TTS_MODEL", "melotts-tiny"), verbose=False, callbacks=[probe],
                      hyperparams={"max_steps": steps, "max_epochs": 10_000, "batch_size": 16, "lang": "en",
                                   "sample_rate": 16000, "progress_bar": False})
    start = time.perf_counter()
    result = trainer.fit(data=corpus)
    return {"accelerator": result.plan.accelerator, "precision": result.plan.precision, "steps": steps,
            "fit_seconds": round(time.perf_counter() - start, 1), "references": reference_scores(texts, recordings, 16000),
            "curve": probe.rows}


def check_kronos(bars: Path) -> dict:
    """kronos-tiny's two stages on CUDA with the planned precision, then sampled forecasts on CUDA."""
    trainer = Trainer("kronos-tiny", verbose=False, progress_bar=False,
                      hyperparams={"lookback_window": 30, "pred_len": 10, "val_start": "2010-07-01",
                                   "test_start": "2011-07-01", "max_epochs": 6, "tokenizer_epochs": 3, "lr": 2e-3})
    start = time.perf_counter()
    result = trainer.fit(data=str(bars))
    seconds = time.perf_counter() - start
    device = "cuda" if torch.cuda.is_available() else "cpu"
    model = trainer.algorithm.to(device)
    history = pd.read_csv(bars / "AAPL.csv").iloc[-300:-20]
    forecast = model.predict(history, pred_len=10, sample_count=16, seed=0)
    x = torch.randn(256, 30, 5, device=device)
    z = model.forecast(x, 10, sample_count=4, seed=0)
    ok = bool(np.isfinite(forecast.to_numpy()).all() and torch.isfinite(z).all())
    return {"accelerator": result.plan.accelerator, "precision": result.plan.precision,
            "val_loss": result.metrics.get("val_loss"), "val_recon_mse": result.metrics.get("val_recon_mse"),
            "uniform_ce": model.uniform_ce, "fit_seconds": round(seconds, 1), "forecast_finite": ok,
            "forecast_device": str(z.device), "first_close": float(forecast["close"].iloc[0]),
            "last_history_close": float(history["adj_close"].iloc[-1])}  # predict works in split-adjusted prices


def check_llm(work: Path, hyperparams: dict | None = None) -> dict:
    """``llama-60m`` pre-trained from scratch on CPython's help topics on the GPU: the planned precision (bf16 on
    GPUs that have it), tokens/s and MFU against the device's datasheet peak, the perplexity, a greedy generation,
    and an ``hf`` export that reproduces the logits."""
    import pydoc_data.topics

    data = work / "topics.jsonl"
    with data.open("w") as out:
        for name in sorted(pydoc_data.topics.topics):
            out.write(json.dumps({"text": pydoc_data.topics.topics[name]}) + "\n")
    trainer = Trainer(os.environ.get("LLM_MODEL", "llama-60m"), verbose=False, progress_bar=False,
                      hyperparams={"max_epochs": int(os.environ.get("LLM_EPOCHS", 4)), "max_seq_len": 512,
                                   "vocab_size": 4096, "batch_size": int(os.environ.get("LLM_BATCH", 16)), "lr": 1e-3,
                                   **(hyperparams or {})})
    start = time.perf_counter()
    result = trainer.fit(data=str(data))
    seconds = time.perf_counter() - start
    exported = trainer.export(format="hf")
    from twinkle_core import RunStore

    measured = RunStore().get(result.run_uri).measured
    memory = next((d.reason for d in result.plan.decisions if d.name == "memory"), None)
    return {"accelerator": result.plan.accelerator, "precision": result.plan.precision,
            "strategy": result.plan.strategy,
            "micro_batch": result.plan.micro_batch_size, "val_perplexity": result.metrics.get("val_perplexity"),
            "fit_seconds": round(seconds, 1), "memory_plan": memory,
            "peak_memory_bytes": measured.get("peak_memory_bytes"),
            "generated": trainer.generate("The with statement", max_new_tokens=24),
            "hf_max_abs_diff": exported.max_abs_diff, "hf_path": exported.path,
            "utilisation": {k: measured.get(k) for k in ("tokens_per_second", "samples_per_second",
                                                         "achieved_flops_per_second", "mfu", "peak_source",
                                                         "data_wait_fraction")}}


def check_qlora(work: Path) -> dict:
    """Issue 56 on the GPU: ``llama-60m`` pre-trained briefly and exported as the base, then 60 LoRA steps on its
    topics with the base in full precision, in NF4 (torchao) and — where bitsandbytes is installed — in bitsandbytes'
    NF4: the validation loss, the peak memory and tokens/s of each; the NF4 run's GGUF exports (f16 and q8_0)."""
    from twinkle_core import RunStore

    base_run = check_llm(work, {"max_epochs": 1})
    folder = base_run["hf_path"]
    out: dict = {"base_perplexity": base_run["val_perplexity"]}
    kinds = ["none", "nf4"] + (["bnb-nf4"] if importlib.util.find_spec("bitsandbytes") else [])
    for kind in kinds:
        trainer = Trainer("llama-60m", verbose=False, progress_bar=False, hyperparams={
            "weights": str(folder), "lora_rank": 16, "quantize_base": kind, "max_steps": 60, "max_seq_len": 512,
            "batch_size": 16})
        result = trainer.fit(data=str(work / "topics.jsonl"))
        measured = RunStore().get(result.run_uri).measured
        out[kind] = {"val_loss": result.metrics.get("val_loss"), "precision": result.plan.precision,
                     "peak_memory_bytes": measured.get("peak_memory_bytes"),
                     "tokens_per_second": measured.get("tokens_per_second"),
                     "decision": next(d.reason for d in result.plan.decisions if d.name == "quantize_base")}
        if kind == "nf4":
            for quantize in (False, True):
                exported = trainer.export(format="gguf", quantize=quantize)
                out[kind][f"gguf_{'q8_0' if quantize else 'f16'}_max_abs_diff"] = exported.max_abs_diff
    return out


def check_layouts(work: Path) -> dict:
    """Tensor parallel and FSDP2 on the device: twinkle-llm's Llama plan applied on a one-device mesh (its DTensor
    layers, sequence-parallel norms and loss-parallel cross-entropy run on CUDA; logits and gradients checked against
    the unsplit model), then ``LLM_MODEL`` pre-trained under FSDP2 (``ModelParallelStrategy``) with its tokens/s
    and MFU beside the plain run of ``check_llm``."""
    import copy

    import torch.distributed as dist
    from torch.distributed.device_mesh import init_device_mesh
    from torch.distributed.tensor import DTensor, Replicate
    from torch.distributed.tensor.parallel import loss_parallel, parallelize_module
    from transformers import AutoModelForCausalLM

    from twinkle_llm.model import build_config
    from twinkle_llm.parallel import llama_plan
    from twinkle_llm.presets import PRESETS

    device = "cuda" if torch.cuda.is_available() else "cpu"
    started = not dist.is_initialized()
    if started:
        dist.init_process_group("nccl" if device == "cuda" else "gloo", init_method=f"file://{work / 'pg'}",
                                rank=0, world_size=1)
    try:
        torch.manual_seed(0)
        model = AutoModelForCausalLM.from_config(build_config("llama", {**PRESETS["llama"]["tiny"],
                                                                        "vocab_size": 512})).to(device)
        reference = copy.deepcopy(model)
        split = parallelize_module(model, init_device_mesh(device, (1,)), llama_plan(model.config, 1))
        split.lm_head.weight = split.model.embed_tokens.weight  # tied, as twinkle_core keeps them
        ids = torch.randint(0, 512, (4, 64), device=device)
        logits = split(input_ids=ids, use_cache=False).logits
        with loss_parallel():
            target = DTensor.from_local(ids[:, 1:].flatten(), logits.device_mesh, [Replicate()], run_check=False)
            loss = torch.nn.functional.cross_entropy(logits[:, :-1].flatten(0, 1), target)
            loss.backward()
        plain = reference(input_ids=ids, use_cache=False).logits
        torch.nn.functional.cross_entropy(plain[:, :-1].flatten(0, 1), ids[:, 1:].flatten()).backward()
        grad = split.model.layers[0].self_attn.q_proj.weight.grad
        tp = {"device": device, "logits_split": isinstance(logits, DTensor),
              "max_abs_logits_diff": float((logits.full_tensor() - plain).abs().max()),
              "max_abs_grad_diff": float((grad.full_tensor() - reference.model.layers[0].self_attn.q_proj.weight.grad)
                                         .abs().max())}
    finally:
        if started:
            dist.destroy_process_group()
    llm = check_llm(work, hyperparams={"strategy": "fsdp2"})
    return {"tensor_parallel_mesh_of_1": tp, "fsdp2_llm": llm}


def check_strategies(work: Path) -> dict:
    """The distribution strategies the CPU tests cannot reach: FSDP2 and DDP over the GPUs (NCCL), and
    DeepSpeed ZeRO when the ``deepspeed`` extra is installed. One run per fit; its metric reduced over ranks."""
    import importlib.util

    from sklearn.datasets import load_breast_cancer

    csv = work / "cancer.csv"
    load_breast_cancer(as_frame=True).frame.to_csv(csv, index=False)
    gpus = torch.cuda.device_count()
    strategies = ["fsdp2", "ddp"] + (["deepspeed_stage_2"] if importlib.util.find_spec("deepspeed") else [])
    out: dict = {"gpus": gpus}
    runs = [(s, None) for s in strategies] + [("ddp", kind) for kind in ("bf16", "powersgd")]  # NCCL comm hooks
    for strategy, compression in runs:
        hp = {"strategy": strategy, "devices": gpus, "max_epochs": 5, "gradient_compression": compression}
        result = Trainer("tabular-mlp", verbose=False, project=f"gpu-{strategy}-{compression}", progress_bar=False,
                         hyperparams={k: v for k, v in hp.items() if v is not None}).fit(str(csv))
        out[f"{strategy}{'-' + compression if compression else ''}"] = {
            "status": result.status, "val_accuracy": result.best_metric, "precision": result.plan.precision,
            "devices": result.plan.devices, "compression": result.plan.gradient_compression}
    return out


def check_strategies_in_a_job(work: Path) -> dict:
    """``check_strategies`` in its own process: Lightning relaunches that script for each GPU."""
    import subprocess

    proc = subprocess.run([sys.executable, __file__, "strategies", str(work)], capture_output=True, text=True,
                          timeout=1200, env={**os.environ, "TWINKLE_HOME": str(work / "strategies-home")})
    lines = [line for line in proc.stdout.splitlines() if line.startswith("{")]
    if proc.returncode != 0 or not lines:
        raise RuntimeError(f"exit {proc.returncode}: {proc.stderr[-2000:]}")
    return json.loads(lines[-1])


def main() -> int:
    """Run every check; print a JSON line each."""
    if sys.argv[1:2] == ["strategies"]:  # the job of check_strategies_in_a_job (every rank runs this)
        result = check_strategies(Path(sys.argv[2]))
        if int(os.environ.get("LOCAL_RANK", 0)) == 0:
            print(json.dumps(result, default=str), flush=True)
        return 0
    print(json.dumps({"torch": torch.__version__, "cuda": torch.cuda.is_available(),
                      "device": torch.cuda.get_device_name(0) if torch.cuda.is_available() else None}), flush=True)
    work = Path(tempfile.mkdtemp(prefix="twinkle-gpu-"))
    os.environ.setdefault("TWINKLE_HOME", str(work / "home"))
    failed = 0
    chosen = set(os.environ.get("CHECKS", "speed,kronos,resnet18,llm,layouts,strategies,tts,qlora").split(","))
    for name, check in (("speed", lambda: check_speed(work)),
                        ("kronos", lambda: check_kronos(Path(os.environ["BARS"]))),
                        ("resnet18", lambda: check_resnet(work)),
                        ("llm", lambda: check_llm(work)),
                        ("layouts", lambda: check_layouts(work)),
                        ("strategies", lambda: check_strategies_in_a_job(work)),
                        ("tts", lambda: check_tts(work)),
                        ("qlora", lambda: check_qlora(work))):
        if name not in chosen:
            continue
        try:
            print(json.dumps({"check": name, **check()}, default=str), flush=True)
        except Exception:
            failed += 1
            print(json.dumps({"check": name, "error": traceback.format_exc()[-3000:]}), flush=True)
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
