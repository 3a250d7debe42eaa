"""Per-step overhead of Twinkle's Trainer against plain Lightning and a hand-written PyTorch loop.

The same model, data, seed and number of steps go through all three, one torch thread, in one process,
interleaved in rounds (the order rotating) so that machine noise hits each alike. Step time is the wall time between the starts
of consecutive training batches (data loading, forward, backward, optimizer step and every hook), as a
median over the steady-state steps of an epoch. Writes ``bench/results/overhead.json``.

Cases:
* ``resnet18``: torchvision's ResNet-18 (10 classes) on random 3×32×32 images, batch 32 (compute-bound).
* ``mlp``: core's ``tabular-mlp`` (30 → 64 → 32 → 2) on 30-feature rows, batch 64 (overhead-bound).

    python bench/overhead.py [--rounds 6] [--mlp-steps 300] [--resnet-steps 30]
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import statistics
import sys
import tempfile
import time
from pathlib import Path
from typing import Any, Callable

os.environ.setdefault("OMP_NUM_THREADS", "1")

import lightning as L  # noqa: E402
import numpy as np  # noqa: E402
import pandas as pd  # noqa: E402
import torch  # noqa: E402
from torch import nn  # noqa: E402
from torch.utils.data import DataLoader, TensorDataset  # noqa: E402

from twinkle_core import Algorithm, DataProcessor, DataSpec, Trainer, hookimpl  # noqa: E402
from twinkle_core.data.processor import PreparedData  # noqa: E402
from twinkle_core.testing import registered_plugin  # noqa: E402

RESULTS = Path(__file__).resolve().parent / "results" / "overhead.json"


class StepClock(L.Callback):
    """Records the start time of every training batch."""

    def __init__(self) -> None:
        self.starts: list[float] = []

    def on_train_batch_start(self, trainer: L.Trainer, module: L.LightningModule, batch: Any, idx: int) -> None:
        self.starts.append(time.perf_counter())


def steady_step_ms(starts: list[float]) -> float:
    """Median gap between batch starts, skipping the first few (warm-up)."""
    gaps = np.diff(np.asarray(starts[5:])) * 1000
    return float(np.median(gaps))


# ----------------------------------------------------------------- the models
class ResNet18(Algorithm):
    """torchvision's ResNet-18 as a Twinkle algorithm (bench only)."""

    task = "image_classification"
    optimizer_defaults = {"lr": 0.01, "optimizer": "sgd"}

    def build_model(self, spec: DataSpec) -> nn.Module:
        import torchvision

        return torchvision.models.resnet18(num_classes=spec.num_classes)


class SyntheticImages(DataProcessor):
    """Random 3×32×32 images with 10 classes; the URI's name is ignored (bench only)."""

    task = "image_classification"

    def __init__(self, samples: int = 1024) -> None:
        super().__init__()
        self.samples = samples

    def prepare(self, uri: str, seed: int = 0) -> PreparedData:
        x, y = images(self.samples, seed)
        spec = DataSpec("image_classification", (3, 32, 32), num_classes=10)
        return PreparedData(TensorDataset(x, y), TensorDataset(x[:64], y[:64]), spec, f"synthetic:{seed}", uri,
                            x.numel() * 4)


class BenchPlugin:
    """Registers the bench's image algorithm and processor in-process."""

    @hookimpl
    def register_algorithms(self, register: Any) -> None:
        """The ResNet-18 bench algorithm."""
        register("bench-resnet18", ResNet18, task="image_classification", description="bench")

    @hookimpl
    def register_data_processors(self, register: Any) -> None:
        """Random images."""
        register("bench-images", SyntheticImages, task="image_classification", description="bench")


def images(n: int, seed: int) -> tuple[torch.Tensor, torch.Tensor]:
    g = torch.Generator().manual_seed(seed)
    return torch.randn(n, 3, 32, 32, generator=g), torch.randint(0, 10, (n,), generator=g)


# ------------------------------------------------------------------ the three
def run_raw(make: Callable[[], Algorithm], dataset: TensorDataset, batch: int, steps: int, seed: int) -> float:
    """A hand-written loop: shuffle, forward, loss, backward, step."""
    model = make()
    optimizer = model.configure_optimizers()
    optimizer = optimizer["optimizer"] if isinstance(optimizer, dict) else optimizer
    loader = DataLoader(dataset, batch_size=batch, shuffle=True, generator=torch.Generator().manual_seed(seed))
    model.train()
    starts: list[float] = []
    while len(starts) < steps:
        for x, y in loader:
            starts.append(time.perf_counter())
            optimizer.zero_grad(set_to_none=True)
            loss = model.compute_loss(model(x), y)
            loss.backward()
            optimizer.step()
            if len(starts) >= steps:
                break
    return steady_step_ms(starts)


def run_lightning(make: Callable[[], Algorithm], dataset: TensorDataset, batch: int, steps: int, seed: int) -> float:
    """Plain Lightning with its defaults minus logging and checkpoints (a typical quick script)."""
    model = make()
    clock = StepClock()
    trainer = L.Trainer(max_steps=steps, accelerator="cpu", devices=1, logger=False, enable_checkpointing=False,
                        enable_progress_bar=False, enable_model_summary=False, callbacks=[clock],
                        num_sanity_val_steps=0)
    loader = DataLoader(dataset, batch_size=batch, shuffle=True, generator=torch.Generator().manual_seed(seed))
    trainer.fit(model, loader)
    return steady_step_ms(clock.starts)


def run_twinkle(algorithm: str, data: str, hyperparams: dict[str, Any], steps: int) -> float:
    """Twinkle's Trainer: plan, run store, checkpoints, metrics CSV, exact-resume machinery, all on."""
    clock = StepClock()
    hyperparams = dict(hyperparams)
    processor = hyperparams.pop("data_processor", None)
    Trainer(algorithm, hyperparams={**hyperparams, "max_steps": steps, "progress_bar": False}, verbose=False,
            callbacks=[clock], data_processor=processor).fit(data)
    return steady_step_ms(clock.starts)


def main() -> None:
    """Run the rounds, print a table and write the results file."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=6)
    parser.add_argument("--mlp-steps", type=int, default=300)
    parser.add_argument("--resnet-steps", type=int, default=30)
    args = parser.parse_args()
    torch.set_num_threads(1)
    work = Path(tempfile.mkdtemp(prefix="twinkle-bench-"))
    os.environ["TWINKLE_HOME"] = str(work / "home")
    seed = 0

    from sklearn.datasets import load_breast_cancer

    frame = load_breast_cancer(as_frame=True).frame
    frame = pd.concat([frame] * 4, ignore_index=True)  # 2276 rows: ~28 steps per epoch at batch 64
    csv = work / "rows.csv"
    frame.to_csv(csv, index=False)
    from twinkle_core.data import PrepareContext
    from twinkle_core.data.tabular import TabularProcessor

    prepared = TabularProcessor().prepare(str(csv), PrepareContext(seed=seed))

    def make_mlp() -> Algorithm:
        from twinkle_core.algorithms.tabular_mlp import TabularMLP

        torch.manual_seed(seed)
        model = TabularMLP.from_hyperparams({})
        model.configure_data(prepared.spec)
        return model

    def make_resnet() -> Algorithm:
        torch.manual_seed(seed)
        model = ResNet18.from_hyperparams({})
        model.configure_data(DataSpec("image_classification", (3, 32, 32), num_classes=10))
        return model

    image_data = TensorDataset(*images(1024, seed))
    cases = {
        "mlp": (make_mlp, prepared.train, 64, args.mlp_steps, ("tabular-mlp", str(csv), {"batch_size": 64})),
        "resnet18": (make_resnet, image_data, 32, args.resnet_steps,
                     ("bench-resnet18", "synthetic://images", {"batch_size": 32, "samples": 1024,
                                                                 "data_processor": "bench-images"})),
    }
    times: dict[str, dict[str, list[float]]] = {case: {"raw": [], "lightning": [], "twinkle": []} for case in cases}
    with registered_plugin(BenchPlugin(), name="bench"):
        for round_ in range(args.rounds):
            for case, (make, dataset, batch, steps, (algo, data, hp)) in cases.items():
                runners = {
                    "raw": lambda: run_raw(make, dataset, batch, steps, seed),
                    "lightning": lambda: run_lightning(make, dataset, batch, steps, seed),
                    "twinkle": lambda: run_twinkle(algo, data, hp, steps),
                }
                order = list(runners)[round_ % 3:] + list(runners)[: round_ % 3]  # rotate: no favoured slot
                for name in order:
                    times[case][name].append(runners[name]())
                print(f"round {round_ + 1}: {case} " + ", ".join(f"{k} {v[-1]:.3f} ms" for k, v in times[case].items()),
                      flush=True)
    summary: dict[str, Any] = {}
    for case, series in times.items():
        med = {k: statistics.median(v) for k, v in series.items()}
        summary[case] = {
            "step_ms": {k: round(v, 4) for k, v in med.items()},
            "twinkle_over_raw": round(med["twinkle"] / med["raw"], 4),
            "lightning_over_raw": round(med["lightning"] / med["raw"], 4),
            "twinkle_over_lightning": round(med["twinkle"] / med["lightning"], 4),
            "twinkle_minus_lightning_ms": round(med["twinkle"] - med["lightning"], 4),
            "lightning_minus_raw_ms": round(med["lightning"] - med["raw"], 4),
            "rounds_ms": {k: [round(x, 4) for x in v] for k, v in series.items()},
        }
    result = {
        "machine": {"python": platform.python_version(), "torch": torch.__version__, "cpus": os.cpu_count(),
                    "threads": torch.get_num_threads(), "platform": platform.platform()},
        "rounds": args.rounds,
        "goals": {"resnet18": "twinkle_over_raw <= 1.03",
                  "mlp": "twinkle_minus_lightning_ms <= 0.25 (Lightning's own overhead is lightning_minus_raw_ms)"},
        "cases": summary,
    }
    RESULTS.parent.mkdir(parents=True, exist_ok=True)
    RESULTS.write_text(json.dumps(result, indent=2) + "\n")
    print(f"\n{'case':9} {'raw ms':>8} {'lightning':>10} {'twinkle':>8} {'tw/raw':>7} {'tw-L ms':>8} {'L-raw ms':>8}")
    for case, s in summary.items():
        ms = s["step_ms"]
        print(f"{case:9} {ms['raw']:8.3f} {ms['lightning']:10.3f} {ms['twinkle']:8.3f} {s['twinkle_over_raw']:7.3f} "
              f"{s['twinkle_minus_lightning_ms']:8.3f} {s['lightning_minus_raw_ms']:8.3f}")
    print(f"written to {RESULTS}")


if __name__ == "__main__":
    sys.exit(main())
