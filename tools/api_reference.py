"""Write the site's API reference pages (``docs/reference/*-api.md``) from the code: one mkdocstrings entry per
public name, under the module that defines it.

Core's public names are each public module's ``__all__``; a plugin's are the components it registers and the
modules its guides use (``PLUGIN_OBJECTS``). ``tests/test_docs_site.py`` fails when a page differs from what this
writes, so a new public name cannot be left out: run ``python tools/api_reference.py`` and commit the pages.
"""

from __future__ import annotations

import importlib
import re
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
CORE_MODULES = {
    "twinkle_core": "The facade and the names most plugins need",
    "twinkle_core.data": "Writing a data processor",
    "twinkle_core.planning": "Resource strategies and their deciders",
    "twinkle_core.exporting": "Writing an exporter",
    "twinkle_core.tasks": "Tasks",
    "twinkle_core.types": "Hyperparameter types with their ranges",
    "twinkle_core.errors": "Errors (every one a TwinkleError)",
    "twinkle_core.testing": "Testing a plugin",
    "twinkle_core.hookspecs": "Hooks",
    "twinkle_core.lowlevel": "Writing a training backend (the Tinker API)",
    "twinkle_core.pretrained": "Loading pretrained weights (weights=)",
    "twinkle_core.doctor": "What twinkle doctor checks",
    "twinkle_core.rewards": "Rewards for reinforcement learning",
    "twinkle_core.tracking": "Experiment trackers (report_to)",
    "twinkle_core.client": "The service's Python client",
}
PLUGIN_OBJECTS = {
    "twinkle-vision": [
        "twinkle_vision.classification.TimmClassifier", "twinkle_vision.classification.ResNet50",
        "twinkle_vision.images.ImageFolderProcessor", "twinkle_vision.yolo.data.YoloDataProcessor",
        "twinkle_vision.yolo.strategy.DetectionStrategy", "twinkle_vision.samples",
    ],
    "twinkle-timeseries": [
        "twinkle_timeseries.data.FinancialDataProcessor", "twinkle_timeseries.kronos.model.KronosModel",
        "twinkle_timeseries.kronos.frames.plot_forecast", "twinkle_timeseries.kronos.released.save_released",
    ],
    "twinkle-audio": [
        "twinkle_audio.melotts.MelOTTS", "twinkle_audio.melotts.MelOTTSBase",
        "twinkle_audio.speech_data.SpeechDataProcessor", "twinkle_audio.quality", "twinkle_audio.probe.QualityProbe",
        "twinkle_audio.samples",
    ],
    "twinkle-edge": [
        "twinkle_edge.optimizer.EdgeOptimizer", "twinkle_edge.report.EdgeReport",
        "twinkle_edge.exporters.RKNNExporter", "twinkle_edge.exporters.ONNXInt8Exporter",
    ],
    "twinkle-llm": [
        "twinkle_llm.model.CausalLM", "twinkle_llm.data.TextProcessor", "twinkle_llm.data.ChatProcessor",
        "twinkle_llm.data.PreferenceProcessor", "twinkle_llm.preference",
        "twinkle_llm.chat.ChatTemplate", "twinkle_llm.chat.ChatTemplateError", "twinkle_llm.tokenizing.TextTokenizer",
        "twinkle_llm.exporting.HuggingFaceExporter", "twinkle_llm.exporting.PeftExporter",
        "twinkle_llm.folders.ModelFolderError", "twinkle_llm.baselines", "twinkle_llm.samples", "twinkle_llm.rewards",
        "twinkle_llm.rl", "twinkle_llm.data.PromptProcessor",
    ],
}


def _defining_path(module_name: str, name: str) -> str | None:
    """``package.module.Name`` where ``name`` (exported by ``module_name``) is defined; ``None`` for plain values."""
    obj = getattr(importlib.import_module(module_name), name)
    home = getattr(obj, "__module__", None)
    if home is None or not (callable(obj) or isinstance(obj, type)):
        return None
    if name not in vars(importlib.import_module(home)):
        return f"{module_name}.{name}"
    return f"{home}.{name}"


def core_page() -> str:
    """The core API page: every public module's ``__all__``."""
    lines = ["# Python API: twinkle-core", "",
             "Every name a plugin or a user may import from `twinkle-core`, with its docstring and signature, generated",
             "from the code (`tools/api_reference.py`). The tables of [the public plugin API](../plugins/api.md) say",
             "the same in one line each.", ""]
    for module_name, title in CORE_MODULES.items():
        module = importlib.import_module(module_name)
        lines += [f"## `{module_name}` — {title}", ""]
        if not hasattr(module, "__all__"):  # documented whole
            lines += [f"::: {module_name}", "    options:", "      show_root_heading: false", "      heading_level: 3", ""]
            continue
        values = []
        for name in sorted(module.__all__, key=str.lower):
            path = _defining_path(module_name, name)
            if path is None:
                values.append(name)
                continue
            lines += [f"::: {path}", "    options:", "      heading_level: 3", ""]
        if values:
            lines += ["Values: " + ", ".join(f"`{v}`" for v in values) + ".", ""]
    return "\n".join(lines)


def plugins_page() -> str:
    """The plugins' API page: their components and the modules their guides use."""
    lines = ["# Python API: the plugins", "",
             "What each of Twinkle's plugins offers beyond its registered names, generated from the code",
             "(`tools/api_reference.py`).", ""]
    for distribution, paths in PLUGIN_OBJECTS.items():
        lines += [f"## {distribution}", ""]
        for path in paths:
            lines += [f"::: {path}", "    options:", "      heading_level: 3", ""]
    return "\n".join(lines)


PAGES = {"docs/reference/python-api.md": core_page, "docs/reference/plugins-api.md": plugins_page}


SPHINX_ROLE = re.compile(r":(?:py:)?(?:class|func|meth|mod|data|attr|exc|obj|ref|const):`[^`]*`")
"""A Sphinx role (``:class:`Name```): reST, which the Markdown site shows as typed. Docstrings name code in
backticks instead."""
RST_LITERAL = re.compile(r"^(?!\s*#).*\S::\s*$")
"""A reST literal-block marker (a line ending in ``::``, then an indented block): the Markdown site shows the
``::``. Docstrings end the line with one colon and fence the block (three backticks and a language)."""


def sphinx_roles() -> list[str]:
    """``file:line: text`` of every Sphinx role and reST literal-block marker in core's and the plugins' code
    (what the pages would show raw)."""
    packages = [ROOT / "twinkle_core", *sorted((ROOT / "plugins").glob("*/twinkle_*"))]
    return [f"{path.relative_to(ROOT)}:{number}: {match.group(0).strip()}"
            for package in packages for path in sorted(package.rglob("*.py"))
            for number, line in enumerate(path.read_text().splitlines(), 1)
            for match in [*SPHINX_ROLE.finditer(line), *RST_LITERAL.finditer(line)]]


def main() -> int:
    """Write (or with ``--check``, compare) the pages; either way, refuse docstrings with reST markup."""
    roles = sphinx_roles()
    if roles:
        print("reST renders raw on the Markdown site: write ``Name`` instead of a Sphinx role, and end a line with "
              "one colon before a fenced block instead of '::':\n" + "\n".join(roles), file=sys.stderr)
        return 1
    stale = []
    for relative, make in PAGES.items():
        path, text = ROOT / relative, make()
        if "--check" in sys.argv:
            if not path.exists() or path.read_text() != text:
                stale.append(relative)
        else:
            path.write_text(text)
    if stale:
        print(f"stale: {', '.join(stale)}; run python tools/api_reference.py", file=sys.stderr)
    return 1 if stale else 0


if __name__ == "__main__":
    sys.exit(main())
