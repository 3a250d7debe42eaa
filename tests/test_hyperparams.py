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
