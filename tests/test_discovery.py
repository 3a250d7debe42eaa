"""Plugin discovery through installed entry points: third parties, broken plugins, environment switches."""

from __future__ import annotations

import json

import pytest

pytestmark = pytest.mark.usefixtures("acme")


def _names(result) -> dict[str, dict]:
    assert result.returncode == 0, result.stderr
    return {row["name"]: row for row in json.loads(result.stdout)}


def test_third_party_algorithm_listed_under_its_plugin(run_twinkle) -> None:
    algorithms = _names(run_twinkle("algorithms", "list", "--json"))
    acme = algorithms["acme-linear"]
    assert acme["plugin"] == "acme"
    assert acme["task"] == "tabular_classification"
    assert acme["target"] == "acme_mod:AcmeLinear"
    assert acme["description"] == "Acme's linear classifier"


def test_plugins_list_reports_version_entry_point_hooks_and_components(run_twinkle) -> None:
    plugin = _names(run_twinkle("plugins", "list", "--json"))["acme"]
    assert plugin == {
        "name": "acme",
        "version": "1.2.0",
        "distribution": "acme-twinkle",
        "entry_point": "acme = acme_plugin",
        "module": "acme_plugin",
        "hooks": ["register_algorithms"],
        "components": {"algorithm": ["acme-linear"]},
        "error": None,
        "builtin": False,
    }


def test_builtin_plugin_only_with_all(run_twinkle) -> None:
    assert "twinkle-core" not in _names(run_twinkle("plugins", "list", "--json"))
    assert _names(run_twinkle("plugins", "list", "--json", "--all"))["twinkle-core"]["builtin"] is True


def test_target_is_imported_only_when_used(run_twinkle) -> None:
    code = (
        "import sys\n"
        "from twinkle_core import list_algorithms, load_component\n"
        "from twinkle_core.algorithm import Algorithm\n"
        "assert 'acme-linear' in list_algorithms('acme-*')\n"
        "print('listed', 'acme_mod' in sys.modules)\n"
        "cls = load_component('algorithm', 'acme-linear')\n"
        "print('used', 'acme_mod' in sys.modules, issubclass(cls, Algorithm))\n"
    )
    result = run_twinkle("-c", code, python=True)
    assert result.returncode == 0, result.stderr
    assert result.stdout.split("\n")[:2] == ["listed False", "used True True"]


@pytest.mark.parametrize("args", [("plugins", "list", "--json"), ("algorithms", "list", "--json")])
def test_listing_never_imports_torch(run_twinkle, args) -> None:
    result = run_twinkle("-X", "importtime", "-m", "twinkle_core", *args, python=True)
    assert result.returncode == 0
    imported = {line.rsplit("|", 1)[-1].strip() for line in result.stderr.splitlines() if "|" in line}
    assert "twinkle_core.plugins" in imported  # the import log really covers the command
    assert not imported & {"torch", "lightning", "timm", "ultralytics", "numpy"}


@pytest.mark.usefixtures("broken")
def test_broken_plugin_is_listed_with_its_error_and_reported_once(run_twinkle) -> None:
    result = run_twinkle("plugins", "list", "--json")
    plugin = _names(result)["broken"]
    assert plugin["version"] == "0.3.0"
    assert plugin["error"] == "RuntimeError: boom: missing native library"
    assert plugin["components"] == {}
    lines = [line for line in result.stderr.splitlines() if "broken" in line]
    assert len(lines) == 1
    assert "broken (broken-twinkle 0.3.0)" in lines[0] and "boom: missing native library" in lines[0]


@pytest.mark.usefixtures("broken")
def test_broken_plugin_does_not_stop_other_commands(run_twinkle) -> None:
    assert "acme-linear" in _names(run_twinkle("algorithms", "list", "--json"))
    table = run_twinkle("plugins", "list")
    assert table.returncode == 0
    assert "boom: missing native library" in table.stdout


@pytest.mark.usefixtures("broken")
def test_strict_mode_reraises(run_twinkle) -> None:
    result = run_twinkle("algorithms", "list", env={"TWINKLE_STRICT_PLUGINS": "1"})
    assert result.returncode != 0
    assert "broken (broken-twinkle 0.3.0) failed to load: RuntimeError: boom" in result.stderr
    assert "Traceback" not in result.stderr


@pytest.mark.usefixtures("broken")
@pytest.mark.parametrize(
    ("env", "expected"),
    [
        ({"TWINKLE_LOAD_PLUGINS": "acme"}, {"acme"}),
        ({"TWINKLE_LOAD_PLUGINS": ""}, set()),
        ({"TWINKLE_LOAD_PLUGINS": " acme , broken "}, {"acme", "broken"}),
        ({"TWINKLE_DISABLED_PLUGINS": "broken"}, {"acme"}),
        ({"TWINKLE_LOAD_PLUGINS": "acme,broken", "TWINKLE_DISABLED_PLUGINS": "acme"}, {"broken"}),
    ],
)
def test_environment_selects_plugins(run_twinkle, env, expected) -> None:
    result = run_twinkle("plugins", "list", "--json", env=env)
    names = set(_names(result)) & {"acme", "broken"}
    assert names == expected
    assert ("boom" in result.stderr) == ("broken" in expected)


def test_clashing_names_need_plugin_prefix(run_twinkle, make_dist) -> None:
    make_dist(
        "other-twinkle",
        "2.0.0",
        {"other": "other_plugin"},
        {
            "other_plugin": '''
            """Another vendor's plugin registering the same name."""
            from twinkle_core import hookimpl

            @hookimpl
            def register_algorithms(register):
                """Register."""
                register("acme-linear", "other_mod:Thing", task="tabular_classification")
            '''
        },
    )
    listed = json.loads(run_twinkle("algorithms", "list", "--json").stdout)
    assert sorted(r["plugin"] for r in listed if r["name"] == "acme-linear") == ["acme", "other"]
    code = (
        "from twinkle_core import get_component\n"
        "from twinkle_core.errors import AmbiguousComponentError\n"
        "print(get_component('algorithm', 'other:acme-linear').plugin)\n"
        "try:\n    get_component('algorithm', 'acme-linear')\n"
        "except AmbiguousComponentError as err:\n    print(err)\n"
    )
    out = run_twinkle("-c", code, python=True).stdout.splitlines()
    assert out[0] == "other"
    assert "'acme'" in out[1] and "'other'" in out[1] and "'acme:acme-linear'" in out[1]


def test_registration_error_marks_plugin_broken(run_twinkle, make_dist) -> None:
    make_dist(
        "sloppy-twinkle",
        "0.1.0",
        {"sloppy": "sloppy_plugin"},
        {
            "sloppy_plugin": '''
            """A plugin that forgets the task."""
            from twinkle_core import hookimpl

            @hookimpl
            def register_algorithms(register):
                """Register."""
                register("fine", "x_mod:Fine", task="tabular_classification")
                register("no-task", "x_mod:NoTask")
            '''
        },
    )
    plugins = _names(run_twinkle("plugins", "list", "--json"))
    assert "without task" in plugins["sloppy"]["error"] and "'no-task'" in plugins["sloppy"]["error"]
    algorithms = _names(run_twinkle("algorithms", "list", "--json"))
    assert "fine" not in algorithms  # all or nothing: a plugin that fails registers nothing
    assert "acme-linear" in algorithms


def test_plugin_for_another_core_is_listed_with_a_named_error_and_not_imported(run_twinkle, make_dist) -> None:
    from importlib.metadata import version

    core = version("twinkle-core")
    make_dist(
        "future-twinkle", "9.0.0", {"future": "future_plugin"},
        {"future_plugin": "raise ImportError('needs twinkle_core.api_of_the_future')\n"},
        requires=("twinkle-core>=99,<100", "numpy"),
    )
    make_dist(
        "fits-twinkle", "1.0.0", {"fits": "fits_plugin"}, {"fits_plugin": '"""A plugin that registers nothing."""\n'},
        requires=(f"twinkle-core=={core}", "twinkle-core<0.0.1; extra == 'legacy'"),
    )
    result = run_twinkle("plugins", "list", "--json")
    rows = _names(result)
    error = rows["future"]["error"]
    assert error.startswith("IncompatiblePluginError: future-twinkle 9.0.0 supports twinkle-core<100,>=99")
    assert f"twinkle-core {core} is installed" in error and "pip install" in error
    assert "api_of_the_future" not in result.stderr  # never imported
    assert rows["fits"]["error"] is None  # its extra's range does not apply
    assert rows["acme"]["error"] is None  # no declared range: loaded as before
    table = run_twinkle("plugins", "list")
    assert "IncompatiblePluginError" in table.stdout
