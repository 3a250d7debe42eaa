"""One training, one value: ``Trainer(...)``, a job file and a service request describe the same training as the
same ``TrainingSpec``, and the service refuses a bad submission with the message ``Trainer`` gives — both from the
spec (``twinkle_core.spec.resolve``), the service without building a ``Trainer``."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from twinkle_core import Session, Trainer, TrainingSpec
from twinkle_core.errors import HyperparameterError, TwinkleError, UnknownComponentError
from twinkle_core.jobs import Job
from twinkle_core.jobs.from_session import job_of
from twinkle_core.serve.submission import Budget, JobRequest, MonitorRules, check_request
from twinkle_core.spec import resolve

HP = {"max_epochs": 3, "lr": 0.01, "batch_size": 16}


def test_a_trainer_a_job_file_and_a_request_describe_one_training_as_one_spec(tmp_path: Path) -> None:
    """The same training written three ways — the library's calls, a ``job.json`` written by hand, a service
    request — is one ``TrainingSpec``; it survives a job file and rebuilds the session it came from."""
    home = str(tmp_path / "home")
    trainer = Trainer("tabular-mlp", "tabular_classification", HP, user="alice", project="p", home=home,
                      verbose=False)
    trainer.monitor(["loss"], {"val_loss": "nan"}, action="stop")
    trainer.set_budget_alert(max_cpu_hours=2, cloud_provider="local")
    from_trainer = trainer.session.spec

    folder = tmp_path / "job"
    folder.mkdir()
    spec_fields = {"algorithm": "tabular-mlp", "task": "tabular_classification", "hyperparams": HP, "user": "alice",
                   "project": "p", "home": home,
                   "monitor": {"metrics": ["loss"], "alert_rules": {"val_loss": "nan"}, "action": "stop"},
                   "budget": {"max_cpu_hours": 2, "cloud_provider": "local"}}
    (folder / "job.json").write_text(json.dumps({"spec": spec_fields, "data": "cancer.csv", "max_restarts": 2}))
    from_file = Job.load(str(folder)).spec
    flat = Job.model_validate({**spec_fields, "data": "cancer.csv", "max_restarts": 2})  # a file written before
    assert flat.spec == from_file and flat.data == "cancer.csv"

    request = JobRequest(algorithm="tabular-mlp", task="tabular_classification", data="cancer.csv", hyperparams=HP,
                         project="p", monitor=MonitorRules(metrics=["loss"], alert_rules={"val_loss": "nan"},
                                                           action="stop"),
                         budget=Budget(max_cpu_hours=2))
    from_request = request.to_spec("alice", home)

    assert from_trainer == from_file == from_request
    assert from_trainer.is_declarative and TrainingSpec.from_dict(from_trainer.to_dict()) == from_trainer
    job_file = Job.load(str(folder))
    assert request.to_job("alice", home).spec == job_file.spec and job_file.data == "cancer.csv"
    written = tmp_path / "written"
    written.mkdir()
    Job.from_spec(from_request, "cancer.csv", 2).save(str(written))  # the request's job, as a file, read back
    assert Job.load(str(written)).spec == from_trainer and Job.load(str(written)).max_restarts == 2
    assert Session.from_spec(from_file, verbose=False).spec == from_file
    assert resolve(from_file).settings.max_epochs == 3 and resolve(from_file).hyperparams["lr"] == 0.01
    # a trainer's job (a supervisor's, Ray's) is its spec with the hyperparameters resolved and the task chosen
    job = job_of(trainer.session, "cancer.csv", 1, "a test")
    assert job.spec.replace(hyperparams=HP) == from_trainer and job.data.endswith("cancer.csv")


@pytest.mark.parametrize("hyperparams, error", [
    ({"lr": "fast"}, HyperparameterError),
    ({"learning_rat": 0.1}, HyperparameterError),
    ({"max_epochs": 0}, TwinkleError),
])
def test_the_service_refuses_a_bad_submission_with_the_message_trainer_gives(tmp_path: Path, hyperparams: dict,
                                                                              error: type) -> None:
    """A bad hyperparameter is refused by ``Trainer(...)`` and by the service's submission check with one message,
    both from resolving the spec."""
    home = str(tmp_path)
    with pytest.raises(error) as by_trainer:
        Trainer("tabular-mlp", hyperparams=hyperparams, home=home, verbose=False)
    with pytest.raises(error) as by_service:
        check_request(JobRequest(algorithm="tabular-mlp", data="cancer.csv", hyperparams=hyperparams), home, "alice")
    assert str(by_service.value) == str(by_trainer.value)


def test_a_spec_that_holds_code_cannot_become_a_job_and_says_what_it_holds(tmp_path: Path) -> None:
    """An algorithm class, a configured processor or callbacks are code: the spec says which, and neither a job
    file nor its serialised form is written from it."""
    from twinkle_core.algorithms.tabular_mlp import TabularMLP

    spec = TrainingSpec.of(TabularMLP, callbacks=[object()], steps=5)
    assert spec.held_code() == ["an Algorithm class", "callbacks"] and not spec.is_declarative
    assert spec.hyperparams == {"max_steps": 5}  # the article's name for the step budget
    with pytest.raises(TwinkleError, match="holds an Algorithm class, callbacks"):
        Job.from_spec(spec, "cancer.csv")
    with pytest.raises(TwinkleError, match="unknown field"):
        TrainingSpec.from_dict({"algorithm": "tabular-mlp", "data": "x.csv"})
    with pytest.raises(UnknownComponentError):
        resolve(TrainingSpec("no-such-algorithm"))


def test_a_continuation_is_one_spec_from_a_trainer_a_job_file_and_a_request_and_a_supervised_fit_keeps_it(
        tmp_path: Path, cancer_csv: Path) -> None:
    """``Trainer.from_checkpoint``'s training is a spec that ``continues`` a checkpoint: it survives its serialised
    form and a job (``supervise()`` now trains the child run of the checkpoint's, not a fresh one); a service
    request naming the run (the algorithm read from the run when not given) describes the same continuation; a
    bad mode is refused where the spec is made."""
    from twinkle_core.spec import ContinueFrom
    from twinkle_core.store.runs import RunNotFoundError

    home = str(tmp_path / "home")
    parent = Trainer("tabular-mlp", hyperparams={"max_epochs": 1, "progress_bar": False}, user="alice", home=home,
                     verbose=False).fit(str(cancer_csv))
    child = Trainer.from_checkpoint(parent.run_uri, mode="finetune", hyperparams={"max_epochs": 1}, home=home,
                                    verbose=False)
    spec = child.session.spec
    assert spec.continues == ContinueFrom(parent.run_uri, "finetune") and spec.algorithm == "tabular-mlp"
    assert TrainingSpec.from_dict(spec.to_dict()) == spec and spec.to_dict()["continues"]["mode"] == "finetune"
    rebuilt = Session.from_spec(TrainingSpec.from_dict(spec.to_dict()), verbose=False)
    assert rebuilt.continuation.mode == "finetune" and rebuilt.spec == spec
    job = job_of(child.session, None, 1, "a test")
    assert job.spec.continues == spec.continues and job.data == str(cancer_csv)
    supervised = child.supervise(max_restarts=1)
    assert supervised.status == "finished" and supervised.parent == parent.run_uri
    assert Session.from_spec(spec, verbose=False).variant({"lr": 0.01}).continuation is None  # a tuning trial

    request = JobRequest(algorithm="tabular-mlp", data=str(cancer_csv), hyperparams={"max_epochs": 1},
                         continues={"run": parent.run_uri, "mode": "finetune"})
    from_request = request.to_spec("alice", home)
    assert from_request.continues == spec.continues and from_request.algorithm == "tabular-mlp"
    assert Session.from_spec(from_request, verbose=False).spec.hyperparams == spec.hyperparams
    check_request(request, home, "alice")  # alice's own run, with a checkpoint
    with pytest.raises(TwinkleError, match="not a run of yours"):
        check_request(request, home, "bob")
    missing = request.model_copy(update={"continues": request.continues.model_copy(
        update={"run": "twinkle://alice/default/run99"})})
    with pytest.raises(RunNotFoundError, match="run99"):
        check_request(missing, home, "alice")
    with pytest.raises(TwinkleError, match="is a run of 'tabular-mlp', not 'resnet18'"):
        check_request(request.model_copy(update={"algorithm": "resnet18"}), home, "alice")
    with pytest.raises(TwinkleError, match="unknown mode 'again'; choose one of resume, continue, finetune"):
        ContinueFrom(parent.run_uri, "again")
    with pytest.raises(TwinkleError, match="same_run=True resumes the run exactly"):
        Trainer.from_checkpoint(parent.run_uri, mode="finetune", same_run=True, home=home)
