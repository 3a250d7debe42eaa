"""``DataSpec``: what an algorithm needs to know about the data to build itself."""

from __future__ import annotations

from dataclasses import asdict, dataclass, field
from typing import Any, Mapping


@dataclass(frozen=True)
class DataSpec:
    """The shape of one sample and the targets, as a data processor found them.

    Algorithms read it in ``twinkle_core.Algorithm.build_model`` so that input channels, feature counts
    and classes come from the data, not from the user. It is stored with every run and checkpoint as plain
    JSON-ready values.

    Attributes:
        task: the task the data serves.
        input_shape: one sample's input shape without the batch axis: ``(30,)`` for 30 features,
            ``(1, 32, 32)`` for a grey 32×32 image.
        num_classes: the number of classes (classification and detection), else ``None``.
        class_names: the class names in label order.
        target_shape: one sample's target shape for regression (``()`` for a scalar).
        extra: anything else a processor wants an algorithm to know (JSON-ready values).
        input_dtype: the torch dtype name of the model's input (``"float32"``; ``"int64"`` for token ids).
            It is kept through planning, FLOP counting, export and verification.
        vocab_size: for integer inputs, the number of distinct ids (inputs lie in ``[0, vocab_size)``).
    """

    task: str
    input_shape: tuple[int, ...]
    num_classes: int | None = None
    class_names: tuple[str, ...] = ()
    target_shape: tuple[int, ...] = ()
    extra: Mapping[str, Any] = field(default_factory=dict)
    input_dtype: str = "float32"
    vocab_size: int | None = None

    @property
    def num_features(self) -> int:
        """The number of features of a flat (tabular) sample."""
        return int(self.input_shape[-1])

    @property
    def in_channels(self) -> int:
        """The number of channels of an image sample (``C`` of ``C×H×W``)."""
        return int(self.input_shape[0])

    def to_dict(self) -> dict[str, Any]:
        """Plain, JSON-ready values (lists for tuples)."""
        data = asdict(self)
        data["input_shape"] = list(self.input_shape)
        data["class_names"] = list(self.class_names)
        data["target_shape"] = list(self.target_shape)
        data["extra"] = dict(self.extra)
        return data

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> DataSpec:
        """Rebuild a spec from ``to_dict`` output."""
        return cls(
            task=str(data["task"]),
            input_shape=tuple(int(v) for v in data["input_shape"]),
            num_classes=None if data.get("num_classes") is None else int(data["num_classes"]),
            class_names=tuple(str(v) for v in data.get("class_names", ())),
            target_shape=tuple(int(v) for v in data.get("target_shape", ())),
            extra=dict(data.get("extra", {})),
            input_dtype=str(data.get("input_dtype", "float32")),
            vocab_size=None if data.get("vocab_size") is None else int(data["vocab_size"]),
        )


@dataclass(frozen=True)
class ModelInput:
    """What a model wants from its input, for data processors that resize (images, spectrograms, ...).

    An algorithm returns one from ``twinkle_core.Algorithm.model_input`` (timm's data config, say); the
    engine hands it to the data processor as ``DataProcessor.model_input`` before
    ``prepare``. A processor reads what applies to it and ignores the rest.

    Attributes:
        name: the model's name, for messages and plan reasons (``"resnet18"``).
        size: the model's own input size ``(height, width)`` (timm's ``input_size``), if it has one.
        min_size: the smallest side the network can use (its total stride, 32 for a ResNet).
        fixed: the model takes only ``size`` (a ViT's position embeddings), or the size an earlier run of this
            model was trained at (continue, finetune) — the processor must use it.
        mean: per-channel mean the model's weights expect (in [0, 1] units), if any.
        std: per-channel standard deviation to go with ``mean``.
        interpolation: resampling filter for resizing (``"bilinear"``, ``"bicubic"``).
        crop_pct: the share of the resized image that the centre crop keeps at evaluation (timm's ``crop_pct``).
        reason: why ``size`` is what it is, when ``fixed`` for a reason other than the architecture.
        tokenizer: the tokenizer a text model's data must be encoded with: a local folder holding
            ``tokenizer.json`` (a pretrained model's), or that file's JSON text (the one an earlier run of this
            model trained and stored with its data spec); ``None``: the processor trains one on the data.
        max_length: the longest token sequence a sequence model takes (its position embeddings), if it has a
            limit; a processor that sizes its windows from the data stays within it.
    """

    name: str = "the model"
    size: tuple[int, int] | None = None
    min_size: int | None = None
    fixed: bool = False
    mean: tuple[float, ...] | None = None
    std: tuple[float, ...] | None = None
    interpolation: str = "bilinear"
    crop_pct: float = 1.0
    reason: str = ""
    tokenizer: str | None = None
    max_length: int | None = None
