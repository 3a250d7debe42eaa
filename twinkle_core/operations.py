"""The run-operation methods of ``twinkle_core.Trainer`` (part of the facade): monitor, budget, tune,
verify_data. Each works on the trainer's ``Session`` and hands plain values to
``twinkle_core.ops``, which never sees the ``Trainer``."""

from __future__ import annotations

import copy
from typing import TYPE_CHECKING, Any, Mapping, TypeVar

from twinkle_core.ops.budget import BudgetConfig
from twinkle_core.ops.monitor import MonitorConfig
from twinkle_core.session import Session

if TYPE_CHECKING:
    from twinkle_core.ops.tuning import TuneResult
    from twinkle_core.ops.verify import VerifyResult

T = TypeVar("T", bound="Operations")
"""The trainer an operation returns (itself, or a variant of it)."""


class Operations:
    """Mixed into ``Trainer``; each setting applies to every later ``fit``."""

    session: Session
    """The training the trainer runs in this process."""

    def variant(self: T, hyperparams: dict[str, Any], **kwargs: Any) -> T:
        """A new trainer like this one with ``hyperparams`` merged over its own (monitor and budget kept)."""
        other = copy.copy(self)
        other.session = self.session.variant(hyperparams, **kwargs)
        return other

    def monitor(
        self: T,
        metrics: list[str] | None = None,
        alert_rules: Mapping[str, Any] | None = None,
        *,
        action: str = "log",
        webhook: str | None = None,
    ) -> T:
        """Log extra metrics and raise alerts while training.

        For example:

        ```python
        trainer.monitor(metrics=["loss", "accuracy", "grad_norm"],
                        alert_rules={"loss": "stale > 3epochs"}, webhook="http://hooks.local/alerts")
        ```

        Args:
            metrics: names to log and watch; ``grad_norm`` (total L2 norm of the gradients) and ``lr`` are
                computed; others (``loss``, ``accuracy``) are what the algorithm logs.
            alert_rules: metric → rule (``"stale > 3 epochs"``, ``"> 2.5"``, ``"nan"``,
                ``"increase > 20% over 2 epochs"``), or metric → ``{"rule": ..., "action": "stop"}``.
            action: ``log`` (default) or ``stop``: save a checkpoint, then stop training.
            webhook: a URL that receives each alert as a JSON POST.

        Raises:
            AlertRuleError: a rule that does not parse, named with the grammar.
        """
        config = MonitorConfig(list(metrics or []), dict(alert_rules or {}), action, webhook)
        config.rules()  # parse now: a bad rule is an error here, not mid-training
        self.session.monitor_config = config
        return self

    def set_budget_alert(
        self: T,
        max_gpu_hours: float | None = None,
        cloud_provider: str = "aws",
        *,
        max_cpu_hours: float | None = None,
        max_cost: float | None = None,
        instance_type: str | None = None,
        prices: Mapping[str, Any] | None = None,
    ) -> T:
        """Forecast the cost before training, alert at 80 %, and stop with a checkpoint at 100 %.

        For example:

        ```python
        trainer.set_budget_alert(max_gpu_hours=50, cloud_provider="aws")
        ```

        Args:
            max_gpu_hours: GPU-hours (wall-clock hours × GPUs in use).
            cloud_provider: ``aws``, ``gcp``, ``azure`` or ``local`` (or one added through ``prices``).
            max_cpu_hours: CPU core-hours (wall-clock hours × threads in use).
            max_cost: US dollars, from the provider's price of a GPU- or vCPU-hour.
            instance_type: the priced instance (default: the provider's default GPU or CPU instance).
            prices: price-table overrides, same shape as ``twinkle_core/ops/prices.json``.
        """
        self.session.budget_config = BudgetConfig(max_gpu_hours, max_cpu_hours, max_cost, cloud_provider,
                                                  instance_type, dict(prices or {}))
        return self

    def tune(
        self,
        params_space: Mapping[str, Any],
        max_trials: int = 20,
        data: str | None = None,
        **options: Any,
    ) -> TuneResult:
        """Search hyperparameters with Optuna's TPE (see ``twinkle_core.ops.tuning``).

        For example:

        ```python
        best = trainer.tune(params_space={"lr": (1e-5, 1e-3), "batch_size": [32, 64, 128]},
                            max_trials=20, data="cancer.csv")
        best.trainer.fit("cancer.csv")
        ```
        """
        session = self.session
        uri = session.data_uri(data)
        session.shared_data = {}  # prepared here once; every trial (a variant of this trainer) reuses it
        try:
            return self._tune(uri, params_space, max_trials, options)
        finally:
            session.shared_data = None

    def _tune(self, uri: str, params_space: Mapping[str, Any], max_trials: int, options: dict[str, Any]) -> TuneResult:
        from twinkle_core.ops.tuning import TuneSubject, tune

        session = self.session
        ready = session.prepare(uri)
        metric, mode = ready.algorithm.monitor

        def run_trial(params: dict[str, Any], callbacks: list[Any], project: str) -> Any:
            child = self.variant({**params, "progress_bar": False}, project=project, verbose=False,
                                 callbacks=[*session.callbacks, *callbacks])
            return child.fit(uri)  # type: ignore[attr-defined]

        subject = TuneSubject(
            algorithm=session.choice.name, fingerprint=ready.data.fingerprint, metric=metric, mode=mode,
            home=session.store.home, project=session.project or "default", valid=session.valid_hyperparameters(),
            run_trial=run_trial, configure=lambda params: _detached(self.variant(params)),
        )
        return tune(subject, params_space, max_trials, **options)

    def verify_data(self, uri: str, expected_md5: str | None = None) -> VerifyResult:
        """Fingerprint ``uri``; with ``expected_md5``, raise a named error listing changed, added, removed files."""
        from twinkle_core.ops.verify import verify_data

        return verify_data(uri, expected_md5, home=self.session.store.home)


def _detached(trainer: T) -> T:
    """``trainer`` without the study's shared prepared data (its later fits read the data afresh)."""
    trainer.session.shared_data = None
    return trainer
