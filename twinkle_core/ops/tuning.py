"""``trainer.tune(...)``: Bayesian hyperparameter search on Optuna, resumable and warm-started.

* Search space: a ``(low, high)`` tuple is a range — log-uniform when it spans a factor of 10 or more,
  integer when both ends are ints; a list is a categorical choice.
* TPE with a startup of ``max(3, min(10, max_trials // 4))`` random trials (Optuna's default of 10 makes a
  20-trial study half random, and a 10-trial one entirely random), multivariate.
* Pruning: each trial reports its validation metric per epoch through optuna-integration's Lightning
  callback; a median pruner stops bad trials early.
* Storage: SQLite under the run store (``studies.sqlite``). A study is named by algorithm, data fingerprint
  and search space, so running the same ``tune`` again resumes it: finished trials are kept, trials whose
  process died are failed and retried, and only the remaining budget of trials runs.
* Warm start: a new study first receives the finished trials of earlier studies of the same algorithm and
  data whose parameters lie in the new space.
"""

from __future__ import annotations

import hashlib
import json
import os
import socket
import warnings
from dataclasses import dataclass
from typing import Any, Callable, Mapping

from twinkle_core.errors import TwinkleError
from twinkle_core.store.atomic import atomic_write_bytes
from twinkle_core.uris import filesystem, is_local, join, local_cache_dir


class SearchSpaceError(TwinkleError, ValueError):
    """A search space entry that is not a ``(low, high)`` range or a list of choices."""


@dataclass
class TuneSubject:
    """What a study tunes, as plain values and two callables (``Trainer.tune`` builds it).

    Attributes:
        algorithm: the algorithm's name (studies are named by it).
        fingerprint: the data's fingerprint (prepared once, before the study).
        metric: the monitored metric trials report.
        mode: ``"max"`` or ``"min"``.
        home: the run store's root (the study's SQLite lives there).
        project: the project trials' runs go to.
        valid: every hyperparameter name that may be tuned.
        run_trial: ``(params, extra_callbacks, project) -> FitResult``: one trial's fit.
        configure: ``params -> Trainer``: a trainer with the best parameters.
    """

    algorithm: str
    fingerprint: str
    metric: str
    mode: str
    home: str
    project: str
    valid: set[str]
    run_trial: Callable[[dict[str, Any], list[Any], str], Any]
    configure: Callable[[dict[str, Any]], Any]


@dataclass
class TuneResult:
    """What ``twinkle_core.Trainer.tune`` returns.

    Attributes:
        best_params: the best trial's hyperparameters.
        best_value: its metric value.
        metric: the metric optimised (the algorithm's monitor, e.g. ``val_accuracy``).
        direction: ``maximize`` or ``minimize``.
        trainer: a new ``Trainer`` configured with ``best_params``.
        study_name: the Optuna study's name in ``storage``.
        storage: the study's storage URL.
        completed: finished trials in the study (this call's and earlier ones').
        pruned: pruned trials.
        history_png: a PNG of the optimisation history.
        best_run: the run of the best trial.
    """

    best_params: dict[str, Any]
    best_value: float
    metric: str
    direction: str
    trainer: Any
    study_name: str
    storage: str
    completed: int
    pruned: int
    history_png: str | None
    best_run: str | None


def distributions(space: Mapping[str, Any]) -> dict[str, Any]:
    """Optuna distributions for the search space (see the module docstring).

    Raises:
        SearchSpaceError: an entry that is neither a 2-tuple range nor a non-empty list.
    """
    from optuna.distributions import CategoricalDistribution, FloatDistribution, IntDistribution

    if not space:
        raise SearchSpaceError("params_space is empty: give at least one hyperparameter to search, e.g. "
                               "{'lr': (1e-5, 1e-2)} or {'batch_size': [32, 64]}")
    result: dict[str, Any] = {}
    for name, spec in space.items():
        if isinstance(spec, list) and spec:
            result[name] = CategoricalDistribution(spec)
        elif isinstance(spec, tuple) and len(spec) == 2 and all(isinstance(v, (int, float)) for v in spec):
            low, high = spec
            if not low < high:
                raise SearchSpaceError(f"search range for '{name}' must have low < high, got {spec}")
            log = low > 0 and high / low >= 10
            if isinstance(low, int) and isinstance(high, int) and not isinstance(low, bool):
                result[name] = IntDistribution(low, high, log=log)
            else:
                result[name] = FloatDistribution(float(low), float(high), log=log)
        else:
            raise SearchSpaceError(
                f"search space entry '{name}' = {spec!r}: use a (low, high) tuple for a range or a list of choices"
            )
    return result


def startup_trials(max_trials: int) -> int:
    """Random trials before TPE models the space: a quarter of the budget, between 3 and 10."""
    return max(3, min(10, max_trials // 4))


def _storage_url(home: str) -> str:
    fs, path = filesystem(home)
    if not is_local(fs):  # SQLite needs a local file: keep remote stores' studies in the local cache
        path = os.path.join(local_cache_dir(), hashlib.md5(home.encode()).hexdigest()[:12])
    os.makedirs(path, exist_ok=True)
    return f"sqlite:///{os.path.join(path, 'studies.sqlite')}"


def _fail_dead_trials(study: Any, storage: Any) -> int:
    """Mark RUNNING trials of dead processes on this host as failed and queue them again; returns how many."""
    import optuna

    host = socket.gethostname()
    study_id = storage.get_study_id_from_name(study.study_name)
    failed = 0
    for trial in study.get_trials(deepcopy=False, states=(optuna.trial.TrialState.RUNNING,)):
        pid = trial.user_attrs.get("pid")
        if trial.user_attrs.get("host") == host and pid and not _alive(int(pid)):
            trial_id = storage.get_trial_id_from_study_id_trial_number(study_id, trial.number)
            storage.set_trial_state_values(trial_id, optuna.trial.TrialState.FAIL)
            study.enqueue_trial(trial.params, user_attrs={"retry_of": trial.number}, skip_if_exists=False)
            failed += 1
    return failed


def _suggest(trial: Any, name: str, dist: Any) -> Any:
    from optuna.distributions import CategoricalDistribution, IntDistribution

    if isinstance(dist, CategoricalDistribution):
        return trial.suggest_categorical(name, dist.choices)
    if isinstance(dist, IntDistribution):
        return trial.suggest_int(name, dist.low, dist.high, log=dist.log)
    return trial.suggest_float(name, dist.low, dist.high, log=dist.log)


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


def _warm_start(study: Any, storage: Any, prefix: str, dists: dict[str, Any]) -> int:
    """Copy finished trials of earlier studies named ``prefix*`` whose parameters fit ``dists``."""
    import optuna

    added = 0
    for summary in optuna.get_all_study_summaries(storage, include_best_trial=False):
        if summary.study_name == study.study_name or not summary.study_name.startswith(prefix):
            continue
        old = optuna.load_study(study_name=summary.study_name, storage=storage)
        for trial in old.get_trials(deepcopy=False, states=(optuna.trial.TrialState.COMPLETE,)):
            if set(trial.params) != set(dists):
                continue
            if all(dists[k]._contains(dists[k].to_internal_repr(v)) for k, v in trial.params.items()):
                study.add_trial(optuna.trial.create_trial(params=trial.params, distributions=dists, value=trial.value,
                                                          user_attrs={"warm_start_from": summary.study_name}))
                added += 1
    return added


def tune(
    subject: TuneSubject,
    params_space: Mapping[str, Any],
    max_trials: int = 20,
    *,
    seed: int = 0,
    pruning: bool = True,
    timeout: float | None = None,
    study_name: str | None = None,
    sampler: str = "tpe",
    warm_start: bool = True,
) -> TuneResult:
    """Search ``params_space`` for the trainer's algorithm on ``data`` (see the module docstring).

    Args:
        subject: the algorithm, data and fit to tune (see ``TuneSubject``).
        params_space: name → ``(low, high)`` range or list of choices.
        max_trials: finished (or pruned) trials the study should hold when this call returns.
        seed: the sampler's seed.
        pruning: stop unpromising trials early (median pruner on the per-epoch metric).
        timeout: stop starting new trials after this many seconds.
        study_name: name the study yourself (default: algorithm, data fingerprint and space).
        sampler: ``tpe`` (default) or ``random`` (a baseline).
        warm_start: seed a new study with earlier studies' finished trials of the same algorithm and data.
    """
    import optuna
    from optuna_integration import PyTorchLightningPruningCallback

    dists = distributions(params_space)
    unknown = [k for k in dists if k not in subject.valid]
    if unknown:
        raise SearchSpaceError(
            f"cannot tune {', '.join(unknown)}: not hyperparameters of '{subject.algorithm}'; valid: "
            f"{', '.join(sorted(subject.valid))}"
        )
    metric, mode = subject.metric, subject.mode
    direction = "maximize" if mode == "max" else "minimize"
    space_key = hashlib.md5(json.dumps({k: repr(v) for k, v in sorted(dists.items())}).encode()).hexdigest()[:10]
    prefix = f"{subject.algorithm}|{subject.fingerprint}|"
    name = study_name or prefix + space_key
    optuna.logging.set_verbosity(optuna.logging.WARNING)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", optuna.exceptions.ExperimentalWarning)  # heartbeats are "experimental"
        storage = optuna.storages.RDBStorage(_storage_url(subject.home), heartbeat_interval=30, grace_period=90)
    existing = {s.study_name for s in optuna.get_all_study_summaries(storage, include_best_trial=False)}
    startup = startup_trials(max_trials)
    if sampler not in ("tpe", "random"):
        raise SearchSpaceError(f"unknown sampler '{sampler}'; use 'tpe' or 'random'")
    chosen = (optuna.samplers.TPESampler(seed=seed, n_startup_trials=startup, multivariate=True) if sampler == "tpe"
              else optuna.samplers.RandomSampler(seed=seed))
    study = optuna.create_study(
        study_name=name, storage=storage, direction=direction, load_if_exists=True, sampler=chosen,
        pruner=optuna.pruners.MedianPruner(n_startup_trials=startup, n_warmup_steps=1) if pruning
        else optuna.pruners.NopPruner(),
    )
    if warm_start and name not in existing:
        _warm_start(study, storage, prefix, dists)
    _fail_dead_trials(study, storage)
    done = {optuna.trial.TrialState.COMPLETE, optuna.trial.TrialState.PRUNED}
    own = [t for t in study.get_trials(deepcopy=False, states=tuple(done)) if "warm_start_from" not in t.user_attrs]
    project = f"{subject.project}-tune"

    def objective(trial: optuna.Trial) -> float:
        trial.set_user_attr("pid", os.getpid())
        trial.set_user_attr("host", socket.gethostname())
        params = {key: _suggest(trial, key, dist) for key, dist in dists.items()}
        pruner = PyTorchLightningPruningCallback(trial, monitor=metric) if pruning else None
        result = subject.run_trial(params, [pruner] if pruner is not None else [], project)
        trial.set_user_attr("run", result.run_uri)
        if pruner is not None:
            pruner.check_pruned()
        if result.best_metric is None:
            raise TwinkleError(f"trial {trial.number} logged no {metric}")
        return float(result.best_metric)

    remaining = max(0, max_trials - len(own))
    if remaining:
        study.optimize(objective, n_trials=remaining, timeout=timeout, catch=(), gc_after_trial=True)
    completed = study.get_trials(deepcopy=False, states=(optuna.trial.TrialState.COMPLETE,))
    if not completed:
        raise TwinkleError("no trial finished; widen the search space or raise max_trials")
    best = study.best_trial
    png = _plot(study, join(subject.home, "studies", f"{space_key}-{hashlib.md5(name.encode()).hexdigest()[:8]}.png"))
    tuned = subject.configure(dict(best.params))
    return TuneResult(
        best_params=dict(best.params), best_value=float(best.value), metric=metric, direction=direction,
        trainer=tuned, study_name=name, storage=storage.url if hasattr(storage, "url") else str(storage),
        completed=len(completed), pruned=len(study.get_trials(deepcopy=False, states=(optuna.trial.TrialState.PRUNED,))),
        history_png=png, best_run=best.user_attrs.get("run"),
    )


def _plot(study: Any, url: str) -> str | None:
    import io

    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    from optuna.visualization.matplotlib import plot_optimization_history

    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # optuna marks its matplotlib plots experimental
        ax = plot_optimization_history(study)
    buffer = io.BytesIO()
    ax.figure.savefig(buffer, format="png", dpi=100, bbox_inches="tight")
    plt.close(ax.figure)
    atomic_write_bytes(url, buffer.getvalue())
    return url
