"""The run-operation methods of :class:`twinkle_core.Trainer` (part of the facade): monitor, budget, tune,
verify_data. Each hands plain values to :mod:`twinkle_core.ops`, which never sees the ``Trainer``."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any, Mapping

from twinkle_core.ops.budget import BudgetConfig
from twinkle_core.ops.monitor import MonitorConfig

if TYPE_CHECKING:
    from twinkle_core.ops.tuning import TuneResult
    from twinkle_core.ops.verify import VerifyResult
    from twinkle_core.trainer import Trainer


class Operations:
    """Mixed into :class:`~twinkle_core.Trainer`; each setting applies to every later ``fit``."""

    monitor_config: MonitorConfig | None = None
    budget_config: BudgetConfig | None = None

    def monitor(
        self,
        metrics: list[str] | None = None,
        alert_rules: Mapping[str, Any] | None = None,
        *,
        action: str = "log",
        webhook: str | None = None,
    ) -> Trainer:
        """Log extra metrics and raise alerts while training.

        Example::

            trainer.monitor(metrics=["loss", "accuracy", "grad_norm"],
                            alert_rules={"loss": "stale > 3epochs"}, webhook="http://hooks.local/alerts")

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
        self.monitor_config = config
        return self  # type: ignore[return-value]

    def set_budget_alert(
        self,
        max_gpu_hours: float | None = None,
        cloud_provider: str = "aws",
        *,
        max_cpu_hours: float | None = None,
        max_cost: float | None = None,
        instance_type: str | None = None,
        prices: Mapping[str, Any] | None = None,
    ) -> Trainer:
        """Forecast the cost before training, alert at 80 %, and stop with a checkpoint at 100 %.

        Example::

            trainer.set_budget_alert(max_gpu_hours=50, cloud_provider="aws")

        Args:
            max_gpu_hours: GPU-hours (wall-clock hours × GPUs in use).
            cloud_provider: ``aws``, ``gcp``, ``azure`` or ``local`` (or one added through ``prices``).
            max_cpu_hours: CPU core-hours (wall-clock hours × threads in use).
            max_cost: US dollars, from the provider's price of a GPU- or vCPU-hour.
            instance_type: the priced instance (default: the provider's default GPU or CPU instance).
            prices: price-table overrides, same shape as ``twinkle_core/ops/prices.json``.
        """
        self.budget_config = BudgetConfig(max_gpu_hours, max_cpu_hours, max_cost, cloud_provider, instance_type,
                                          dict(prices or {}))
        return self  # type: ignore[return-value]

    def tune(
        self,
        params_space: Mapping[str, Any],
        max_trials: int = 20,
        data: str | None = None,
        **options: Any,
    ) -> TuneResult:
        """Search hyperparameters with Optuna's TPE (see :mod:`twinkle_core.ops.tuning`).

        Example::

            best = trainer.tune(params_space={"lr": (1e-5, 1e-3), "batch_size": [32, 64, 128]},
                                max_trials=20, data="cancer.csv")
            best.trainer.fit("cancer.csv")
        """
        trainer: Trainer = self  # type: ignore[assignment]
        uri = trainer._data(data)
        trainer._shared_data = {}  # prepared here once; every trial (a variant of this trainer) reuses it
        try:
            return self._tune(trainer, uri, params_space, max_trials, options)
        finally:
            trainer._shared_data = None

    @staticmethod
    def _tune(trainer: Trainer, uri: str, params_space: Mapping[str, Any], max_trials: int,
              options: dict[str, Any]) -> TuneResult:
        from twinkle_core.ops.tuning import TuneSubject, tune

        prepared, algorithm, _ = trainer._prepare(uri)
        metric, mode = algorithm.monitor

        def run_trial(params: dict[str, Any], callbacks: list[Any], project: str) -> Any:
            child = trainer.variant({**params, "progress_bar": False}, project=project, verbose=False,
                                    callbacks=[*trainer.callbacks, *callbacks])
            return child.fit(uri)

        subject = TuneSubject(
            algorithm=trainer.choice.name, fingerprint=prepared.fingerprint, metric=metric, mode=mode,
            home=trainer.store.home, project=trainer.project or "default", valid=trainer.valid_hyperparameters(),
            run_trial=run_trial, configure=lambda params: _detached(trainer.variant(params)),
        )
        return tune(subject, params_space, max_trials, **options)

    def verify_data(self, uri: str, expected_md5: str | None = None) -> VerifyResult:
        """Fingerprint ``uri``; with ``expected_md5``, raise a named error listing changed, added, removed files."""
        from twinkle_core.ops.verify import verify_data

        return verify_data(uri, expected_md5, home=self.store.home)  # type: ignore[attr-defined]


def _detached(trainer: Trainer) -> Trainer:
    """``trainer`` without the study's shared prepared data (its later fits read the data afresh)."""
    trainer._shared_data = None
    return trainer
