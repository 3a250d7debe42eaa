"""``DataProcessor``: opens data at any URI, validates it and builds train/validation datasets.

One processor serves one task and data format. Its typed ``__init__`` keywords are its parameters, routed
to it by name from ``Trainer(hyperparams=...)`` (``label_column``, ``val_fraction``, ``use_mmap``, ...).
"""

from __future__ import annotations

import inspect
import warnings
from abc import ABC, abstractmethod
from dataclasses import dataclass, field
from typing import Any, ClassVar, Mapping

import numpy as np

from twinkle_core.data.errors import SamplesNotSupportedError, UnsupportedFormatError
from twinkle_core.data.spec import DataSpec, ModelInput
from twinkle_core.errors import TwinkleError
from twinkle_core.hyperparams import Hyperparameter, HyperparameterError, declared, validate, with_new_names
from twinkle_core.planning.plan import Decision
from twinkle_core.tasks import check_task
from twinkle_core.uris import join, suffix, twinkle_home


@dataclass(frozen=True)
class PrepareContext:
    """What the engine tells a processor about the run it prepares data for (``prepare(uri, context)``).

    Attributes:
        home: the root of the run store the run uses (``Trainer(home=...)``): derived data is cached there
            (``cache_dir``); ``None``: ``$TWINKLE_HOME``.
        sharded: the data is larger than memory: a processor that can should return streamed datasets
            (``ShardedRows``) instead of loading.
        model_input: what the algorithm's model wants from its input (``twinkle_core.Algorithm.model_input``:
            input size, minimum side, normalisation); ``None`` when it states nothing.
        seed: the split's (and any sampling's) seed.
    """

    home: str | None = None
    sharded: bool = False
    model_input: ModelInput | None = None
    seed: int = 0

    def cache_dir(self, *parts: str) -> str:
        """A folder for data derived from the source, inside the store in use: ``<home>/cache/<parts...>``."""
        return join(self.home or twinkle_home(), "cache", *parts)


@dataclass
class PreparedData:
    """What a processor hands the engine.

    Attributes:
        train: the training dataset (``(input, target)`` samples).
        val: the validation dataset.
        spec: the shape of the data, for building the algorithm.
        fingerprint: the content fingerprint of the source (``md5:...``).
        source: the URI the data came from.
        size_bytes: the source's size on storage.
        details: JSON-ready facts for the run record (class balance, skipped files, ...). The engine adds
            ``train_samples`` and ``val_samples`` (``sample_counts``) for every processor: the one name of those
            counts, whatever a sample is (a row, an image, a clip, a window).
        collate_fn: how samples become a batch (default: torch's ``default_collate``).
        manifest: the per-file fingerprint of the source when the processor computed it while reading (the
            engine then stores it without reading the data again).
        decisions: choices the processor made that the user should see (an input size chosen from the data
            and the model, say), each with its reason; they are printed and stored with the run's plan.
    """

    train: Any
    val: Any
    spec: DataSpec
    fingerprint: str
    source: str
    size_bytes: int = 0
    details: dict[str, Any] = field(default_factory=dict)
    collate_fn: Any = None
    manifest: Any = None
    decisions: list[Decision] = field(default_factory=list)

    def sample_counts(self) -> dict[str, int]:
        """``train_samples`` and ``val_samples``: the splits' lengths (a split without a length is left out)."""
        counts = {}
        for name, split in (("train_samples", self.train), ("val_samples", self.val)):
            try:
                counts[name] = int(len(split))
            except TypeError:  # an iterable dataset: no length to report
                pass
        return counts


@dataclass
class Samples:
    """Test or new data read with a trained run's spec (``DataProcessor.read_samples``), in the source's order.

    Attributes:
        dataset: one item per sample: ``(input, target)`` when ``labelled``, else ``(input,)``, encoded exactly as
            the run's training data was (the same columns, classes, vocabulary, input size, normalisation).
        labelled: whether the source carries targets (``evaluate`` needs them; ``predict`` does not).
        fingerprint: the content fingerprint of the source (``md5:...``).
        source: the URI the samples came from.
        ids: a name for each sample, in order, saying where it came from: ``predict`` writes it beside the sample's
            row. A table's data-row number (1-based, the header not counted), an image's path below the folder
            given, a prompt's ``file:line``, a symbol (docs/plugins/data-processor.md lists each processor's).
        details: JSON-ready facts about the read: rows left out and why (``unseen_classes``: rows whose class the
            run never trained on, by class — they are reported, not scored), files skipped.
        collate_fn: how samples become a batch (default: torch's ``default_collate``).
    """

    dataset: Any
    labelled: bool
    fingerprint: str
    source: str
    ids: list[str] = field(default_factory=list)
    details: dict[str, Any] = field(default_factory=dict)
    collate_fn: Any = None


class DataProcessor(ABC):
    """Base class of every data processor.

    Class attributes a subclass sets:
        task: the task it serves when ``__init__`` does not pass one.
        formats: file suffixes it reads (``("csv", "parquet")``), used to pick a processor by URI.
    """

    task: str | None = None
    formats: ClassVar[tuple[str, ...]] = ()
    renamed_parameters: ClassVar[dict[str, str]] = {}
    """Old names of ``__init__`` parameters (old → new), still accepted as hyperparameters for a release with a
    ``DeprecationWarning`` that names the new one."""
    home: str | None = None
    """0.2's way of passing ``PrepareContext.home`` (set before ``prepare``); still read when no context is given."""
    sharded: bool = False
    """0.2's way of passing ``PrepareContext.sharded``; still read when no context is given."""
    model_input: ModelInput | None = None
    """0.2's way of passing ``PrepareContext.model_input``; still read when no context is given."""

    def __init__(self, task: str | None = None) -> None:
        """Set the task (checked against the known tasks)."""
        resolved = task or type(self).task
        if not resolved:
            raise TwinkleError(f"{type(self).__name__} declares no task; set the class attribute task")
        self.task = check_task(resolved)

    @classmethod
    def parameters(cls) -> dict[str, Hyperparameter]:
        """The processor's parameters: its ``__init__`` keywords (except ``task``)."""
        return declared(cls.__init__, "data") if cls.__init__ is not DataProcessor.__init__ else {}

    @classmethod
    def from_params(cls, params: Mapping[str, Any] | None = None, task: str | None = None, *,
                    typed: bool = False) -> DataProcessor:
        """Validate ``params`` against ``parameters`` and build the processor (``typed``: already coerced).

        Raises:
            HyperparameterError: an unknown name (listing the valid ones) or a badly typed value.
        """
        given = with_new_names(params or {}, cls.renamed_parameters, cls.__name__)
        values = validate(cls.parameters(), given, cls.__name__, typed=typed)
        if task is not None and "task" in inspect.signature(cls.__init__).parameters:
            values["task"] = task
        return cls(**values)

    @abstractmethod
    def prepare(self, uri: str, context: PrepareContext | None = None) -> PreparedData:
        """Open ``uri``, validate it and return train/validation datasets split with ``context.seed``.

        ``context`` says what the run needs (``PrepareContext``); ``None`` (a call outside a run):
        ``self.context()``. A processor written for 0.2 takes ``prepare(uri, seed=0)`` and reads ``home``,
        ``sharded`` and ``model_input`` from itself: the engine still calls it that way, with a
        ``DeprecationWarning``.

        Raises:
            twinkle_core.data.errors.DataError: (and its subclasses) naming the file, row or column.
        """

    def read_samples(self, uri: str, spec: DataSpec, context: PrepareContext | None = None, *,
                     targets: bool = True) -> Samples:
        """Read test or new data at ``uri`` as a run trained on ``spec`` reads it — the same columns, classes,
        vocabulary, input size and normalisation; nothing is fitted on this data — labelled or not.

        ``evaluate`` scores a run on labelled samples: ``read_samples(uri, spec, context)``, ``(input, target)``
        items. ``predict`` runs it on any: ``read_samples(uri, spec, context, targets=False)`` reads every sample,
        as unlabelled ``(input,)`` items, whatever labels the source carries — and data without labels is no error.
        A processor that supports them overrides this, keeping the ``targets`` keyword (the plugin contract checks
        it; ``twinkle_core.testing.assert_data_processor`` runs both reads on sample data), and ``samples_from`` for
        in-memory samples; the base refuses by name.

        Raises:
            SamplesNotSupportedError: this processor does not read samples for a trained run.
            twinkle_core.data.errors.DataError: the data differs from the run's (missing columns, other
                channels), naming the difference and the fix; an empty source.
        """
        raise SamplesNotSupportedError(
            f"{type(self).__name__} cannot read data for a trained run (evaluate, predict): it does not implement "
            "DataProcessor.read_samples(uri, spec, context); ask its plugin's authors, or pass a processor that does "
            "(data_processor=...)")

    def preprocessing(self, spec: DataSpec) -> dict[str, Any]:
        """How raw data becomes the model's input for a run trained on ``spec``, as JSON-ready values every
        export carries (its inference card): ``reader`` names the kind of data (``"table"``: ``columns`` in order;
        ``"image"``: ``size``, ``crop_pct``, ``mean``, ``std``, ``interpolation``; ...) and ``scaling`` says where
        normalisation happens (``"inside the model"``, or the values). ``{}`` (the base): not described, so only
        this processor's plugin can prepare data for the export."""
        return {}

    def samples_from(self, items: Any, spec: DataSpec) -> Samples:
        """In-memory samples (a table, images, texts — what the processor's format holds) as unlabelled
        ``Samples`` for ``predict``, encoded as ``read_samples`` encodes a file's.

        Raises:
            SamplesNotSupportedError: this processor takes no in-memory samples.
        """
        raise SamplesNotSupportedError(
            f"{type(self).__name__} takes no in-memory samples for predict: pass a path or URI instead (or implement "
            "DataProcessor.samples_from(items, spec))")

    def context(self, given: PrepareContext | int | None = None) -> PrepareContext:
        """``given``, or — for a call without one — a context from this processor's 0.2-style attributes
        (``home``, ``sharded``, ``model_input``; seed 0). An ``int`` is 0.2's positional seed
        (``super().prepare(uri, seed)`` in a subclass written for 0.2): that seed, with a ``DeprecationWarning``."""
        if isinstance(given, PrepareContext):
            return given
        seed = 0
        if isinstance(given, int) and not isinstance(given, bool):
            warnings.warn(f"{type(self).__name__}.prepare(uri, {given}): a seed in context's place is 0.2's call; "
                          f"pass PrepareContext(seed={given})", DeprecationWarning, stacklevel=3)
            seed = given
        return PrepareContext(home=self.home, sharded=self.sharded, model_input=self.model_input, seed=seed)

    def cache_dir(self, *parts: str) -> str:
        """A folder for derived data under ``self.home`` (0.2's attribute): ``PrepareContext.cache_dir`` is the
        one a context-taking ``prepare`` uses."""
        return self.context().cache_dir(*parts)

    def write_index(self, src: str, dst: str) -> str:
        """Decode ``src`` into the index file ``dst`` (see ``twinkle_core.data.index``)."""
        raise TwinkleError(f"{type(self).__name__} cannot build an index")

    @classmethod
    def build_index(cls, src: str, dst: str, *, task: str | None = None, **params: Any) -> str:
        """Decode ``src`` once into the index file ``dst``; later runs memory-map it (``use_mmap=True``) or
        stream it in shards (data larger than memory).

        On the base class it picks the registered processor that reads ``src`` (by its suffix, or a folder),
        as the article writes it:

        ```python
        DataProcessor.build_index("dataset/", "index.idx")
        TabularProcessor.build_index("s3://bucket/data.csv", "data.idx", label_column="y")
        Trainer("tabular-mlp", hyperparams={"use_mmap": True}).fit(data="data.idx")
        ```

        Raises:
            TwinkleError: no registered processor reads ``src`` (or several do: pass ``task=``).
        """
        if inspect.isabstract(cls):
            return _processor_for(src, task).from_params(params, task=task).write_index(src, dst)
        return cls.from_params(params, task=task).write_index(src, dst)

    def check_format(self, uri: str) -> str:
        """The lower-case suffix of ``uri``, raising ``UnsupportedFormatError`` if not in ``formats``."""
        extension = suffix(uri)
        if self.formats and extension not in self.formats:
            raise UnsupportedFormatError(
                f"{type(self).__name__} cannot read '{uri}': expected a file ending in "
                f"{', '.join('.' + f for f in self.formats)}"
            )
        return extension


def prepare_data(processor: DataProcessor, uri: str, context: PrepareContext) -> PreparedData:
    """``processor.prepare(uri, context)`` — or, for a processor written against 0.2 (``prepare(uri, seed=0)``,
    configured by attribute), its attributes set from ``context`` and ``prepare(uri, seed=context.seed)``, with a
    ``DeprecationWarning`` naming the new signature."""
    if "context" in inspect.signature(type(processor).prepare).parameters:
        return processor.prepare(uri, context)
    name = type(processor).__name__
    warnings.warn(f"{name}.prepare(uri, seed) is twinkle-core 0.2's signature, configured by attributes: take "
                  f"prepare(self, uri, context: PrepareContext | None = None) and read context.home, .sharded, "
                  f".model_input and .seed (the old one is called until the next minor release)",
                  DeprecationWarning, stacklevel=2)
    processor.home, processor.sharded, processor.model_input = context.home, context.sharded, context.model_input
    return processor.prepare(uri, seed=context.seed)  # type: ignore[call-arg]


def _processor_for(src: str, task: str | None) -> type[DataProcessor]:
    """The registered processor class that reads ``src`` (by suffix, or a folder) and can build an index."""
    from twinkle_core.lookup import list_components
    from twinkle_core.uris import require_exists

    from twinkle_core.data.hf import HF_FORMAT, is_hf_dataset

    fs, path = require_exists(src)
    extension = HF_FORMAT if is_hf_dataset(src) else "folder" if fs.isdir(path) else suffix(src)
    found = []
    for component in list_components("data_processor", task=task):
        if extension not in component.formats:
            continue
        cls = component.load()
        if isinstance(cls, type) and issubclass(cls, DataProcessor) and cls.write_index is not DataProcessor.write_index:
            found.append((component.qualified_name, cls))
    if len(found) != 1:
        names = ", ".join(name for name, _ in found) or "none"
        raise TwinkleError(
            f"cannot tell which data processor builds an index of '{src}' (format '{extension}'; processors "
            f"that index it: {names}); pass task=... or call build_index on the processor class"
        )
    return found[0][1]


def split_indices(
    n: int, val_fraction: float, seed: int, labels: np.ndarray | None = None
) -> tuple[np.ndarray, np.ndarray]:
    """A deterministic train/validation split of ``range(n)``; stratified by ``labels`` when given.

    Raises:
        HyperparameterError: ``val_fraction`` outside (0, 1).
    """
    if not 0.0 < val_fraction < 1.0:
        raise HyperparameterError(f"val_fraction must be between 0 and 1, got {val_fraction}")
    rng = np.random.default_rng(seed)
    groups = [np.arange(n)] if labels is None else [np.flatnonzero(labels == c) for c in np.unique(labels)]
    train, val = [], []
    for group in groups:
        order = rng.permutation(group)
        n_val = int(round(len(order) * val_fraction))
        if len(order) > 1:
            n_val = min(max(n_val, 1), len(order) - 1)
        val.append(order[:n_val])
        train.append(order[n_val:])
    return np.sort(np.concatenate(train)), np.sort(np.concatenate(val))
