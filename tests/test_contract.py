"""The plugin contract suite catches each kind of violation, and passes a good plugin."""

from __future__ import annotations

import pytest
from torch import nn

from twinkle_core import hookimpl
from twinkle_core.algorithm import Algorithm
from twinkle_core.data import DataProcessor
from twinkle_core.testing import assert_plugin_contract, check_plugin_contract


class GoodAlgorithm(Algorithm):
    """A documented algorithm."""

    task = "tabular_classification"

    def build_model(self, spec):
        return nn.Linear(spec.num_features, spec.num_classes)


class Undocumented(Algorithm):
    task = "tabular_classification"


class NotAnAlgorithm:
    """Documented, but the wrong kind."""


class Good:
    """A plugin that meets the contract."""

    @hookimpl
    def register_algorithms(self, register):
        """Register one good algorithm."""
        register("good-algo", GoodAlgorithm, task="tabular_classification", description="Good")


class Bad:
    @hookimpl
    def register_algorithms(self, register):
        register("undocumented", Undocumented, task="tabular_classification", description="x")
        register("wrong-kind", NotAnAlgorithm, task="tabular_classification", description="x")
        register("missing", "no_such_module_xyz:Thing", task="tabular_classification", description="x")
        register("odd-task", GoodAlgorithm, task="telepathy", description="x")
        register("no-description", GoodAlgorithm, task="tabular_classification")
        register("good-algo", GoodAlgorithm, task="tabular_classification", description="clash")


def test_good_plugin_passes(twinkle_plugin) -> None:
    twinkle_plugin(Good(), name="good")
    report = assert_plugin_contract("good")
    assert report.ok and "meets the Twinkle plugin contract" in str(report)


def test_every_violation_is_reported(twinkle_plugin) -> None:
    twinkle_plugin(Good(), name="good")
    twinkle_plugin(Bad(), name="bad")
    problems = "\n".join(check_plugin_contract("bad").problems)
    assert "plugin object" in problems and "has no docstring" in problems
    assert "hook implementation register_algorithms has no docstring" in problems
    assert "algorithm 'undocumented' target" in problems and "Undocumented has no docstring" in problems
    assert "'wrong-kind' target" in problems and "is not a subclass of Algorithm" in problems
    assert "cannot import 'no_such_module_xyz:Thing'" in problems
    assert "declares unknown task 'telepathy'" in problems
    assert "'no-description' has no description" in problems
    assert "good-algo is also registered by plugin 'good'" in problems
    with pytest.raises(AssertionError, match="breaks the Twinkle plugin contract"):
        assert_plugin_contract("bad")


def test_a_plugin_that_registers_its_task_meets_the_contract(twinkle_plugin) -> None:
    class NoTask:
        """A plugin for a task nobody registers: training would refuse it, and so does the contract."""

        @hookimpl
        def register_algorithms(self, register):
            """Register."""
            register("tele", GoodAlgorithm, task="telepathy", description="x")

    class NewTask:
        """A plugin that declares its task."""

        @hookimpl
        def register_algorithms(self, register):
            """Register."""
            register("mind-reader", GoodAlgorithm, task="telepathy", description="x")

        @hookimpl
        def register_tasks(self, register):
            """Register the task."""
            register("telepathy", kind="classification", description="read minds")

    twinkle_plugin(NoTask(), name="notask")
    assert "declares unknown task 'telepathy'" in str(check_plugin_contract("notask"))
    twinkle_plugin(NewTask(), name="newtask")
    report = check_plugin_contract("newtask")
    assert report.ok, str(report)
    assert "task 'telepathy' imports, is the right kind, is documented" in report.checked


def test_unknown_plugin() -> None:
    assert check_plugin_contract("nobody-installed-this").problems == [
        "no plugin named 'nobody-installed-this' is installed or registered"
    ]


def test_heavy_plugin_module_is_caught(make_dist, site_dir, run_twinkle) -> None:
    make_dist(
        "heavy-twinkle",
        "0.1.0",
        {"heavy": "heavy_plugin"},
        {"heavy_plugin": '"""Imports torch at the top: not allowed."""\nimport torch  # noqa\n'},
    )
    code = (
        "from twinkle_core.testing import check_plugin_contract\n"
        "print(check_plugin_contract('heavy').problems)\n"
    )
    result = run_twinkle("-c", code, python=True)
    assert result.returncode == 0, result.stderr
    assert "loading it imports torch" in result.stdout


def test_core_builtins_meet_the_contract() -> None:
    assert_plugin_contract("twinkle-core")


class OnlyTrains(DataProcessor):
    """A processor that prepares training data only (no ``read_samples``)."""

    task = "tabular_classification"
    formats = ("odd",)

    def prepare(self, uri, context=None):
        raise NotImplementedError


class TrainOnly:
    """A plugin whose processor cannot read data for a trained run."""

    @hookimpl
    def register_data_processors(self, register):
        """Register the processor."""
        register("only-trains", OnlyTrains, task="tabular_classification", formats=("odd",), description="x")


def test_a_processor_without_read_samples_is_noted_and_refused_by_name(twinkle_plugin) -> None:
    """The contract notes (without failing) a processor that cannot read test or new data, and such a processor
    refuses evaluate's read with ``SamplesNotSupportedError`` naming itself and the method to implement."""
    from twinkle_core.data import DataSpec, SamplesNotSupportedError

    twinkle_plugin(TrainOnly(), name="train-only")
    report = assert_plugin_contract("train-only")
    assert report.notes == ["data_processor 'only-trains' does not implement read_samples: evaluate and predict "
                            "refuse its runs"]
    assert "note: data_processor 'only-trains'" in str(report)
    assert check_plugin_contract("twinkle-core").notes == []  # core's tabular processor reads samples
    with pytest.raises(SamplesNotSupportedError, match="OnlyTrains cannot read data for a trained run.*read_samples"):
        OnlyTrains().read_samples("x.odd", DataSpec(task="tabular_classification", input_shape=(3,)))
