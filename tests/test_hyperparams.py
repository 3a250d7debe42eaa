"""Declared hyperparameters: reading signatures and coercing values with named errors."""

from __future__ import annotations

from typing import Literal

import pytest

from twinkle_core.hyperparams import HyperparameterError, coerce, declared


def init(self, depth: int = 2, rate: float = 0.1, act: Literal["relu", "gelu"] = "relu",
         widths: tuple[int, ...] = (8,), norm: bool = True, name: str | None = None, seed=3) -> None:
    """A hyperparameter-rich signature."""


HPS = declared(init, "algorithm")


def test_declared_reads_types_and_defaults() -> None:
    assert list(HPS) == ["depth", "rate", "act", "widths", "norm", "name", "seed"]
    assert HPS["depth"].annotation is int and HPS["depth"].default == 2
    assert HPS["seed"].annotation is int  # inferred from the default
    assert HPS["act"].type_name() == "'relu' | 'gelu'"


@pytest.mark.parametrize(
    ("key", "value", "expected"),
    [
        ("depth", "4", 4), ("depth", 4.0, 4), ("rate", "1e-3", 1e-3), ("rate", 2, 2.0),
        ("act", "gelu", "gelu"), ("widths", "8,16", (8, 16)), ("widths", [4], (4,)),
        ("norm", "false", False), ("norm", True, True), ("name", "none", None), ("name", "x", "x"),
    ],
)
def test_coerce_accepts(key, value, expected) -> None:
    assert coerce(HPS[key], value) == expected


@pytest.mark.parametrize(
    ("key", "value", "fragment"),
    [
        ("depth", "abc", "hyperparameter 'depth' expects int, got 'abc'"),
        ("depth", True, "not a boolean"),
        ("depth", 2.5, "expected an integer"),
        ("act", "tanh", "choose one of 'relu', 'gelu'"),
        ("norm", "maybe", "expected true or false"),
        ("rate", [1], "expects float"),
        ("rate", float("nan"), "'rate' = nan is out of range: it must be a finite number"),
        ("rate", "-inf", "'rate' = '-inf' is out of range: it must be a finite number"),
        ("rate", 1e999, "'rate' = inf is out of range"),
    ],
)
def test_coerce_rejects_with_named_error(key, value, fragment) -> None:
    with pytest.raises(HyperparameterError, match=fragment):
        coerce(HPS[key], value)


def test_renamed_names_keep_working_for_a_release_with_a_warning_naming_the_new_one() -> None:
    """Issue 25, point 6: the names that meant several things were renamed — the Ray Train workers setting
    (``workers`` → ``ray_workers``, in ``Trainer`` and in a service job's ``resources``), a plan's process count
    (``PlanDraft.workers`` → ``world_size``) and the loader-workers concern (``workers`` → ``loader_workers``);
    the planner's distribution concern is ``distribution``, not ``strategy`` (a resource strategy is the plugin);
    issue 52: a job's training process is its child (``jobs.child``, ``start_child``, ``ChildProcess``,
    ``ForkedProcess``: "worker" is a service worker only) and a plan's ``strategy_name`` its ``resource_strategy``.
    Each old name still works, with a ``DeprecationWarning`` that names the new one; an old name given beside
    its new one is refused."""
    from twinkle_core import Trainer
    from twinkle_core.planning import DefaultStrategy, LoaderWorkersDecider, PlanDraft
    from twinkle_core.serve.submission import JobRequest

    with pytest.warns(DeprecationWarning, match="'workers' is renamed 'ray_workers'"):
        trainer = Trainer("tabular-mlp", hyperparams={"workers": 3, "backend": "ray"})
    assert trainer.settings.ray_workers == 3 and "workers" not in trainer.hyperparams
    with pytest.raises(HyperparameterError, match=r"'workers' is the old name of 'ray_workers' \(trainer\); both"):
        Trainer("tabular-mlp", hyperparams={"workers": 3, "ray_workers": 2})
    job = JobRequest.model_validate({"algorithm": "tabular-mlp", "data": "d.csv", "resources": {"workers": 2}})
    assert job.resources.ray_workers == 2 and job.trainer_hyperparams() == {"ray_workers": 2}
    with pytest.raises(ValueError, match="pass only ray_workers"):
        JobRequest.model_validate({"algorithm": "a", "data": "d", "resources": {"workers": 2, "ray_workers": 2}})

    draft = PlanDraft(context=None, values={"devices": 2, "num_nodes": 3})  # type: ignore[arg-type] — a count needs no context
    with pytest.warns(DeprecationWarning, match="PlanDraft.workers is renamed PlanDraft.world_size"):
        assert draft.workers == draft.world_size == 6
    mine = LoaderWorkersDecider()
    with pytest.warns(DeprecationWarning, match="'workers' is renamed 'loader_workers'"):
        deciders = DefaultStrategy.replacing(workers=mine)
    assert mine in deciders and sum(d.concern == "loader_workers" for d in deciders) == 1
    with pytest.warns(DeprecationWarning, match="'strategy' is renamed 'distribution'"):
        replaced = DefaultStrategy.replacing(strategy=mine)
    assert replaced[[d.concern for d in DefaultStrategy.deciders].index("distribution")] is mine  # its place
    with pytest.warns(DeprecationWarning, match="WorkersDecider is renamed LoaderWorkersDecider"):
        from twinkle_core.planning import WorkersDecider
    assert WorkersDecider is LoaderWorkersDecider
    # "worker" is a service worker only: a job's training process is its child (jobs.child, start_child, ...)
    from twinkle_core.jobs import child, launcher

    for old, new in launcher.RENAMED.items():
        with pytest.warns(DeprecationWarning, match=f"launcher.{old} is renamed {new}"):
            assert getattr(launcher, old) is getattr(launcher, new)
    import sys

    sys.modules.pop("twinkle_core.jobs.worker", None)  # imported afresh: its warning comes at import
    with pytest.warns(DeprecationWarning, match="twinkle_core.jobs.worker is renamed twinkle_core.jobs.child"):
        import twinkle_core.jobs.worker as old_module
    assert old_module.run is child.run
    # "strategy" is the distribution only: the planner that made a plan is its resource strategy
    from twinkle_core.planning import Plan

    plan = Plan(accelerator="cpu", devices=1, num_nodes=1, precision="32-true", strategy="auto", micro_batch_size=32,
                accumulate_grad_batches=1, effective_batch_size=32, data_loading="in-memory", num_workers=0,
                torch_threads=1)
    with pytest.warns(DeprecationWarning, match="Plan.strategy_name is renamed Plan.resource_strategy"):
        assert plan.strategy_name == plan.resource_strategy == "default"
    stored = {k: v for k, v in plan.to_dict().items() if k != "resource_strategy"}
    assert Plan.from_dict({**stored, "strategy_name": "yolo"}).resource_strategy == "yolo"  # a plan.json before 0.4
