"""Pretrained weights for twinkle-vision, through core's loader (``twinkle_core.pretrained``):

* timm: a checkpoint folder as timm and Hugging Face write it (``config.json`` with ``architecture`` and
  ``pretrained_cfg``, ``model.safetensors``), a ``.safetensors`` file, or a PyTorch state dict. A new number of
  classes leaves the classifier (the config's ``classifier``, e.g. ``fc``) fresh; another number of input channels
  adapts the first convolution as timm does (``adapt_input_conv``). The folder's ``pretrained_cfg`` (mean, std,
  input size, interpolation, crop) is what the data is prepared with.
* ultralytics: ``yolov8*.pt`` / ``yolo11*.pt`` as ultralytics saves them (the model object pickled), read with
  ``weights_only=True`` and ``ultralytics_classes()`` admitted — nothing else a file names is imported or run —
  with the class names they carry. On new classes the head's class branch starts fresh (the backbone, neck and
  the head's box branch load), as ultralytics' own transfer does.
"""

from __future__ import annotations

from torch import nn

from twinkle_core.pretrained import (
    TORCH_SUFFIXES,
    Weights,
    WeightsReport,
    load_weights,
    read_weights,
    state_of,
    torch_load,
)


def ultralytics_classes() -> list[type]:
    """The classes an ultralytics checkpoint may pickle and Twinkle admits: ultralytics' own layers
    (``ultralytics.nn.modules``), its model classes, the torch layers they are built of, and its argument
    namespace — each a class whose unpickling only sets attributes."""
    import ultralytics.nn.modules as layers
    from ultralytics.nn import tasks
    from ultralytics.utils import IterableSimpleNamespace

    found: list[type] = [getattr(layers, name) for name in layers.__all__ if isinstance(getattr(layers, name), type)]
    found += [tasks.BaseModel, tasks.DetectionModel, IterableSimpleNamespace]
    found += [nn.Sequential, nn.ModuleList, nn.ModuleDict, nn.Conv2d, nn.ConvTranspose2d, nn.BatchNorm2d, nn.SiLU,
              nn.ReLU, nn.Identity, nn.MaxPool2d, nn.AdaptiveAvgPool2d, nn.Upsample, nn.Linear, nn.Dropout, nn.GELU,
              nn.LayerNorm, nn.MultiheadAttention, nn.modules.linear.NonDynamicallyQuantizableLinear]
    return found


def read_ultralytics(uri: str) -> tuple[Weights, list[str] | None]:
    """The weights at ``uri`` — an ultralytics ``.pt`` (its ``ema``, else its ``model``, in fp32) or any format
    ``read_weights`` reads — and the class names the file carries (``None`` when it carries none)."""
    if not str(uri).endswith(TORCH_SUFFIXES):
        return read_weights(uri), None
    from twinkle_core.data import require_exists

    fs, path = require_exists(uri, "weights")
    loaded = torch_load(fs.cat_file(path), uri, allow=ultralytics_classes())
    model = (loaded.get("ema") or loaded.get("model")) if isinstance(loaded, dict) else None
    if isinstance(model, nn.Module):
        names = getattr(model, "names", None)
        names = [str(names[k]) for k in sorted(names)] if isinstance(names, dict) else None
        tensors = {k: v.float() if v.is_floating_point() else v for k, v in model.state_dict().items()}
        return Weights(tensors, "ultralytics", {}, uri, {"names": names}), names
    tensors, extra = state_of(loaded)
    return Weights(tensors, "torch", {}, uri, extra), None


def load_ultralytics(model: nn.Module, uri: str, class_names: list[str]) -> WeightsReport:
    """``uri``'s weights into the ``DetectionModel`` ``model`` (its head fresh where the classes differ)."""
    weights, names = read_ultralytics(uri)
    head = f"model.{len(model.model) - 1}"
    report = load_weights(model, weights, fresh=[head])
    if names is not None:
        same = names == list(class_names)
        report.notes.append(f"the file's {len(names)} classes ({', '.join(names[:5])}{', ...' if len(names) > 5 else ''}) "
                            + ("are the data's: its head loads whole" if same else
                               f"differ from the data's {len(class_names)}: the head's class branch starts fresh"))
    return report


def load_timm(net: nn.Module, uri: str | Weights) -> WeightsReport:
    """``uri``'s weights into the timm model ``net``: its classifier fresh where the classes differ, its first
    convolution adapted to the input channels (``timm.models.adapt_input_conv``)."""
    from timm.models import adapt_input_conv

    weights = uri if isinstance(uri, Weights) else read_weights(uri)
    cfg = net.pretrained_cfg or {}
    classifier = cfg.get("classifier") or "fc"
    classifiers = [classifier] if isinstance(classifier, str) else list(classifier)
    notes = []
    first = cfg.get("first_conv")
    for name in ([first] if isinstance(first, str) else list(first or [])):
        key, own = f"{name}.weight", net.state_dict().get(f"{name}.weight")
        found = weights.tensors.get(key)
        if own is not None and found is not None and found.dim() == 4 and found.shape[1] != own.shape[1]:
            weights.tensors[key] = adapt_input_conv(own.shape[1], found.float()).to(found.dtype)
            notes.append(f"{key}: {found.shape[1]} input channels adapted to {own.shape[1]} (timm's adapt_input_conv)")
    report = load_weights(net, weights, fresh=classifiers)
    report.notes += notes
    return report


__all__ = ["load_timm", "load_ultralytics", "read_ultralytics", "ultralytics_classes"]
