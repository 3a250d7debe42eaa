"""``twinkle doctor`` and the set-up's choice of platform wheels: what an installation lacks is named with its fix,
and a pure wheel that needs a missing system library is replaced by the platform wheel that bundles it."""

from __future__ import annotations

import base64
import hashlib
import json
import os
import subprocess
import sys
import zipfile
from pathlib import Path

from click.testing import CliRunner

from twinkle_core import hookimpl
from twinkle_core.cli import main
from twinkle_core.doctor import CORE_CHECKS, Finding, run_checks
from twinkle_core.planning.hardware import cpu_description
from twinkle_core.testing import check_plugin_contract

ROOT = Path(__file__).resolve().parents[1]


def _native_missing() -> Finding:
    """A library this test plugin needs, absent."""
    return Finding("missing", "libfoo.so not found", fix="apt-get install libfoo1")


def _optional_absent() -> Finding:
    """An optional SDK, not installed."""
    return Finding("optional", "not installed", fix="pip install foo-sdk")


def _broken() -> Finding:
    """A check with a bug."""
    raise RuntimeError("boom")


class Needy:
    """A plugin that needs a native library this machine lacks."""

    @hookimpl
    def register_checks(self, register):
        """Its checks."""
        register("libfoo", _native_missing, description="libfoo, which the plugin loads")
        register("foo-sdk", _optional_absent, description="an optional SDK")
        register("buggy", _broken, description="a check that raises")


def test_doctor_names_core_checks_first_and_exits_0_when_nothing_is_missing(twinkle_plugin) -> None:
    """Core's checks run in their documented order, each line ok/optional/warn with a detail; with nothing missing
    the command exits 0 (the JSON form carries the same findings)."""
    result = CliRunner().invoke(main, ["doctor", "--json", *CORE_CHECKS])
    assert result.exit_code == 0, result.output
    findings = json.loads(result.output)
    assert [f["name"] for f in findings] == list(CORE_CHECKS)
    assert all(f["status"] in ("ok", "optional", "warn") and f["detail"] for f in findings), findings
    torch_line = next(f for f in findings if f["name"] == "torch")
    import torch

    assert torch.__version__ in torch_line["detail"]


def test_a_missing_piece_is_named_with_its_fix_and_exits_1(twinkle_plugin) -> None:
    """A plugin's missing library makes `twinkle doctor` exit 1 and print the fix; an optional piece does not; a
    check that raises is reported as missing (never a traceback)."""
    twinkle_plugin(Needy(), name="needy")
    result = CliRunner().invoke(main, ["doctor", "python", "needy:libfoo", "needy:foo-sdk", "needy:buggy"])
    assert result.exit_code == 1, result.output
    lines = {line.split()[1] + " " + line.split()[2]: line for line in result.output.splitlines()[1:-1]}
    assert "MISSING" in lines["needy: libfoo"] and "apt-get install libfoo1" in lines["needy: libfoo"]
    assert "optional" in lines["needy: foo-sdk"]
    assert "MISSING" in lines["needy: buggy"] and "RuntimeError: boom" in lines["needy: buggy"]
    assert result.output.splitlines()[-1] == "2 missing: needy: buggy, needy: libfoo"
    only_optional = CliRunner().invoke(main, ["doctor", "needy:foo-sdk"])
    assert only_optional.exit_code == 0, only_optional.output
    typo = CliRunner().invoke(main, ["doctor", "needy:libfo"])  # a name no check has is an error, not "all fine"
    assert typo.exit_code == 1 and "unknown check 'needy:libfo'; did you mean 'needy:libfoo'" in typo.output


def test_checks_are_components_the_contract_checks(twinkle_plugin) -> None:
    """A check registered without a docstring, or as a class, breaks the plugin contract by name."""

    class NotAFunction:
        """A class is not a check."""

    def undocumented() -> Finding:
        return Finding("ok", "fine")

    class Sloppy:
        """A plugin whose checks are not functions with docstrings."""

        @hookimpl
        def register_checks(self, register):
            """Its checks."""
            register("klass", NotAFunction, description="a class")
            register("quiet", undocumented, description="no docstring")

    twinkle_plugin(Sloppy(), name="sloppy")
    report = check_plugin_contract("sloppy", check_lightness=False)
    assert any("check 'klass'" in p and "not a function" in p for p in report.problems), report.problems
    assert any("check 'quiet'" in p and "no docstring" in p for p in report.problems), report.problems
    assert [f.status for f in run_checks(["sloppy:quiet"])] == ["ok"]


def test_the_cpu_bf16_flags_are_read_from_cpuinfo() -> None:
    """The devices line (and the planner's hardware) knows a CPU computes bf16 natively from its flags: AVX512-BF16
    or AMX on x86, BF16 on Arm; a CPU without them has none."""
    epyc = cpu_description("processor\t: 0\nmodel name\t: AMD EPYC 9554\nflags\t\t: fpu sse avx512f avx512_bf16\n")
    assert (epyc.name, epyc.bf16_flags) == ("AMD EPYC 9554", ("avx512_bf16",))
    graviton = cpu_description("processor\t: 0\nFeatures\t: fp asimd bf16 i8mm\n")
    assert graviton.bf16_flags == ("bf16",)
    old = cpu_description("model name\t: Intel Xeon E5\nflags\t\t: fpu sse avx2\n")
    assert old.bf16_flags == ()


def _wheel(folder: Path, tag: str, marker: str) -> Path:
    """A one-module wheel of ``twinkle-fake-native`` 1.0 with ``tag``; its module says ``marker``."""
    name = f"twinkle_fake_native-1.0-{tag}.whl"
    info = "twinkle_fake_native-1.0.dist-info"
    files = {
        "twinkle_fake_native.py": f"WHICH = {marker!r}\n",
        f"{info}/METADATA": "Metadata-Version: 2.1\nName: twinkle-fake-native\nVersion: 1.0\n",
        f"{info}/WHEEL": "Wheel-Version: 1.0\nGenerator: test\nRoot-Is-Purelib: true\n"
                         + "".join(f"Tag: {t}\n" for t in _expand(tag)),
    }
    record = []
    for path, text in files.items():
        digest = base64.urlsafe_b64encode(hashlib.sha256(text.encode()).digest()).rstrip(b"=").decode()
        record.append(f"{path},sha256={digest},{len(text.encode())}")
    files[f"{info}/RECORD"] = "\n".join(record + [f"{info}/RECORD,,"]) + "\n"
    with zipfile.ZipFile(folder / name, "w") as archive:
        for path, text in files.items():
            archive.writestr(path, text)
    return folder / name


def _expand(tag: str) -> list[str]:
    python, abi, platform = tag.split("-")
    return [f"{p}-{abi}-{platform}" for p in python.split(".")]


def _index(root: Path, wheel: Path) -> str:
    """A PEP 503 index at ``root`` holding ``wheel``; returns its file:// URL."""
    page = root / "simple" / "twinkle-fake-native"
    page.mkdir(parents=True)
    (root / "files").mkdir()
    target = root / "files" / wheel.name
    wheel.rename(target)
    (page / "index.html").write_text(f'<html><body><a href="../../files/{target.name}">{target.name}</a></body></html>')
    return (root / "simple").as_uri()


def test_a_pure_wheel_on_one_index_is_replaced_by_the_platform_wheel_on_another(tmp_path: Path) -> None:
    """soundfile's case: a release whose pure wheel sits on the first index and whose platform wheel (bundling the
    native library) on a second is installed by uv from the first; tools/platform_wheels.py replaces it with the
    platform wheel of the same version, and leaves it alone when no platform wheel exists."""
    from packaging.tags import sys_tags

    platform_tag = next(t for t in sys_tags() if t.platform != "any" and t.abi == "none")
    built = tmp_path / "built"
    built.mkdir()
    first = _index(tmp_path / "first", _wheel(built, "py2.py3-none-any", "pure"))
    second = _index(tmp_path / "second", _wheel(built, f"{platform_tag.interpreter}-none-{platform_tag.platform}",
                                                "platform"))
    uv = str(Path(sys.executable).with_name("uv"))
    venv = tmp_path / "venv"
    python = str(venv / "bin" / "python")
    config = tmp_path / "pip.conf"
    config.write_text(f"[global]\nextra-index-url = {first} {second}\n")
    env = {**os.environ, "PIP_CONFIG_FILE": str(config), "UV_CACHE_DIR": str(tmp_path / "uv-cache")}
    subprocess.run([uv, "venv", "-q", "--python", sys.executable, str(venv)], check=True, env=env)
    subprocess.run([uv, "pip", "install", "-q", "--python", python, "--index-strategy", "unsafe-best-match",
                    "--index", first, "--default-index", second, "twinkle-fake-native==1.0"], check=True, env=env)

    def which() -> str:
        return subprocess.run([python, "-c", "import twinkle_fake_native as m; print(m.WHICH)"], check=True,
                              capture_output=True, text=True).stdout.strip()

    assert which() == "pure"  # what uv chose: the release from the first index that has it
    tool = [sys.executable, str(ROOT / "tools" / "platform_wheels.py"), "--python", python, "--uv", uv]
    done = subprocess.run(tool, check=True, capture_output=True, text=True, env=env)
    assert "twinkle_fake_native 1.0: the pure wheel replaced by" in done.stdout, done.stdout + done.stderr
    assert which() == "platform"
    again = subprocess.run(tool, check=True, capture_output=True, text=True, env=env)
    assert again.stdout == ""  # nothing pure is left to replace


def test_make_demo_and_make_test_set_up_the_same_environment() -> None:
    """The new user's machine after ``make demo`` lacked what ``make test`` installed (espeak-ng, and with it the
    libsndfile that a pure soundfile wheel needs): both now run ``make setup`` — the venv with platform wheels
    preferred, and Debian's espeak-ng and chromium. (``make -n``: nothing is run.)"""
    def dry_run(target: str) -> str:
        done = subprocess.run(["make", "-n", "-B", "--no-print-directory", target], cwd=ROOT, capture_output=True,
                              text=True, timeout=120)
        assert done.returncode == 0, done.stderr[-2000:]
        return done.stdout

    setup = dry_run("setup")
    assert "tools/platform_wheels.py --python" in setup and "apt-get install -y -qq espeak-ng chromium" in setup
    demo = dry_run("demo")
    assert all(line in demo for line in setup.splitlines() if line.strip()) and "examples/demo.py" in demo
    recipe = (ROOT / "Makefile").read_text().split("\ntest:", 1)[1].split("\n\n", 1)[0]
    assert "$(MAKE) --no-print-directory setup &&" in recipe  # make test: the same set-up, then the suite
