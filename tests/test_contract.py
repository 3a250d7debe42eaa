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
    assert {"every target imports and is the right kind", "its tasks are registered"} <= set(report.checked)


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


class LabelledOnly(DataProcessor):
    """A processor whose ``read_samples`` was written for evaluate only: it has no ``targets=`` keyword."""

    task = "tabular_classification"
    formats = ("lab",)

    def prepare(self, uri, context=None):
        """Not needed by the contract."""
        raise NotImplementedError

    def read_samples(self, uri, spec, context=None):
        """Labelled samples only."""
        raise NotImplementedError


class LabelledOnlyPlugin:
    """A plugin whose processor cannot take predict's call."""

    @hookimpl
    def register_data_processors(self, register):
        """Register the processor."""
        register("labelled-only", LabelledOnly, task="tabular_classification", formats=["lab"], description="x")


def test_a_processor_whose_read_samples_takes_no_targets_breaks_the_contract(twinkle_plugin) -> None:
    """``predict`` calls ``read_samples(uri, spec, context, targets=False)`` (fit, evaluate and the kit used to call it
    without ``targets=``): a processor whose ``read_samples`` cannot take that call breaks the contract, named with its
    signature and the fix, instead of failing a user's ``predict`` with a ``TypeError``."""
    twinkle_plugin(LabelledOnlyPlugin(), name="labelled-only")
    report = check_plugin_contract("labelled-only")
    assert report.problems == [
        f"data_processor 'labelled-only' target {__name__}:LabelledOnly: read_samples(self, uri, spec, context=None) "
        "cannot take predict's call read_samples(uri, spec, context, targets=False); add the keyword "
        "'*, targets: bool = True' and, when it is False, read every sample unlabelled ((input,) items)"]


def test_the_contract_checks_exactly_what_the_pages_list(twinkle_plugin) -> None:
    """The numbered checks of docs/plugins/testing.md and of the contract's docstring are ``CONTRACT_CHECKS``, in
    order, and a plugin's report names and counts exactly those checks (an in-process plugin skips the fresh
    interpreter's one and says so): the page no longer lists 5 where the report says 6."""
    import re
    from pathlib import Path

    from twinkle_core.testing import CONTRACT_CHECKS, contract

    page = (Path(__file__).resolve().parents[1] / "docs" / "plugins" / "testing.md").read_text()
    section = page.split("## Run the contract on your plugin", 1)[1].split("\n## ", 1)[0]
    assert re.findall(r"^(\d+)\. \*\*(.+?)\*\*", section, flags=re.M) == [
        (str(i), title) for i, title in enumerate(CONTRACT_CHECKS, 1)]
    assert re.findall(r"^(\d+)\. \*\*(.+?)\*\*", contract.__doc__, flags=re.M) == [
        (str(i), title) for i, title in enumerate(CONTRACT_CHECKS, 1)]
    twinkle_plugin(Good(), name="good")
    report = assert_plugin_contract("good")
    assert report.checked == [c for c in CONTRACT_CHECKS if c != "imports nothing heavy when loaded"]
    assert f"({len(CONTRACT_CHECKS) - 1} of {len(CONTRACT_CHECKS)} checks;" in str(report)
    core = assert_plugin_contract("twinkle-core")
    assert core.checked == list(CONTRACT_CHECKS) and f"({len(CONTRACT_CHECKS)} checks)" in str(core)


def _tables(folder):
    """A labelled CSV of two separable classes and the same rows without their label column."""
    import numpy as np
    import pandas as pd

    rng = np.random.default_rng(0)
    y = np.arange(60) % 2
    frame = pd.DataFrame(rng.normal(size=(60, 3)) + y[:, None] * 2, columns=["a", "b", "c"])
    frame["label"] = np.where(y == 1, "yes", "no")
    frame.to_csv(folder / "rows.csv", index=False)
    frame.drop(columns="label").to_csv(folder / "new.csv", index=False)
    return str(folder / "rows.csv"), str(folder / "new.csv")


def test_core_tables_read_what_evaluate_and_predict_need(tmp_path) -> None:
    """``assert_data_processor`` runs a processor on a plugin's sample data as fit, evaluate and predict do —
    ``prepare``, ``read_samples`` with targets, ``read_samples(..., targets=False)`` on data without labels, a
    batch of each — and core's tabular processor passes it."""
    from twinkle_core.testing import assert_data_processor

    rows, new = _tables(tmp_path)
    report = assert_data_processor("tabular", rows, unlabelled=new, task="tabular_classification")
    assert report.checked == ["prepares training data (fit)", "reads labelled samples (evaluate)",
                              "reads unlabelled samples (predict)"]
    assert "data processor 'tabular' meets the Twinkle plugin contract" in str(report)


def test_a_processor_that_needs_labels_to_predict_fails_the_processor_check(tmp_path) -> None:
    """A processor whose ``read_samples`` insists on labels even with ``targets=False`` (predict) fails the kit's
    processor check on data without labels, and one that ignores ``targets=False`` (handing predict labelled
    samples) fails it too, each named with the call and the fix — not in a user's ``predict``."""
    import pandas as pd

    from twinkle_core.data import MissingColumnError
    from twinkle_core.data.tabular import TabularProcessor
    from twinkle_core.testing import assert_data_processor, check_data_processor

    class NeedsLabels(TabularProcessor):
        """Refuses a table without the run's label column, whatever predict asks."""

        def read_samples(self, uri, spec, context=None, *, targets=True):
            """The label column is required."""
            if spec.extra["label_column"] not in pd.read_csv(uri, nrows=0).columns:
                raise MissingColumnError(f"'{uri}' has no label column")
            return super().read_samples(uri, spec, context, targets=targets)

    class IgnoresTargets(TabularProcessor):
        """Reads labels whenever the data carries them, whatever predict asks."""

        def read_samples(self, uri, spec, context=None, *, targets=True):
            """``targets`` is ignored."""
            return super().read_samples(uri, spec, context)

    rows, new = _tables(tmp_path)
    report = check_data_processor(NeedsLabels, rows, unlabelled=new, task="tabular_classification")
    assert report.problems == [
        f"read_samples('{new}', spec, context, targets=False) raised MissingColumnError: '{new}' has no label column; "
        "predict reads data without targets: read every sample unlabelled when targets=False"]
    with pytest.raises(AssertionError, match="data processor 'NeedsLabels' breaks the Twinkle plugin contract"):
        assert_data_processor(NeedsLabels, rows, unlabelled=new, task="tabular_classification")
    ignored = check_data_processor(IgnoresTargets, rows, task="tabular_classification")
    assert ignored.problems == [
        f"read_samples('{rows}', spec, context, targets=False) returned labelled samples; predict reads every "
        "sample unlabelled: return Samples(..., labelled=False) with (input,) items when targets=False"]
