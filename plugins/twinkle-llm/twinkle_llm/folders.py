"""Local Hugging Face model folders (``config.json``, ``*.safetensors`` shards, ``tokenizer.json``): checked before
anything is loaded, never downloaded, never unpickled."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from twinkle_core.errors import TwinkleError

from twinkle_llm.presets import SUPPORTED


class ModelFolderError(TwinkleError):
    """A model folder that cannot be used: missing, without a config or safetensors weights, or of an
    architecture twinkle-llm does not train."""


def read_config(folder: str) -> dict[str, Any]:
    """The folder's ``config.json``, checked: a local folder, a supported ``model_type``, safetensors weights.

    Raises:
        ModelFolderError: naming the folder and what is wrong with it (pickled ``*.bin`` weights are refused by
            name: loading them would run code).
    """
    path = Path(folder).expanduser()
    if not path.is_dir():
        raise ModelFolderError(f"weights '{folder}' is not a local folder; give a Hugging Face model folder "
                               "(config.json, *.safetensors, tokenizer.json) — nothing is downloaded")
    config_file = path / "config.json"
    if not config_file.is_file():
        raise ModelFolderError(f"'{folder}' has no config.json; a Hugging Face model folder holds config.json, "
                               "*.safetensors weights and tokenizer.json")
    try:
        config = json.loads(config_file.read_text())
    except (OSError, ValueError) as err:
        raise ModelFolderError(f"'{config_file}' is not valid JSON: {err}") from err
    model_type = config.get("model_type")
    if model_type not in SUPPORTED:
        raise ModelFolderError(f"'{config_file}' is a {model_type!r} model; twinkle-llm trains "
                               f"{', '.join(sorted(SUPPORTED))}")
    if not any(path.glob("*.safetensors")):
        pickled = sorted(p.name for p in path.glob("*.bin"))
        if pickled:
            raise ModelFolderError(f"'{folder}' holds only pickled weights ({', '.join(pickled[:3])}); they are "
                                   "never unpickled (loading them would run code). Convert them to safetensors "
                                   "(model.save_pretrained(folder, safe_serialization=True)) where you trust them")
        raise ModelFolderError(f"'{folder}' holds no *.safetensors weights")
    return config


def load_folder_model(folder: str | Path, **options: Any) -> Any:
    """``AutoModelForCausalLM.from_pretrained`` of a local folder (local files, safetensors only, ``options``
    passed on), with a folder whose tensors do not fit its ``config.json`` a named error.

    Raises:
        ModelFolderError: not a local folder (nothing is ever downloaded: ``read_config`` checks it first); a weight
            whose shape differs from what the config builds (transformers' "size mismatch"), naming the folder, the
            first tensor and both shapes.
    """
    from transformers import AutoModelForCausalLM

    if not Path(folder).expanduser().is_dir():
        raise ModelFolderError(f"weights '{folder}' is not a local folder; give a Hugging Face model folder — nothing "
                               "is downloaded")

    try:
        return AutoModelForCausalLM.from_pretrained(str(folder), local_files_only=True, use_safetensors=True,
                                                    **options)
    except (RuntimeError, ValueError) as err:
        text = str(err)
        if "size mismatch" not in text and "ignore_mismatched_sizes" not in text:
            raise
        raise ModelFolderError(f"'{folder}': its *.safetensors weights do not fit its config.json "
                               f"({_first_mismatch(Path(folder))}); the two come from different models — put the "
                               "config.json saved with these weights beside them (model.save_pretrained(folder) "
                               "writes both)") from None


def _first_mismatch(folder: Path) -> str:
    """The first tensor whose shape in the folder's safetensors differs from the shape its config builds
    (``"model.layers.0.mlp.gate_proj.weight is [64, 32] in the weights, [128, 32] by the config"``); the config is
    built on the meta device (no memory)."""
    import torch
    from safetensors import safe_open
    from transformers import AutoConfig, AutoModelForCausalLM

    with torch.device("meta"):
        expected = {name: list(t.shape) for name, t in AutoModelForCausalLM.from_config(
            AutoConfig.from_pretrained(str(folder), local_files_only=True)).state_dict().items()}
    for shard in sorted(folder.glob("*.safetensors")):
        with safe_open(str(shard), "pt") as tensors:
            for name in tensors.keys():
                shape = list(tensors.get_slice(name).get_shape())
                if name in expected and expected[name] != shape:
                    return f"{name} is {shape} in {shard.name}, {expected[name]} by config.json"
    return "a tensor's shape differs from what config.json builds"


def tokenizer_file(folder: str) -> Path:
    """The folder's ``tokenizer.json``.

    Raises:
        ModelFolderError: the folder has none (only a fast tokenizer's JSON is read: nothing executed).
    """
    found = Path(folder).expanduser() / "tokenizer.json"
    if not found.is_file():
        raise ModelFolderError(f"'{folder}' has no tokenizer.json; save the model's fast tokenizer there "
                               "(tokenizer.save_pretrained(folder))")
    return found


def read_adapter(location: str) -> tuple[Path, dict[str, Any]]:
    """A peft LoRA adapter folder — a Tinker checkpoint (``twinkle://USER/tinker/RUN/tinker/weights/NAME``), a
    ``peft`` export, or any ``save_pretrained`` of a peft model — and its ``adapter_config.json``, checked before
    anything is loaded.

    Raises:
        ModelFolderError: not a local folder (after mapping ``twinkle://``), no or unreadable
            ``adapter_config.json``, not a LoRA adapter, or no ``adapter_model.safetensors`` (a pickled
            ``adapter_model.bin`` is refused by name: loading it would run code).
    """
    from twinkle_core.data import filesystem, is_local

    fs, path = filesystem(location)
    folder = Path(path).expanduser()
    if not is_local(fs) or not folder.is_dir():
        raise ModelFolderError(f"adapter '{location}' is not a local folder; give a peft adapter folder "
                               "(adapter_config.json, adapter_model.safetensors): a Tinker checkpoint or a peft export")
    config_file = folder / "adapter_config.json"
    try:
        config = json.loads(config_file.read_text())
    except (OSError, ValueError) as err:
        raise ModelFolderError(f"adapter '{location}': {config_file.name} is missing or not JSON ({err}); a peft "
                               "adapter folder holds adapter_config.json and adapter_model.safetensors") from None
    if config.get("peft_type") != "LORA":
        raise ModelFolderError(f"adapter '{location}' is a {config.get('peft_type')!r} adapter; twinkle-llm "
                               "continues LoRA adapters")
    if not (folder / "adapter_model.safetensors").is_file():
        found = " (it holds adapter_model.bin, which is never unpickled: loading it would run code)" if (
            folder / "adapter_model.bin").exists() else ""
        raise ModelFolderError(f"adapter '{location}' has no adapter_model.safetensors{found}")
    return folder, config
