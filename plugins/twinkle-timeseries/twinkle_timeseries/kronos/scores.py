"""``ForecastScores``: forecast error of the close over many validation windows, in z-units.

Totals are kept as one float64 tensor (so ranks can sum theirs with a single reduction) and turned into
figures at the end of the epoch: MAE, MASE (MAE over the mean absolute one-bar change inside the look-backs,
Hyndman's scale), the persistence forecast's MASE on the same windows, directional accuracy (over the
steps where both the forecast and the close move, as ``twinkle_timeseries.evaluation`` counts it), and the price IC:
per window, the Pearson correlation of the forecast's and the actual close's moves from the last close across the
horizon, averaged over the windows where both move (z-scoring a window is affine, so it is the price units' IC).
"""

from __future__ import annotations

import torch


class ForecastScores:
    """Running totals of forecast error for one split."""

    FIELDS = ("abs_error", "errors", "persistence_abs_error", "naive_abs_change", "changes", "hits", "moves",
              "ic_sum", "ic_windows")

    def __init__(self, close: int, device: torch.device | str = "cpu") -> None:
        """Score the feature at index ``close``."""
        self.close = close
        self.totals = torch.zeros(len(self.FIELDS), dtype=torch.float64, device=device)
        self.batches = 0

    def add(self, past: torch.Tensor, future: torch.Tensor, forecast: torch.Tensor) -> None:
        """Add windows: look-backs (B, L, F), actual futures (B, H, F) and forecasts (B, H, F)."""
        c = self.close
        past, future, forecast = (t[..., c].double() for t in (past, future, forecast.to(past.device)))
        last = past[:, -1:]
        actual_move, predicted_move = future - last, forecast - last
        moves = (actual_move != 0) & (predicted_move != 0)
        hits = moves & (torch.sign(actual_move) == torch.sign(predicted_move))
        changes = (past[:, 1:] - past[:, :-1]).abs()
        a = actual_move - actual_move.mean(dim=1, keepdim=True)
        p = predicted_move - predicted_move.mean(dim=1, keepdim=True)
        norms = a.norm(dim=1) * p.norm(dim=1)
        moving = norms > 0
        ic = (a * p).sum(dim=1)[moving] / norms[moving]
        values = [(forecast - future).abs().sum(), future.numel(), (last - future).abs().sum(), changes.sum(),
                  changes.numel(), hits.sum(), moves.sum(), ic.sum(), moving.sum()]
        self.totals += torch.tensor([float(v) for v in values], dtype=torch.float64, device=self.totals.device)
        self.batches += 1

    @classmethod
    def figures(cls, totals: torch.Tensor) -> dict[str, float]:
        """``mae``, ``mase``, ``persistence_mase``, ``direction`` and ``ic`` from (summed) totals."""
        t = dict(zip(cls.FIELDS, totals.tolist()))
        scale = t["naive_abs_change"] / t["changes"] if t["changes"] else float("nan")
        mae = t["abs_error"] / t["errors"] if t["errors"] else float("nan")
        persistence = t["persistence_abs_error"] / t["errors"] if t["errors"] else float("nan")
        return {"mae": mae, "mase": mae / scale if scale else float("nan"),
                "persistence_mase": persistence / scale if scale else float("nan"),
                "direction": t["hits"] / t["moves"] if t["moves"] else float("nan"),
                "ic": t["ic_sum"] / t["ic_windows"] if t["ic_windows"] else float("nan")}
