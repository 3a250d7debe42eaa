"""Replace pure-Python wheels by platform wheels of the same release where a configured source has one.

Some packages publish a release twice: a pure ``py3-none-any`` wheel that needs a system library, and a platform
wheel that bundles it — ``soundfile`` 0.14.0 is both ``py2.py3-none-any`` (needs the system's libsndfile) and
``py2.py3-none-manylinux_2_28_x86_64`` (bundles it). Within one index uv picks the platform wheel; but where the
two wheels sit on *different* configured sources (an extra index and a mirror, say), uv takes the release from the
first source that has it, whatever its tags. A machine without the system library then fails at import:
transformers imports soundfile, so every language model would fail to load.

This looks at every distribution installed in a venv whose wheel was pure, and at the indexes and find-links pip is
configured with (``tools/uv_sources.py``: the same sources ``make`` installs from: extra indexes, find-links, and the
index itself when it is not PyPI). Where one of them has a wheel of the *same version* whose tags this interpreter
supports and that is not pure, that wheel replaces the pure one (``uv pip install --no-deps --reinstall``). PyPI is
not read: within one index uv already prefers the platform wheel. An index that does not answer is asked once and
then left alone. Run with an interpreter of the venv's build (``make`` and the journeys use the same Python).

    python tools/platform_wheels.py --python .venv/bin/python [--uv .venv/bin/uv] [--dry-run]
"""

from __future__ import annotations

import argparse
import html.parser
import re
import subprocess
import sys
import urllib.error
import urllib.parse
import urllib.request
from pathlib import Path

from packaging.tags import sys_tags
from packaging.utils import InvalidWheelFilename, canonicalize_name, parse_wheel_filename

from uv_sources import pip_sources


class _Links(html.parser.HTMLParser):
    """The ``href`` of every ``<a>`` of a PEP 503 page."""

    def __init__(self) -> None:
        super().__init__()
        self.hrefs: list[str] = []

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        if tag == "a":
            self.hrefs += [value for key, value in attrs if key == "href" and value]


class _Unreachable(Exception):
    """An index that did not answer (as opposed to one without the package)."""


def _read(url: str) -> str | None:
    """A page at a ``file://`` or ``http(s)://`` URL (a local folder's ``index.html``, as pip reads a local index),
    or ``None`` when the index has no such page.

    Raises:
        _Unreachable: the index did not answer at all.
    """
    if url.startswith("file:") and url.endswith("/"):
        url += "index.html"
    try:
        with urllib.request.urlopen(url, timeout=30) as response:  # noqa: S310 - the user's configured sources
            return response.read().decode("utf-8", "replace")
    except urllib.error.HTTPError:  # the index answered: no page for this package
        return None
    except (OSError, ValueError) as err:
        if url.startswith("file:"):  # a local index without the package's folder
            return None
        raise _Unreachable(str(err)) from err


def wheel_links(sources: list[tuple[str, str]], name: str, unreachable: set[str] | None = None) -> list[str]:
    """The URLs of every wheel of ``name`` on ``sources`` (``("--index", url)`` or ``("--find-links", url)``); an
    index that does not answer is added to ``unreachable`` and skipped from then on."""
    unreachable = unreachable if unreachable is not None else set()
    links: list[str] = []
    for kind, location in sources:
        if kind == "--index":
            if location in unreachable:
                continue
            page_url = location.rstrip("/") + f"/{canonicalize_name(name)}/"
            try:
                page = _read(page_url)
            except _Unreachable as err:
                print(f"platform_wheels: {location} does not answer ({err}); not asked again", file=sys.stderr)
                unreachable.add(location)
                continue
            if page is None:
                continue
            parser = _Links()
            parser.feed(page)
            links += [urllib.parse.urljoin(page_url, href).split("#")[0] for href in parser.hrefs]
        elif kind == "--find-links":
            folder = Path(urllib.parse.urlparse(location).path if "://" in location else location)
            if folder.is_dir():
                links += [path.as_uri() for path in folder.glob("*.whl")]
    return [link for link in links if link.endswith(".whl")]


def installed_pure(site_packages: list[Path]) -> list[tuple[str, str]]:
    """``(name, version)`` of each distribution in ``site_packages`` installed from a pure wheel."""
    found = []
    for site in site_packages:
        for wheel_file in site.glob("*.dist-info/WHEEL"):
            tags = re.findall(r"^Tag:\s*(\S+)", wheel_file.read_text(errors="replace"), re.M)
            if tags and all(tag.endswith("-none-any") for tag in tags):
                name, _, version = wheel_file.parent.name[: -len(".dist-info")].partition("-")
                found.append((name, version))
    return found


def better_wheels(python: str, sources: list[tuple[str, str]]) -> list[tuple[str, str, str]]:
    """``(name, version, wheel URL)`` for each pure install that a supported platform wheel of the same version
    could replace (the most specific one this interpreter supports)."""
    paths = subprocess.run([python, "-c", "import site, sys; print('\\n'.join(site.getsitepackages()))"],
                           capture_output=True, text=True, check=True).stdout.split()
    supported = {tag: rank for rank, tag in enumerate(sys_tags())}
    chosen = []
    unreachable: set[str] = set()
    for name, version in installed_pure([Path(p) for p in paths]):
        best: tuple[int, str] | None = None
        for link in wheel_links(sources, name, unreachable):
            try:
                wheel_name, wheel_version, _, tags = parse_wheel_filename(urllib.parse.unquote(link.rsplit("/", 1)[1]))
            except InvalidWheelFilename:
                continue
            if wheel_name != canonicalize_name(name) or str(wheel_version) != version:
                continue
            ranks = [supported[tag] for tag in tags if tag in supported and tag.platform != "any"]
            if ranks and (best is None or min(ranks) < best[0]):
                best = (min(ranks), link)
        if best is not None:
            chosen.append((name, version, best[1]))
    return chosen


def main(argv: list[str] | None = None) -> int:
    """Find pure installs with a platform wheel on the configured sources and reinstall those wheels."""
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--python", required=True, help="the venv's interpreter")
    parser.add_argument("--uv", default=str(Path(sys.executable).with_name("uv")), help="the uv to install with")
    parser.add_argument("--dry-run", action="store_true", help="only say what would be replaced")
    args = parser.parse_args(argv)
    pairs = pip_sources()
    sources = [("--index" if kind == "--default-index" else kind, url) for kind, url in zip(pairs[::2], pairs[1::2])
               if kind in ("--index", "--default-index", "--find-links")]
    # the interpreter whose tags decide must be the venv's build
    theirs = subprocess.run([args.python, "-c", "import sys; print(sys.version_info[:2], sys.platform)"],
                            capture_output=True, text=True, check=True).stdout.strip()
    ours = f"{sys.version_info[:2]} {sys.platform}"
    if theirs != ours:
        print(f"platform_wheels: {args.python} is {theirs}, this interpreter {ours}: run it with the venv's Python",
              file=sys.stderr)
        return 2
    replace = better_wheels(args.python, sources)
    for name, version, url in replace:
        print(f"platform_wheels: {name} {version}: the pure wheel replaced by {url.rsplit('/', 1)[1]}")
    if replace and not args.dry_run:
        subprocess.run([args.uv, "pip", "install", "-q", "--python", args.python, "--no-deps", "--reinstall",
                        "--link-mode", "hardlink", "--compile-bytecode", *(url for _, _, url in replace)], check=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
