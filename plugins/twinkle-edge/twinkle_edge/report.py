"""``EdgeReport``: every stage of an edge optimisation side by side — parameters, MACs, file size,
onnxruntime latency, the task metric and the similarity to the original model — as a table, JSON and a PNG."""

from __future__ import annotations

import json
import os
from dataclasses import asdict, dataclass, field
from typing import Any

from twinkle_core.data import atomic_write_text


@dataclass
class Stage:
    """One stage (original, pruned, fine-tuned, quantized, converted) as measured."""

    name: str
    parameters: int
    macs: int
    file_bytes: int
    latency_ms: float | None
    metric: str | None
    metric_value: float | None
    similarity: dict[str, float]
    artefact: str | None = None
    run: str | None = None
    notes: dict[str, Any] = field(default_factory=dict)


@dataclass
class EdgeReport:
    """What ``EdgeOptimizer`` did and measured."""

    model: str
    target: str
    pruning: dict[str, Any] | None
    stages: list[Stage]
    finetune_run: str | None = None
    source_run: str | None = None

    def stage(self, name: str) -> Stage:
        """The stage called ``name``."""
        return next(s for s in self.stages if s.name == name)

    def to_dict(self) -> dict[str, Any]:
        """JSON-ready values."""
        return asdict(self)

    def table(self) -> str:
        """The stages as an aligned text table."""
        rows = [("stage", "params", "MACs", "file", "latency", "metric", "cosine", "max |Δ|", "top-1 agr.")]
        for s in self.stages:
            rows.append((s.name, f"{s.parameters / 1e6:.2f} M", f"{s.macs / 1e6:.1f} M", f"{s.file_bytes / 1e6:.2f} MB",
                         f"{s.latency_ms:.2f} ms" if s.latency_ms is not None else "not measured",
                         f"{s.metric}={s.metric_value:.4f}" if s.metric_value is not None else "—",
                         f"{s.similarity.get('cosine', float('nan')):.4f}",
                         f"{s.similarity.get('max_abs_diff', float('nan')):.3g}",
                         f"{s.similarity['top1_agreement']:.3f}" if "top1_agreement" in s.similarity else "—"))
        widths = [max(len(r[i]) for r in rows) for i in range(len(rows[0]))]
        return "\n".join("  ".join(c.ljust(w) for c, w in zip(r, widths)).rstrip() for r in rows)

    def __str__(self) -> str:
        """The table, headed by the model and target."""
        return f"Edge report: {self.model} → {self.target}\n{self.table()}"

    def save(self, folder: str) -> tuple[str, str]:
        """Write ``edge-report.json`` and ``edge-report.png`` (size and latency against the metric)."""
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt

        os.makedirs(folder, exist_ok=True)
        json_path, png_path = os.path.join(folder, "edge-report.json"), os.path.join(folder, "edge-report.png")
        atomic_write_text(json_path, json.dumps(self.to_dict(), indent=2))
        fig, axes = plt.subplots(1, 2, figsize=(10, 4))
        for ax, key, label in ((axes[0], "file_bytes", "file size (MB)"), (axes[1], "latency_ms", "latency (ms)")):
            for s in self.stages:
                value = getattr(s, key)
                if value is None or s.metric_value is None:
                    continue
                ax.scatter(value / (1e6 if key == "file_bytes" else 1), s.metric_value)
                ax.annotate(s.name, (value / (1e6 if key == "file_bytes" else 1), s.metric_value))
            ax.set_xlabel(label)
            ax.set_ylabel(self.stages[0].metric or "metric")
            ax.grid(alpha=0.3)
        fig.suptitle(f"{self.model} → {self.target}")
        fig.tight_layout()
        fig.savefig(png_path, dpi=100)
        plt.close(fig)
        return json_path, png_path
