"""Metric curves of a run: Lightning's ``metrics.csv`` read back and drawn to a PNG."""

from __future__ import annotations

import io
from typing import Any

from twinkle_core.store.atomic import atomic_write_bytes
from twinkle_core.uris import filesystem


def read_metrics(csv_uri: str) -> Any:
    """The metrics CSV as a pandas DataFrame (empty if the file does not exist)."""
    import pandas as pd

    fs, path = filesystem(csv_uri)
    if not fs.exists(path):
        return pd.DataFrame()
    with fs.open(path, "rb") as handle:
        return pd.read_csv(handle)


HISTORY = "metrics.before-restart.csv"
"""Rows of earlier attempts of a restarted run, kept beside Lightning's ``metrics.csv`` until the run ends."""


def keep_history(logs_uri: str, step: int) -> None:
    """Before a run restarts from its checkpoint at ``step``, keep the rows logged up to it: Lightning's logger
    starts ``metrics.csv`` afresh, and rows logged after the checkpoint are logged again by the new attempt."""
    import pandas as pd

    current = read_metrics(f"{logs_uri}/metrics.csv")
    if current.empty:
        return
    kept = current[current["step"] <= step] if "step" in current else current
    earlier = read_metrics(f"{logs_uri}/{HISTORY}")
    merged = pd.concat([earlier, kept], ignore_index=True) if not earlier.empty else kept
    atomic_write_bytes(f"{logs_uri}/{HISTORY}", merged.to_csv(index=False).encode())


def merge_history(logs_uri: str) -> None:
    """At the end of a restarted run: earlier attempts' rows, then the last attempt's, as one ``metrics.csv``."""
    fs, path = filesystem(f"{logs_uri}/{HISTORY}")
    if not fs.exists(path):
        return
    import pandas as pd
    merged = pd.concat([read_metrics(f"{logs_uri}/{HISTORY}"), read_metrics(f"{logs_uri}/metrics.csv")],
                       ignore_index=True)
    merged = merged.drop_duplicates()  # a validation at the checkpoint's step, logged again after the restart
    atomic_write_bytes(f"{logs_uri}/metrics.csv", merged.to_csv(index=False).encode())
    fs.rm(path)


def last_logged(csv_uri: str, monitor: str, mode: str) -> tuple[dict[str, float], float | None]:
    """What a run had logged by its end, read back from ``metrics.csv``: each metric's last value (what
    Lightning's ``callback_metrics`` held when the run's last step ended) and the best value of ``monitor``
    (``mode``: ``"min"`` or ``"max"``). For an attempt that resumed a run whose epochs were all done already, and
    so trained and logged nothing itself."""
    frame = read_metrics(csv_uri)
    last = {str(name): float(column.dropna().iloc[-1]) for name, column in frame.items()
            if name not in ("epoch", "step") and not column.dropna().empty}
    for name in [n for n in last if n.endswith("_epoch") and f"{n[:-6]}_step" in last]:
        last.setdefault(name[:-6], last[name])  # logged per step and per epoch: Lightning's plain name is the epoch's
    best = None
    if monitor in frame and not frame[monitor].dropna().empty:
        best = float(frame[monitor].max() if mode == "max" else frame[monitor].min())
    return last, best


def plot_curves(csv_uri: str, png_uri: str, title: str) -> bool:
    """Draw every ``*loss`` and validation metric against the step into ``png_uri``; False if no data."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    frame = read_metrics(csv_uri)
    if frame.empty or "step" not in frame:
        return False
    losses = [c for c in frame.columns if "loss" in c and not c.endswith("_step") and frame[c].notna().any()]
    others = [c for c in frame.columns if c.startswith(("val_", "test_")) and c not in losses and frame[c].notna().any()]
    panels = [p for p in (losses, others) if p]
    if not panels:
        return False
    fig, axes = plt.subplots(1, len(panels), figsize=(6 * len(panels), 4), squeeze=False)
    for ax, columns in zip(axes[0], panels):
        for column in columns:
            series = frame[["step", column]].dropna()
            ax.plot(series["step"], series[column], marker="o" if len(series) < 50 else None, label=column)
        ax.set_xlabel("step")
        ax.legend()
        ax.grid(alpha=0.3)
    fig.suptitle(title)
    fig.tight_layout()
    buffer = io.BytesIO()
    fig.savefig(buffer, format="png", dpi=100)
    plt.close(fig)
    atomic_write_bytes(png_uri, buffer.getvalue())
    return True
