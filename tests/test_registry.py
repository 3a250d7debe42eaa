"""Registry lookups, glob listing and in-process plugin registration."""

from __future__ import annotations

import pytest

from twinkle_core import get_component, hookimpl, list_algorithms, list_exporters, load_component
from twinkle_core.components import Component
from twinkle_core.errors import (
    AmbiguousComponentError,
    RegistrationError,
    TwinkleError,
    UnknownComponentError,
)
from twinkle_core.registry import Registry
from twinkle_core.testing import registered_plugin


class Zoo:
    """A plugin object registering a small zoo of components."""

    @hookimpl
    def register_algorithms(self, register):
        """Register algorithms."""
        for name in ("zoo-resnet101", "zoo-resnet18", "zoo-resnet50", "zoo-yolov8n"):
            task = "object_detection" if "yolo" in name else "image_classification"
            register(name, f"zoo_mod:{name.replace('-', '_')}", task=task, description=name)
        register("zoo-mlp", "zoo_mod:MLP", task="tabular_classification", aliases=["zoo-perceptron"])

    @hookimpl
    def register_exporters(self, register):
        """Register an exporter given as an object."""
        register("zoo-onnx", Zoo, format="onnx")


@pytest.fixture
def zoo(twinkle_plugin):
    return twinkle_plugin(Zoo(), name="zoo")


@pytest.mark.usefixtures("zoo")
def test_glob_and_task_filters() -> None:
    """Globs and task patterns filter; listings are in natural order (timm's: numbers by value, resnet18 before
    resnet101)."""
    assert list_algorithms("zoo-resnet*") == ["zoo-resnet18", "zoo-resnet50", "zoo-resnet101"]
    assert list_algorithms("zoo-*", task="object_detection") == ["zoo-yolov8n"]
    assert list_algorithms(["zoo-y*", "zoo-m*"]) == ["zoo-mlp", "zoo-yolov8n"]
    assert list_algorithms("zoo:zoo-r*") == ["zoo-resnet18", "zoo-resnet50", "zoo-resnet101"]
    assert list_algorithms("zoo-*", task="*classification") == [
        "zoo-mlp", "zoo-resnet18", "zoo-resnet50", "zoo-resnet101"
    ]
    assert "zoo-onnx" in list_exporters()


@pytest.mark.usefixtures("zoo")
def test_lookup_by_name_alias_prefix_and_case() -> None:
    assert get_component("algorithm", "zoo-mlp").target == "zoo_mod:MLP"
    assert get_component("algorithm", "zoo-perceptron").name == "zoo-mlp"
    assert get_component("algorithm", "zoo:zoo-mlp").name == "zoo-mlp"
    assert get_component("algorithm", "ZOO-MLP").name == "zoo-mlp"
    assert load_component("exporter", "zoo-onnx") is Zoo


@pytest.mark.usefixtures("zoo")
def test_unknown_name_lists_close_matches_and_choices() -> None:
    with pytest.raises(UnknownComponentError) as info:
        get_component("algorithm", "zoo-resnet5")
    message = str(info.value)
    assert "unknown algorithm 'zoo-resnet5'" in message
    assert "did you mean 'zoo-resnet50'" in message
    assert "Installed: " in message and "zoo-yolov8n" in message
    with pytest.raises(UnknownComponentError, match="no installed plugin 'nope'"):
        get_component("algorithm", "nope:zoo-mlp")


@pytest.mark.usefixtures("zoo")
def test_missing_target_module_is_a_named_error() -> None:
    with pytest.raises(TwinkleError, match=r"algorithm 'zoo:zoo-mlp': cannot import 'zoo_mod:MLP'"):
        load_component("algorithm", "zoo-mlp")


def test_two_plugins_same_name_is_ambiguous(twinkle_plugin) -> None:
    class A:
        """First."""

        @hookimpl
        def register_algorithms(self, register):
            """Register."""
            register("shared", "a_mod:X", task="tabular_classification")

    class B(A):
        """Second."""

    twinkle_plugin(A(), name="plug-a")
    twinkle_plugin(B(), name="plug-b")
    with pytest.raises(AmbiguousComponentError) as info:
        get_component("algorithm", "shared")
    assert "'plug-a'" in str(info.value) and "'plug-b:shared'" in str(info.value)
    assert get_component("algorithm", "plug-b:shared").plugin == "plug-b"


@pytest.mark.parametrize(
    ("call", "message"),
    [
        (lambda r: r("", "m:a", task="tabular_classification"), "a name must be"),
        (lambda r: r("a:b", "m:a", task="tabular_classification"), "reserved for 'plugin:name'"),
        (lambda r: r("x", "not a target", task="tabular_classification"), "'package.module:attr'"),
        (lambda r: r("x", None, task="tabular_classification"), "with no target"),
        (lambda r: r("x", "m:a"), "without task"),
        (lambda r: r("x", "m:a", task="tabular_classification", aliases="y"), "aliases must be a list"),
        (
            lambda r: (r("x", "m:a", task="tabular_classification"), r("x", "m:b", task="tabular_classification")),
            "registered algorithm name 'x' twice",
        ),
    ],
)
def test_bad_registrations_raise(twinkle_plugin, call, message) -> None:
    class Bad:
        """A plugin that registers badly."""

        @hookimpl
        def register_algorithms(self, register):
            """Register."""
            call(register)

    with pytest.raises(TwinkleError, match=message):
        twinkle_plugin(Bad(), name="bad")
    assert "bad" not in [c.plugin for c in Registry().all("algorithm")]


def test_registered_plugin_context_manager_cleans_up() -> None:
    with registered_plugin(Zoo(), name="zoo-ctx"):
        assert "zoo-mlp" in list_algorithms()
    assert "zoo-mlp" not in list_algorithms()


class Families:
    """A family by path (``zoo/*``) and one by dash (``zoo-*``), beside a plain name with the same prefix."""

    @hookimpl
    def register_algorithms(self, register):
        register("fam/*", "zoo_mod:Any", task="tabular_classification", variant_param="model_name")
        register("fam-*", "zoo_mod:Sized", task="tabular_classification", variant_param="size")
        register("fam-tiny", "zoo_mod:Tiny", task="tabular_classification")


def test_a_family_answers_its_names_by_path_or_by_dash_and_an_exact_name_wins() -> None:
    """``llama-*`` (twinkle-llm) resolves ``llama-1b`` to the family with ``size='1b'``; ``timm/*`` keeps working."""
    with registered_plugin(Families(), name="families"):
        assert get_component("algorithm", "fam-1b").defaults == {"size": "1b"}
        assert get_component("algorithm", "fam/resnet").defaults == {"model_name": "resnet"}
        assert get_component("algorithm", "fam-tiny").target_path == "zoo_mod:Tiny"


class SizedFamily:
    """A family that lists its variants (as twinkle-llm's ``qwen3-*`` lists its sizes)."""

    @hookimpl
    def register_algorithms(self, register):
        register("kin-*", "zoo_mod:Sized", task="tabular_classification", variant_param="size",
                 variants=["small", "large"])


def test_a_familys_pattern_and_a_variant_it_lacks_are_unknown_names() -> None:
    """``qwen3-*`` (the listing's pattern) and ``qwen3-banana`` were accepted until the model was built: the pattern
    of a family and a variant its registration does not list are unknown names, listing the family's names."""
    with registered_plugin(SizedFamily(), name="kin"), registered_plugin(Families(), name="families"):
        assert get_component("algorithm", "kin-large").defaults == {"size": "large"}
        with pytest.raises(UnknownComponentError, match=r"'kin-\*' names the family .*'kin-small', 'kin-large'"):
            get_component("algorithm", "kin-*")
        with pytest.raises(UnknownComponentError, match=r"unknown algorithm 'kin-smal': .*did you mean 'kin-small'"):
            get_component("algorithm", "kin-smal")
        with pytest.raises(UnknownComponentError, match=r"'fam/\*' names the family"):
            get_component("algorithm", "fam/*")
        assert get_component("algorithm", "fam-anything").defaults == {"size": "anything"}  # lists no variants


def test_plugin_name_clash_in_process(twinkle_plugin) -> None:
    twinkle_plugin(Zoo(), name="same")
    with pytest.raises(TwinkleError, match="already registered"):
        twinkle_plugin(Zoo(), name="same")


def test_component_to_dict_never_imports() -> None:
    comp = Component("exporter", "x", "p", "does_not_exist:Y", {"format": "onnx", "opset": 17})
    assert comp.to_dict()["target"] == "does_not_exist:Y"
    assert comp.to_dict()["opset"] == 17
