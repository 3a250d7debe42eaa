"""The documentation site: it builds with ``mkdocs build --strict``, its API pages are what the code says, every
code block of every page runs, and its pages render in headless chromium (screenshots kept as CI artefacts).

How a page's blocks run: in order, in a process and a fresh folder of their own (``TWINKLE_HOME`` and
``TWINKLE_USER`` set there). The page's ``python`` blocks share one interpreter, as a reader pasting them one after
another would; a ``bash`` block runs at its place with ``.venv/bin`` first on ``PATH``, stopping at the first command
that fails (``set -eo pipefail``: every command of it must succeed), and a ``pip install`` in it
(the plugin tutorial's ``pip install -e ./twinkle-acme``) goes into a folder of the page's own that every Python the
page starts sees (``page_environment``), never into the venv. A page whose blocks define
pytest tests (``def test_...``) is run by pytest, so its tests run too. A block that cannot run here says why
on the line above it, as ``<!-- not run: REASON -->``. Blocks in other languages (``text``, ``toml``, ...) are
shown, not run.
"""

from __future__ import annotations

import functools
import os
import re
import shutil
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from twinkle_core.testing import once, run_script, warm_commands

ROOT = Path(__file__).resolve().parents[1]
DOCS = ROOT / "docs"
ARTEFACTS = ROOT / "artifacts"
CHROMIUM = shutil.which("chromium") or "/usr/bin/chromium"
RUN_LANGUAGES = {"python", "bash"}
_FENCE = re.compile(r"(?:^<!-- not run: (?P<why>.*?) -->\n)?^```(?P<lang>[\w-]*)[^\n]*\n(?P<code>.*?)^```\s*$",
                    re.M | re.S)


def blocks(page: Path) -> list[tuple[str, str, str | None]]:
    """``(language, code, reason it is not run)`` of every fenced block of ``page``, in order."""
    return [(m["lang"], m["code"], m["why"]) for m in _FENCE.finditer(page.read_text())]


def pages() -> list[Path]:
    """Every page of the site."""
    return sorted(DOCS.rglob("*.md"))


def page_script(page: Path) -> str:
    """One Python script that runs the page's code blocks in order (bash blocks through ``subprocess``)."""
    parts = ["import subprocess as _subprocess", ""]
    for lang, code, why in blocks(page):
        if why is not None or lang not in RUN_LANGUAGES:
            continue
        if lang == "python":
            parts.append(code)
        else:  # every command must succeed, not only the block's last
            strict = "set -eo pipefail\n" + code
            parts.append(f"_subprocess.run({strict!r}, shell=True, check=True, executable='/bin/bash')")
    return "\n".join(parts)


def _runnable(page: Path) -> bool:
    return any(lang in RUN_LANGUAGES and why is None for lang, _, why in blocks(page))


def build_site(folder: Path) -> None:
    """``mkdocs build --strict`` into ``folder/site``."""
    proc = subprocess.run([str(Path(sys.executable).with_name("mkdocs")), "build", "--strict", "--site-dir",
                           str(folder / "site")], cwd=ROOT, capture_output=True, text=True,
                          env={**os.environ, "NO_MKDOCS_2_WARNING": "1"})
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-6000:]


@pytest.fixture(scope="session")
def site(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The built site: built once per session, whichever worker asks first (the others wait for it)."""
    return once(tmp_path_factory, "docs-site", build_site) / "site"


def test_the_site_builds_strictly_with_every_page_in_its_nav(site: Path) -> None:
    nav = (ROOT / "mkdocs.yml").read_text()
    for page in pages():
        relative = page.relative_to(DOCS).as_posix()
        assert relative in nav, f"{relative} is not in mkdocs.yml's nav"
        folder = relative.removesuffix(".md").removesuffix("index")
        assert (site / folder / "index.html").exists(), f"{relative} was not built"


def test_the_api_reference_pages_are_fresh() -> None:
    proc = subprocess.run([sys.executable, str(ROOT / "tools" / "api_reference.py"), "--check"], capture_output=True,
                          text=True)
    assert proc.returncode == 0, proc.stderr


def test_the_plugin_contract_is_the_allow_list_of_public_modules() -> None:
    """import-linter's plugin contract forbids every twinkle_core module but the public ones (the API reference's
    list): a new core module is private to plugins until it is made public, never public by default."""
    proc = subprocess.run([sys.executable, str(ROOT / "tools" / "plugin_contract.py"), "--check"],
                          capture_output=True, text=True)
    assert proc.returncode == 0, proc.stderr
    text = (ROOT / "pyproject.toml").read_text()
    for module in ("twinkle_core.session", "twinkle_core.serve", "twinkle_core.planning.plan", "twinkle_core.jobs"):
        assert f'    "{module}",' in text  # private, and named in the contract's deny-list
    for module in ("twinkle_core.types", "twinkle_core.pretrained", "twinkle_core.lowlevel", "twinkle_core.doctor"):
        assert f'    "{module}",' not in text  # public: the plugins' own imports of them are allowed


def test_the_api_reference_documents_every_public_name(site: Path) -> None:
    import twinkle_core

    html = (site / "reference" / "python-api" / "index.html").read_text()
    for name in ("Trainer", "Algorithm", "DataProcessor", "RunStore", "IncompatiblePluginError", "assert_plugin_contract"):
        assert re.search(rf'id="[\w.]*\b{name}"', html), f"{name} has no entry in the Python API page"
    assert "Resolve the algorithm and task and check every hyperparameter name and type now." in html  # a docstring
    assert twinkle_core.Trainer.export.__doc__.splitlines()[0].strip() in html


def test_the_cli_reference_lists_every_command(site: Path) -> None:
    import click

    from twinkle_core.cli import main

    html = (site / "reference" / "cli" / "index.html").read_text()
    ctx = click.Context(main)
    for name in main.list_commands(ctx):
        assert f"twinkle {name}" in html, f"'twinkle {name}' is missing from the CLI reference"
    assert "--data" in html and "Show this message and exit." not in html.split("twinkle train", 1)[0][:10]


def test_every_block_runs_or_says_why_not() -> None:
    for page in pages():
        for lang, code, why in blocks(page):
            assert why is None or why.strip(), f"{page.name}: an empty 'not run' reason"
            assert lang, f"{page.relative_to(DOCS)}: a code block without a language:\n{code[:200]}"


PROCESS_PAGES = {"scaling.md": "DDP on two processes, a supervised job, Ray workers"}
"""Pages whose code starts several busy processes (they run in the ``processes`` group), and what they start."""


def _page_param(page: Path) -> object:
    name = page.relative_to(DOCS).as_posix()
    return pytest.param(page, id=name, marks=[pytest.mark.processes] if name in PROCESS_PAGES else [])


PRELOAD = ["twinkle_core.cli"]
"""What a page's interpreter has imported before the page starts, besides the Trainer and Lightning: a page runs
in a process of its own forked from a template that imported them once (``twinkle_core.testing.run_script``), not in
a fresh ``python`` — importing Lightning takes 5-10 s of CPU, most of a short page's time."""


def page_environment(folder: Path, commands: Path | None = None) -> dict[str, str]:
    """The environment a page runs in, inside ``folder``: its own run store and user, ``commands`` (the warm
    stand-ins of ``twinkle_core.testing.warm_commands``, if given) then ``.venv/bin`` first on ``PATH``, and ``pip install`` going to ``folder/site`` — without dependencies (the venv has them), without
    build isolation and without an index (nothing is downloaded) — which a ``sitecustomize`` on ``PYTHONPATH``
    adds to every Python the page starts as a site folder (so an editable install's ``.pth`` hook runs too)."""
    site, hook = folder / "site", folder / "site-hook"
    site.mkdir(parents=True, exist_ok=True)
    hook.mkdir(exist_ok=True)
    (hook / "sitecustomize.py").write_text(f"import site\nsite.addsitedir({str(site)!r})\n")
    bin_dirs = [str(commands)] if commands is not None else []
    bin_dirs.append(str(Path(sys.executable).parent))
    env = {**os.environ, "TWINKLE_HOME": str(folder / "home"), "TWINKLE_USER": "me", "PYTHONWARNINGS": "ignore",
           "PATH": os.pathsep.join([*bin_dirs, os.environ.get("PATH", "")]),
           # pip reads PIP_NO_BUILD_ISOLATION=0 as --no-build-isolation (its environment quirk for no- options)
           "PIP_TARGET": str(site), "PIP_NO_DEPS": "1", "PIP_NO_BUILD_ISOLATION": "0", "PIP_NO_INDEX": "1",
           "PIP_DISABLE_PIP_VERSION_CHECK": "1",
           "PYTHONPATH": os.pathsep.join(p for p in (str(hook), os.environ.get("PYTHONPATH", "")) if p)}
    env.pop("TWINKLE_SERVER", None)
    return env


@pytest.mark.slow
@pytest.mark.parametrize("page", [_page_param(p) for p in pages() if _runnable(p)])
def test_the_pages_code_runs(page: Path, tmp_path: Path) -> None:
    script = tmp_path / "page.py"
    script.write_text(page_script(page))
    if re.search(r"^def test_", script.read_text(), flags=re.M):
        script = script.rename(tmp_path / "test_page.py")
        argv = ["-m", "pytest", "-q", "-p", "no:cacheprovider", str(script)]
    else:
        argv = [str(script)]
    with warm_commands(preload=PRELOAD) as commands:  # the page's `twinkle ...` lines skip Lightning's import too
        done = run_script(argv, cwd=tmp_path, env=page_environment(tmp_path, commands), timeout=1200,
                          preload=PRELOAD)
    assert done.returncode == 0, f"{page.name}:\n{done.stdout[-3000:]}\n{done.stderr[-5000:]}"


@pytest.mark.not_isolated("keeps its screenshots in artifacts/ for CI (one file name per page)")
def test_the_home_page_and_an_api_page_render_in_chromium(site: Path) -> None:
    """Served on 127.0.0.1 and opened in Debian's chromium; the screenshots are saved under ``artifacts/``."""
    import http.server
    import threading

    from playwright.sync_api import sync_playwright

    assert os.path.exists(CHROMIUM), "this test needs Debian's chromium: make system (apt-get install chromium)"
    handler = functools.partial(http.server.SimpleHTTPRequestHandler, directory=str(site))
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), handler)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    ARTEFACTS.mkdir(exist_ok=True)
    base = f"http://127.0.0.1:{server.server_address[1]}"
    try:
        with sync_playwright() as playwright:
            browser = playwright.chromium.launch(executable_path=CHROMIUM, headless=True,
                                                 args=["--no-sandbox", "--disable-gpu"])
            page = browser.new_page(viewport={"width": 1280, "height": 900})
            for path, shot, expect in (("/", "docs-home.png", "Training as a service for PyTorch"),
                                       ("/reference/python-api/", "docs-python-api.png", "Trainer")):
                page.goto(base + path)
                page.wait_for_load_state("networkidle")
                assert expect in page.inner_text("article")
                assert page.locator(".md-nav").count() > 0  # the Material theme's navigation rendered
                page.screenshot(path=str(ARTEFACTS / shot))
                assert (ARTEFACTS / shot).stat().st_size > 20_000
            browser.close()
    finally:
        server.shutdown()


def test_a_page_script_keeps_order_and_skips_marked_blocks(tmp_path: Path) -> None:
    page = tmp_path / "p.md"
    page.write_text(textwrap.dedent('''\
        ```python
        x = 1
        ```
        <!-- not run: needs a GPU -->
        ```python
        x = 2
        ```
        ```bash
        echo hi
        ```
        ```text
        output
        ```
    '''))
    assert [(lang, why) for lang, _, why in blocks(page)] == [("python", None), ("python", "needs a GPU"),
                                                             ("bash", None), ("text", None)]
    script = page_script(page)
    assert "x = 1" in script and "x = 2" not in script and "output" not in script
    assert "'set -eo pipefail\\necho hi\\n'" in script  # a failing command stops the block and fails the page
