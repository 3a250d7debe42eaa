"""What earlier runs measured: the part of a finished run's record that planning reuses."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Mapping


@dataclass(frozen=True)
class PastRun:
    """An earlier finished run of the same algorithm, data fingerprint and hardware, with its measurements.

    Attributes:
        id: the run's id in the catalogue (``user/project/run-…``), named in the decisions that reuse it.
        micro_batch_size: the micro-batch it trained with (one that fitted), if measured.
        seconds_per_sample: its compute time per training sample, if measured.
        measured: every figure it recorded (``RunRecord.measured``: step time, throughput, MFU, memory, …).
    """

    id: str
    micro_batch_size: int | None = None
    seconds_per_sample: float | None = None
    measured: dict[str, Any] = field(default_factory=dict)

    @classmethod
    def from_record(cls, record: Any) -> PastRun:
        """The past run of a catalogue record (a ``RunRecord``) or of its dict (``RunRecord.to_dict()``, the form
        strategies were given before 0.3)."""
        data: Mapping[str, Any] = record if isinstance(record, Mapping) else {"id": record.id,
                                                                                "measured": record.measured}
        measured = dict(data.get("measured") or {})
        micro = measured.get("micro_batch_size")
        rate = measured.get("seconds_per_sample")
        return cls(id=str(data["id"]), micro_batch_size=int(micro) if micro else None,
                   seconds_per_sample=float(rate) if rate else None, measured=measured)
