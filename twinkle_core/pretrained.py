"""Pretrained weights: read from any URI in the formats released models come in, loaded name by name, reported.

``read_weights(uri)`` reads:

* a ``.safetensors`` file, or a folder of shards with its ``*.safetensors.index.json`` (as transformers and timm
  write them);
* a Hugging Face–style folder (``config.json`` beside its weights: safetensors first, else a PyTorch file); the
  config comes back with the tensors;
* a PyTorch file (``.pt``, ``.pth``, ``.bin``, ``.ckpt``) read with ``torch.load(weights_only=True)``: tensors and
  plain data only. A file that pickles anything else is refused by the name of what it pickles — unless that
  name is in ``allow``, a plugin's explicit list of classes its released files need (torch's ``safe_globals``);
  ``weights_only`` is never turned off, so nothing a file names outside that list is ever imported or run.

``load_weights(module, uri)`` then matches the file's tensors to the module's names and shapes: ``rename`` maps
the file's names to the module's, names under ``fresh`` (a new classifier head for new classes) may keep their new
initialisation when their shapes differ, and anything else that does not fit is a ``WeightsMismatchError`` listing
the first differences. The ``WeightsReport`` says, name by name, what matched, what was renamed, what was left
fresh and what was ignored; the engine stores it with the run (``weights.json``).
"""

from __future__ import annotations

import io
import json
import pickle
import posixpath
import zipfile
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import asdict, dataclass, field
from typing import Any

import torch
from torch import nn

from twinkle_core.errors import TwinkleError
from twinkle_core.uris import filesystem, require_exists

TORCH_SUFFIXES = (".pt", ".pth", ".bin", ".ckpt")
"""File endings read as PyTorch files (``torch.load(weights_only=True)``)."""

STATE_KEYS = ("state_dict", "model_state_dict", "model", "module", "net")
"""Keys under which PyTorch files commonly nest their state dict (Lightning's ``state_dict`` first)."""


class WeightsError(TwinkleError):
    """Weights that cannot be read: missing, corrupt, or in no format Twinkle reads."""


class UnsafeWeightsError(WeightsError):
    """A PyTorch file whose loading would import or run something beyond tensors and plain data."""


class WeightsMismatchError(WeightsError):
    """Weights that do not fit the model beyond a new head: names or shapes differ."""


@dataclass
class Weights:
    """What ``read_weights`` found.

    Attributes:
        tensors: the state dict (names → tensors; a PyTorch file's nested state dict flattened out).
        format: ``safetensors``, ``safetensors-sharded``, ``hf-folder`` or ``torch`` (a plugin reading a format of
            its own names it: ``ultralytics``, ``twinkle-checkpoint``).
        config: the folder's ``config.json`` (``{}`` without one).
        source: the URI read.
        extra: a PyTorch file's other top-level entries (plain data; objects only where ``allow`` admitted them).
    """

    tensors: dict[str, torch.Tensor]
    format: str
    config: dict[str, Any]
    source: str
    extra: dict[str, Any] = field(default_factory=dict)


@dataclass
class WeightsReport:
    """How a file's weights went into a model, name by name.

    Attributes:
        source: the URI read; format: as ``Weights.format``.
        matched: model names loaded from the file under the same name.
        renamed: model name → the file's name it was loaded from.
        fresh: model names left as initialised (under ``fresh``, shapes differ: e.g. a head for new classes).
        ignored: the file's names the model has no use for.
        notes: what else the loader did (class names taken, statistics read from the config, which parts loaded).
        reasons: each fresh name → why it starts fresh (``the file's shape (80, 64, 3, 3), the model's (64, 64, 3,
            3)``, ``not in the file``).
    """

    source: str
    format: str
    matched: list[str] = field(default_factory=list)
    renamed: dict[str, str] = field(default_factory=dict)
    fresh: list[str] = field(default_factory=list)
    ignored: list[str] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)
    reasons: dict[str, str] = field(default_factory=dict)

    @property
    def loaded(self) -> int:
        """How many of the model's tensors came from the file."""
        return len(self.matched) + len(self.renamed)

    def summary(self) -> str:
        """One line: counts of each kind, and the fresh names."""
        fresh = f" ({', '.join(self.fresh[:4])}{', ...' if len(self.fresh) > 4 else ''})" if self.fresh else ""
        return (f"weights {self.source} ({self.format}): {len(self.matched)} matched, {len(self.renamed)} renamed, "
                f"{len(self.fresh)} fresh{fresh}, {len(self.ignored)} ignored")

    def to_dict(self) -> dict[str, Any]:
        """JSON-ready, with ``summary``."""
        return {**asdict(self), "summary": self.summary()}


# ------------------------------------------------------------------------------------------------ reading
def read_weights(uri: str, *, allow: Iterable[Any] = (), what: str = "weights") -> Weights:
    """Read the weights at ``uri`` (see the module docstring for the formats).

    Args:
        uri: a file or folder at any URI (``twinkle://`` and ``nas://`` too).
        allow: classes (or functions) a PyTorch file may name besides tensors and plain data — a plugin's list
            for its released files (``torch.serialization.safe_globals``).
        what: what the file is, for messages (``weights``, ``tokenizer weights``, ...).

    Raises:
        twinkle_core.uris.DataNotFoundError: nothing at ``uri``. UnsafeWeightsError: a PyTorch file naming a
        class or function outside ``allow`` (nothing ran). WeightsError: corrupt, or no weights in a known format.
    """
    fs, path = require_exists(uri, what)
    if fs.isdir(path):
        return _read_folder(uri, fs, path, allow, what)
    name = posixpath.basename(path)
    if name.endswith(".safetensors"):
        return Weights(_safetensors(fs.cat_file(path), uri, what), "safetensors", {}, uri)
    if name.endswith(".safetensors.index.json"):
        return _read_sharded(uri, fs, path, what, {})
    if name.endswith(TORCH_SUFFIXES):
        return _torch_weights(fs.cat_file(path), uri, allow, what, {})
    raise WeightsError(f"{what} '{uri}': unknown format; give a .safetensors file, a folder with config.json and "
                       f"its weights, or a PyTorch file ({', '.join(TORCH_SUFFIXES)})")


def _read_folder(uri: str, fs: Any, path: str, allow: Iterable[Any], what: str) -> Weights:
    config = read_config(uri, what)
    names = sorted(posixpath.basename(p) for p in fs.ls(path, detail=False))
    index = [n for n in names if n.endswith(".safetensors.index.json")]
    single = [n for n in names if n.endswith(".safetensors")]
    pickled = [n for n in names if n.endswith(TORCH_SUFFIXES)]
    if index:
        found = _read_sharded(uri, fs, posixpath.join(path, index[0]), what, config)
    elif single:
        preferred = "model.safetensors" if "model.safetensors" in single else single[0]
        if len(single) > 1 and preferred != "model.safetensors":
            raise WeightsError(f"{what} '{uri}' holds several .safetensors files ({', '.join(single[:4])}) and no "
                               "index; give the file itself")
        found = Weights(_safetensors(fs.cat_file(posixpath.join(path, preferred)), uri, what), "safetensors", config,
                        uri)
    elif pickled:
        found = _torch_weights(fs.cat_file(posixpath.join(path, pickled[0])), uri, allow, what, config)
    else:
        raise WeightsError(f"{what} '{uri}' holds no weights (*.safetensors, or a PyTorch file: "
                           f"{', '.join(TORCH_SUFFIXES)})")
    if config:
        found.format = "hf-folder" if found.format != "safetensors-sharded" else found.format
    return found


def _read_sharded(uri: str, fs: Any, index_path: str, what: str, config: dict[str, Any]) -> Weights:
    try:
        index = json.loads(fs.cat_file(index_path))
        files = sorted(set(index["weight_map"].values()))
    except (ValueError, KeyError, AttributeError) as err:
        raise WeightsError(f"{what} '{uri}': {posixpath.basename(index_path)} is not a shard index ({err})") from None
    folder = posixpath.dirname(index_path)
    tensors: dict[str, torch.Tensor] = {}
    for name in files:
        if "/" in name or name.startswith("."):
            raise WeightsError(f"{what} '{uri}': the index names '{name}', outside its folder")
        tensors.update(_safetensors(fs.cat_file(posixpath.join(folder, name)), f"{uri}/{name}", what))
    missing = sorted(set(index["weight_map"]) - set(tensors))
    if missing:
        raise WeightsError(f"{what} '{uri}': the index lists tensors no shard holds: {', '.join(missing[:3])}")
    return Weights(tensors, "safetensors-sharded", config, uri)


def _safetensors(data: bytes, uri: str, what: str) -> dict[str, torch.Tensor]:
    from safetensors.torch import load

    try:
        return dict(load(data))
    except Exception as err:  # safetensors raises its own SafetensorError for a bad header
        raise WeightsError(f"{what} '{uri}' is not a readable safetensors file ({err})") from None


def torch_load(data: bytes, uri: str, *, allow: Iterable[Any] = (), what: str = "weights") -> Any:
    """``torch.load(weights_only=True)`` of ``data`` on the CPU, with ``allow``'s classes admitted.

    Raises:
        UnsafeWeightsError: the file names something beyond tensors, plain data and ``allow`` (its name is in the
            message; nothing was imported or run). WeightsError: corrupt or not a PyTorch file.
    """
    try:
        with torch.serialization.safe_globals(list(allow)):
            return torch.load(io.BytesIO(data), map_location="cpu", weights_only=True)
    except pickle.UnpicklingError as err:
        if "weights_only" in str(err) or "Weights only load failed" in str(err):
            named = _unsupported_global(str(err)) or "objects beyond tensors and plain data"
            raise UnsafeWeightsError(
                f"{what} '{uri}' would run code when loaded (it pickles {named}), so Twinkle refuses it and nothing "
                "ran; re-save only the state_dict and plain values"
            ) from None
        raise WeightsError(f"{what} '{uri}' is corrupt ({err}); use another file") from None
    except (RuntimeError, EOFError, zipfile.BadZipFile, ValueError, OSError) as err:
        raise WeightsError(f"{what} '{uri}' is corrupt or not a PyTorch file ({type(err).__name__}: {err}); use "
                           "another file") from None


def _unsupported_global(message: str) -> str | None:
    """The class or function torch's weights-only unpickler refused (from its message), if it says."""
    for marker in ("Unsupported global: GLOBAL ", "Unsupported operand ", "unsupported GLOBAL "):
        if marker in message:
            return message.split(marker, 1)[1].split()[0].strip(".,'\"")
    return None


def _torch_weights(data: bytes, uri: str, allow: Iterable[Any], what: str, config: dict[str, Any]) -> Weights:
    loaded = torch_load(data, uri, allow=allow, what=what)
    tensors, extra = state_of(loaded)
    if not tensors:
        raise WeightsError(f"{what} '{uri}' holds no tensors (top-level keys: "
                           f"{', '.join(map(str, list(extra)[:6])) or 'none'})")
    return Weights(tensors, "torch", config, uri, extra)


def state_of(loaded: Any) -> tuple[dict[str, torch.Tensor], dict[str, Any]]:
    """The state dict inside a loaded PyTorch file — the file itself, its ``state_dict`` (Lightning), ``model``,
    ``module``, ... entry, or a module's ``state_dict()`` — and its other top-level entries."""
    if isinstance(loaded, nn.Module):
        return dict(loaded.state_dict()), {}
    if not isinstance(loaded, Mapping):
        return {}, {}
    if loaded and all(isinstance(v, torch.Tensor) for v in loaded.values()):
        return dict(loaded), {}
    for key in STATE_KEYS:
        inner = loaded.get(key)
        if isinstance(inner, nn.Module):
            inner = inner.state_dict()
        if isinstance(inner, Mapping) and inner and all(isinstance(v, torch.Tensor) for v in inner.values()):
            return dict(inner), {k: v for k, v in loaded.items() if k != key}
    return {}, dict(loaded)


# ------------------------------------------------------------------------------------------------ matching
def load_weights(module: nn.Module, source: str | Weights, *, rename: Callable[[str], str | None] | None = None,
                 fresh: Sequence[str] = (), partial: bool = False, allow: Iterable[Any] = (),
                 what: str = "weights") -> WeightsReport:
    """Load ``source``'s tensors into ``module`` name by name and report it.

    Args:
        module: the model, built (its names and shapes are the target).
        source: a URI (read with ``read_weights``) or what ``read_weights`` returned.
        rename: the file's name → the module's name (``None``: not for this module, reported as ignored);
            default: unchanged.
        fresh: module-name prefixes that may stay as initialised where the file's shapes differ or the file
            lacks them (a classifier head for new classes, a new input stem).
        partial: every module tensor the file lacks or has in another shape stays as initialised (reported as
            fresh) — for a related architecture that agrees only in parts; at least one tensor must load.
        allow: as ``read_weights``'s.

    Raises:
        WeightsMismatchError: a module tensor outside ``fresh`` that the file lacks or has in another shape,
            listing the first differences and what matched.
    """
    weights = source if isinstance(source, Weights) else read_weights(source, allow=allow, what=what)
    own = module.state_dict()
    report = WeightsReport(weights.source, weights.format)
    taken: dict[str, torch.Tensor] = {}
    differ: list[str] = []
    reshaped: set[str] = set()
    shapes: dict[str, str] = {}  # module name → why the file's tensor for it did not fit
    for name, tensor in weights.tensors.items():
        target = rename(name) if rename is not None else name
        if target is None or target not in own:
            report.ignored.append(name)
            continue
        if tuple(tensor.shape) != tuple(own[target].shape):
            if partial or _under(target, fresh):
                report.ignored.append(name)
                shapes[target] = (f"the file's {'' if target == name else repr(name) + ' '}shape "
                                  f"{tuple(tensor.shape)}, the model's {tuple(own[target].shape)}")
                continue
            differ.append(f"{target}: file {tuple(tensor.shape)}, model {tuple(own[target].shape)}")
            reshaped.add(target)
            continue
        taken[target] = tensor
        if target == name:
            report.matched.append(target)
        else:
            report.renamed[target] = name
    lacking = [name for name in own if name not in taken and name not in reshaped and not _buffer_bookkeeping(name)]
    report.fresh = [name for name in own if name not in taken and (partial or _under(name, fresh))]
    report.reasons = {name: shapes.get(name, "not in the file") for name in report.fresh}
    differ += [f"{name}: not in the file" for name in lacking if not (partial or _under(name, fresh))]
    if partial and not taken:
        differ.append(f"none of its {len(weights.tensors)} tensors has a counterpart")
    if differ:
        raise WeightsMismatchError(
            f"{what} '{weights.source}' do not fit {type(module).__name__}: {len(differ)} differences beyond a new "
            f"head, first: {'; '.join(differ[:5])} ({report.loaded} of {len(own)} tensors fit; "
            f"{len(report.ignored)} of the file's unused); give weights of the same architecture")
    with torch.no_grad():
        for name, tensor in taken.items():
            own[name].copy_(tensor.to(own[name].dtype))
    return report


def _under(name: str, prefixes: Sequence[str]) -> bool:
    return any(name == p or name.startswith(p.rstrip(".") + ".") for p in prefixes)


def _buffer_bookkeeping(name: str) -> bool:
    """Buffers a model keeps for itself that a released file may omit (BatchNorm's batch counter)."""
    return name.endswith("num_batches_tracked")


def read_config(uri: str, what: str = "weights") -> dict[str, Any]:
    """A weights folder's ``config.json`` (``{}`` for a file, or a folder without one).

    Raises:
        WeightsError: the config is not JSON.
    """
    fs, path = filesystem(uri)
    config = posixpath.join(path, "config.json")
    if not fs.isdir(path) or not fs.exists(config):
        return {}
    try:
        return json.loads(fs.cat_file(config))
    except ValueError as err:
        raise WeightsError(f"{what} '{uri}': config.json is not JSON ({err})") from None


__all__ = ["TORCH_SUFFIXES", "STATE_KEYS", "UnsafeWeightsError", "Weights", "WeightsError", "WeightsMismatchError",
           "WeightsReport", "load_weights", "read_config", "read_weights", "state_of", "torch_load"]
