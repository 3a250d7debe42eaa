"""``check_data_processor``: a data processor run on a plugin's own sample data as ``fit``, ``evaluate`` and
``predict`` run it — the part of the contract that needs data, so a plugin's tests run it on theirs:

```python
from twinkle_core.testing import assert_data_processor

def test_the_processor_reads_what_evaluate_and_predict_need(tmp_path):
    assert_data_processor("acme-jsonl", "points.jsonl", unlabelled="new-points.jsonl")
```

Its checks (``PROCESSOR_CHECKS``): ``prepare`` reads the data (``fit``); ``read_samples(data, spec, context)`` reads
it as labelled samples (``evaluate``); ``read_samples(unlabelled, spec, context, targets=False)`` reads data without
labels as unlabelled samples (``predict``). Each read must give an id per sample and make a batch.
"""

from __future__ import annotations

import tempfile
from typing import TYPE_CHECKING, Any, Mapping, Union

from twinkle_core.errors import TwinkleError
from twinkle_core.testing.contract import ContractReport, read_samples_call_problem

if TYPE_CHECKING:  # the data layer is imported when a check runs, not with the pytest plugin
    from twinkle_core.data.processor import DataProcessor

ProcessorRef = Union[str, "type[DataProcessor]", "DataProcessor"]
"""A registered data processor's name, a ``DataProcessor`` subclass, or an instance."""

PROCESSOR_CHECKS: tuple[str, ...] = (
    "prepares training data (fit)",
    "reads labelled samples (evaluate)",
    "reads unlabelled samples (predict)",
)
"""The checks of ``check_data_processor``, in order."""


def check_data_processor(
    processor: ProcessorRef,
    data: str,
    *,
    unlabelled: str | None = None,
    hyperparams: Mapping[str, Any] | None = None,
    task: str | None = None,
    home: str | None = None,
) -> ContractReport:
    """Run ``processor`` on sample data as ``fit``, ``evaluate`` and ``predict`` run it; report what fails.

    Args:
        processor: a registered data processor's name, a ``DataProcessor`` subclass or an instance.
        data: labelled data in the processor's format (small: it is read three times).
        unlabelled: data as ``predict`` gets it, without labels (default: ``data``, read with ``targets=False``).
        hyperparams: the processor's parameters (for a name or a class).
        task: the task to build it for (default: the registration's or the class's).
        home: the run store whose cache a processor may write derived data to (default: a temporary folder).

    Raises:
        TwinkleError: ``processor`` is no registered name (``UnknownComponentError``, with close matches), not a
            ``DataProcessor``, or an instance given ``hyperparams``.
    """
    from twinkle_core.data.processor import DataProcessor, PrepareContext, prepare_data

    name, instance = _resolve(processor, hyperparams, task)
    report = ContractReport(name, subject="data processor")
    with tempfile.TemporaryDirectory(prefix="twinkle-processor-check-") as scratch:
        context = PrepareContext(home=home or scratch, seed=0)
        try:
            prepared = prepare_data(instance, data, context)
        except Exception as err:  # a plugin's own code: every failure is the finding
            report.problems.append(f"prepare('{data}', context) raised {type(err).__name__}: {err}")
            return report
        report.checked.append(PROCESSOR_CHECKS[0])
        if type(instance).read_samples is DataProcessor.read_samples:
            report.notes.append("it does not implement read_samples: evaluate and predict refuse its runs")
            report.skipped.extend(f"{check}: no read_samples" for check in PROCESSOR_CHECKS[1:])
            return report
        problem = read_samples_call_problem(type(instance))
        if problem:
            report.problems.append(problem)
            return report
        spec = prepared.spec
        found = len(report.problems)
        samples = _read(report, instance, data, spec, context, targets=True)
        if samples is not None and not samples.labelled:
            report.problems.append(
                f"read_samples('{data}', spec, context) returned unlabelled samples of data that carries targets; "
                "evaluate scores labelled samples: return Samples(..., labelled=True) with (input, target) items")
        if len(report.problems) == found:
            report.checked.append(PROCESSOR_CHECKS[1])
        found = len(report.problems)
        source = unlabelled or data
        samples = _read(report, instance, source, spec, context, targets=False)
        if samples is not None and samples.labelled:
            report.problems.append(
                f"read_samples('{source}', spec, context, targets=False) returned labelled samples; predict reads "
                "every sample unlabelled: return Samples(..., labelled=False) with (input,) items when targets=False")
        if len(report.problems) == found:
            report.checked.append(PROCESSOR_CHECKS[2])
    return report


def assert_data_processor(processor: ProcessorRef, data: str, **kwargs: Any) -> ContractReport:
    """Like ``check_data_processor``, but raise ``AssertionError`` listing every problem."""
    report = check_data_processor(processor, data, **kwargs)
    if not report.ok:
        raise AssertionError(str(report))
    return report


def _resolve(processor: ProcessorRef, hyperparams: Mapping[str, Any] | None, task: str | None) -> tuple[str, Any]:
    """The processor's name and an instance of it."""
    from twinkle_core.data.processor import DataProcessor
    from twinkle_core.lookup import get_component

    if isinstance(processor, DataProcessor):
        if hyperparams:
            raise TwinkleError(f"hyperparams= configures a processor given by name or class, not an instance "
                               f"({type(processor).__name__}); pass the class, or build the instance with them")
        return type(processor).__name__, processor
    name = processor if isinstance(processor, str) else getattr(processor, "__name__", repr(processor))
    if isinstance(processor, str):
        component = get_component("data_processor", processor)
        processor, task = component.load(), task or component.task
    if not (isinstance(processor, type) and issubclass(processor, DataProcessor)):
        raise TwinkleError(f"{name!r} is not a DataProcessor subclass, an instance or a registered processor's name; "
                           "see twinkle data-processors list")
    return name, processor.from_params(dict(hyperparams or {}), task=task)


def _read(report: ContractReport, processor: Any, uri: str, spec: Any, context: Any, *, targets: bool) -> Any:
    """``read_samples`` as evaluate (``targets``) or predict calls it, and the checks every read must pass: an id per
    sample, at least one sample, a batch that collates. ``None`` when it raised (the problem is reported)."""
    call = f"read_samples('{uri}', spec, context{'' if targets else ', targets=False'})"
    need = "evaluate reads labelled data" if targets else "predict reads data without targets"
    try:
        samples = (processor.read_samples(uri, spec, context) if targets
                   else processor.read_samples(uri, spec, context, targets=False))
    except Exception as err:  # a plugin's own code: every failure is the finding
        fix = "read every sample unlabelled when targets=False" if not targets else "read it as fit reads it"
        report.problems.append(f"{call} raised {type(err).__name__}: {err}; {need}: {fix}")
        return None
    try:
        count = len(samples.dataset)
    except TypeError:  # an iterable dataset: no length to compare
        count = None
    if count == 0:
        report.problems.append(f"{call} returned no sample; {need}: give it the samples of '{uri}'")
        return samples
    ids = list(samples.ids or ())
    if count is not None and len(ids) != count:
        report.problems.append(f"{call} gave {len(ids)} ids for {count} samples; give one id per sample, in order "
                               "(predict writes it beside each row)")
    elif not all(isinstance(i, str) and i for i in ids):
        report.problems.append(f"{call} gave ids that are not non-empty strings ({ids[:3]!r}); name each sample")
    from torch.utils.data import DataLoader

    try:
        next(iter(DataLoader(samples.dataset, batch_size=2, shuffle=False, collate_fn=samples.collate_fn)))
    except Exception as err:  # the plugin's dataset or collate function
        report.problems.append(f"a batch of {call}'s samples does not collate ({type(err).__name__}: {err}); "
                               "give Samples the collate_fn that batches them")
    return samples

