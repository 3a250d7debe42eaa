"""Pretrained weights for twinkle-vision, through core's loader (``twinkle_core.pretrained``):

* timm: a checkpoint folder as timm and Hugging Face write it (``config.json`` with ``architecture`` and
  ``pretrained_cfg``, ``model.safetensors``), a ``.safetensors`` file, or a PyTorch state dict. A new number of
  classes leaves the classifier (the config's ``classifier``, e.g. ``fc``) fresh; another number of input channels
  adapts the first convolution as timm does (``adapt_input_conv``). The folder's ``pretrained_cfg`` (mean, std,
  input size, interpolation, crop) is what the data is prepared with.
* ultralytics: ``yolov8*.pt`` / ``yolo11*.pt`` as ultralytics saves them (the model object pickled), read with
  ``weights_only=True`` and ``ultralytics_classes()`` admitted — nothing else a file names is imported or run —
  with the class names they carry. What does not fit the model Twinkle builds for the data's classes starts fresh
  — the head's class branch on new classes, or where the file's class branch was built at another width — while the
  backbone, neck and the head's box branch load, as ultralytics' own transfer does. The report's notes name each part
  (backbone and neck, box branch, class branch) with what loaded, what starts fresh and why; ``reasons`` says it
  tensor by tensor.
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
    (``ultralytics.nn.modules``, with the building blocks its submodules define without exporting them, such as
    YOLO11's ``C3k``), its model classes, the torch layers they are built of, and its argument namespace — each a
    class whose unpickling only sets attributes."""
    import importlib

    import ultralytics.nn.modules as layers
    from ultralytics.nn import tasks
    from ultralytics.utils import IterableSimpleNamespace

    found: list[type] = [getattr(layers, name) for name in layers.__all__ if isinstance(getattr(layers, name), type)]
    for part in ("activation", "block", "conv", "head", "transformer"):  # nn.Module subclasses, defined there
        module = importlib.import_module(f"ultralytics.nn.modules.{part}")
        found += [value for value in vars(module).values() if isinstance(value, type) and issubclass(value, nn.Module)
                  and value.__module__.startswith("ultralytics.nn.modules") and value not in found]
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
    """``uri``'s weights into the ``DetectionModel`` ``model``: what does not fit in its head starts fresh.

    The report's notes say, first, how the file's class names (where it carries them) compare with the data's, then
    for each part of the model — backbone and neck, the head's box branch (``cv2``, ``dfl``), its class branch
    (``cv3``), any other head part — how many tensors loaded and how many start fresh, and why.
    """
    weights, names = read_ultralytics(uri)
    last = len(model.model) - 1
    head = f"model.{last}"
    report = load_weights(model, weights, fresh=[head])
    if names is not None:
        listed = f"the file's {len(names)} classes ({', '.join(names[:5])}{', ...' if len(names) > 5 else ''})"
        if names != list(class_names):
            report.notes.append(f"{listed} differ from the data's {len(class_names)}: the head is built for the "
                                "data's classes (what of it loaded: below)")
        elif not any(name.startswith(head + ".") for name in report.fresh):
            report.notes.append(f"{listed} are the data's: its head loads whole")
        else:
            report.notes.append(f"{listed} are the data's, but parts of its head do not fit the model built for them "
                                "(below)")
    report.notes += _part_notes(model, weights.tensors, report, head, last)
    return report


def _part_notes(model: nn.Module, tensors: dict, report: WeightsReport, head: str, last: int) -> list[str]:
    """One note per part of a detection model: its tensors, how many start fresh, and why."""
    parts = {f"backbone and neck (model.0–model.{last - 1})": lambda n: not n.startswith(head + "."),
             f"box branch ({head}.cv2, {head}.dfl)": lambda n: n.startswith((f"{head}.cv2.", f"{head}.dfl.")),
             f"class branch ({head}.cv3)": lambda n: n.startswith(f"{head}.cv3.")}
    own = model.state_dict()
    named = [name for test in parts.values() for name in own if test(name)]
    others = sorted({name[len(head) + 1:].split(".")[0] for name in own if name.startswith(head + ".")
                     and name not in named})
    if others:
        parts[f"other head parts ({', '.join(f'{head}.{o}' for o in others)})"] = \
            lambda n: n.startswith(head + ".") and n not in named
    fresh = set(report.fresh)
    notes = []
    for label, test in parts.items():
        names = [name for name in own if test(name)]
        if not names:
            continue
        left = [name for name in names if name in fresh]
        if not left:
            notes.append(f"{label}: {len(names)} tensors, all loaded")
            continue
        notes.append(f"{label}: {len(left)} of {len(names)} tensors start fresh — {_why(left, tensors, own, report)}"
                     f"; the other {len(names) - len(left)} loaded")
    return notes


def _why(left: list[str], tensors: dict, own: dict, report: WeightsReport) -> str:
    """Why ``left`` (fresh names of one part) did not load: the branch's width or output against the model's."""
    reasons = []
    widths = [(tuple(tensors[name].shape), tuple(own[name].shape)) for name in left
              if ".cv3." in name and name.endswith(".conv.weight") and name in tensors]
    for found, built in widths:
        if found[0] != built[0]:
            reasons.append(f"the file's class branch is {found[0]} channels wide, the model's {built[0]} (ultralytics "
                           "sizes it max(channels, min(classes, 100)) for the classes a model is built with)")
            break
    outputs = [(tuple(tensors[name].shape), tuple(own[name].shape)) for name in left
               if ".cv3." in name and name.endswith(".2.weight") and name in tensors]
    for found, built in outputs:
        if found[0] != built[0]:
            reasons.append(f"its last convolution gives {found[0]} outputs, the model's {built[0]}")
            break
    missing = [name for name in left if report.reasons.get(name) == "not in the file"]
    if missing:
        reasons.append(f"{len(missing)} are not in the file (it is built of other layers there)")
    if not reasons:
        first = left[0]
        reasons.append(f"{first}: {report.reasons.get(first, 'shapes differ')}")
    return "; ".join(reasons) + " (weights.json's reasons name each tensor)"


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
