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
