"""The batched image path (issue 51): images decoded once into an index by default, each batch gathered by one index
and transformed as tensors — the centre crop equal to the per-image one, the training transforms drawing timm's
crop boxes, flips and colour factors per image — and the per-image path kept where a policy needs PIL."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
import torch

from twinkle_core.data import PrepareContext
from twinkle_vision.images import ArrayImages, FileImages, ImageFolderProcessor
from twinkle_vision.transforms import EvalTransform, TrainTransform, crop_boxes


def _stored(count: int = 8, channels: int = 3, side: int = 36) -> np.ndarray:
    return np.random.default_rng(0).integers(0, 256, (count, channels, side, side), dtype=np.uint8)


def test_a_batch_is_centre_cropped_exactly_as_each_image_is() -> None:
    """EvalTransform's batch path gives the per-image path's floats bit for bit."""
    images = _stored()
    crop = EvalTransform(32)
    batched = crop.batch(torch.from_numpy(images))
    assert torch.equal(batched, torch.stack([crop(image) for image in images]))


def test_training_batches_are_transformed_at_once_with_every_images_own_draws() -> None:
    """A training batch comes back at the input size in [0, 1] with its labels in order; each image draws its own
    crop (two images of one batch differ where the same image twice would not), and a fixed seed repeats it."""
    images = np.repeat(_stored(1), 6, axis=0)  # one image six times
    labels = np.arange(6)
    transform = TrainTransform(32, 3, (0.3, 1.0), (0.75, 4 / 3), 0.5, 0.0, 0.4, None, "bilinear")
    dataset = ArrayImages(images, labels, np.arange(6), transform)
    torch.manual_seed(0)
    batch = dataset.__getitems__([5, 0, 3])
    assert [int(y) for _, y in batch] == [5, 0, 3]
    x = torch.stack([image for image, _ in batch])
    assert x.shape == (3, 3, 32, 32) and 0 <= float(x.min()) and float(x.max()) <= 1
    assert not torch.allclose(x[0], x[1])  # the same stored image, two different views
    torch.manual_seed(0)
    again = torch.stack([image for image, _ in dataset.__getitems__([5, 0, 3])])
    assert torch.equal(x, again)


def test_crop_boxes_follow_timms_rule() -> None:
    """Every box lies inside the image with an area in the scale range and an aspect in the ratio range (as timm's
    RandomResizedCrop draws them); where no draw can fit, the central crop clamped to the ratio."""
    torch.manual_seed(1)
    top, left, height, width = crop_boxes(2000, 36, 36, (0.2, 0.9), (0.75, 4 / 3))
    assert bool((top >= 0).all() and (left >= 0).all() and (top + height <= 36).all() and (left + width <= 36).all())
    area = height * width / 36**2
    assert 0.17 <= float(area.min()) and float(area.max()) <= 0.95  # the range, give or take rounding to pixels
    assert 0.7 <= float((width / height).min()) and float((width / height).max()) <= 1.4
    top, left, height, width = crop_boxes(4, 36, 36, (1.0, 1.0), (2.0, 3.0))  # the whole image cannot be 2:1
    assert torch.equal(width, torch.full((4,), 36.0)) and torch.equal(height, torch.full((4,), 18.0))
    assert torch.equal(top, torch.full((4,), 9.0)) and torch.equal(left, torch.zeros(4))


def test_the_whole_image_resampled_by_the_batch_path_matches_pils_resize() -> None:
    """With the crop the whole image and no jitter, the batch path's bilinear resampling of a 36-px image to 32 px
    lies within a few grey levels of the per-image path (timm's PIL resize)."""
    images = np.stack([np.kron(np.arange(36 * 36, dtype=np.float64).reshape(36, 36) % 251, np.ones((1, 1)))
                       .astype(np.uint8)[None]] * 2)
    transform = TrainTransform(32, 1, (1.0, 1.0), (1.0, 1.0), 0.0, 0.0, 0.0, None, "bilinear")
    batched = transform.batch(torch.from_numpy(images))
    single = torch.stack([transform(image) for image in images])
    assert batched.shape == single.shape == (2, 1, 32, 32)
    assert float((batched - single).abs().mean()) < 6 / 255


def test_a_pil_policy_keeps_the_per_image_path() -> None:
    """RandAugment-style policies are PIL operations: such a transform offers no batch path, and the dataset reads
    the batch image by image."""
    transform = TrainTransform(32, 3, (0.7, 1.0), (0.75, 4 / 3), 0.0, 0.0, 0.0, "rand-m9-mstd0.5", "bilinear")
    assert transform.batch is None
    dataset = ArrayImages(_stored(3), np.arange(3), np.arange(3), transform)
    batch = dataset.__getitems__([0, 2])
    assert [tuple(image.shape) for image, _ in batch] == [(3, 32, 32)] * 2


def test_images_are_decoded_once_by_default_and_from_their_files_when_asked(tmp_path: Path,
                                                                         digits_folder: Path) -> None:
    """By default the folder is decoded once into an index cached in the store (the plan's image_path decision
    says so, and the next preparation reuses it); use_mmap=False reads the files every epoch."""
    context = PrepareContext(home=str(tmp_path / "home"))
    prepared = ImageFolderProcessor().prepare(str(digits_folder), context)
    assert isinstance(prepared.train, ArrayImages)
    decision = next(d for d in prepared.decisions if d.name == "image_path")
    assert decision.value == "decoded index" and "1797 images decode to" in decision.reason
    again = ImageFolderProcessor().prepare(str(digits_folder), context)
    assert "earlier run" in next(d for d in again.decisions if d.name == "image_path").reason
    x, y = again.train.__getitems__([0, 1])[0]
    assert x.shape == (1, 32, 32) and y.dtype == torch.int64
    files = ImageFolderProcessor(use_mmap=False).prepare(str(digits_folder), context)
    assert isinstance(files.train, FileImages) and not any(d.name == "image_path" for d in files.decisions)
    assert torch.equal(files.val.__getitems__([3])[0][0], again.val.__getitems__([3])[0][0])


@pytest.mark.parametrize("interpolation", ["bicubic", "nearest"])
def test_other_filters_resample_in_the_batch_path(interpolation: str) -> None:
    """Bicubic and nearest resampling stay in the batch path (grid_sample has both)."""
    transform = TrainTransform(24, 3, (0.5, 1.0), (0.75, 4 / 3), 0.0, 0.0, 0.2, None, interpolation)
    out = transform.batch(torch.from_numpy(_stored(4)))
    assert out.shape == (4, 3, 24, 24) and 0 <= float(out.min()) and float(out.max()) <= 1


def test_a_datasets_image_set_gives_the_same_training_images_as_the_folder_it_was_made_from(
        tmp_path: Path, digits_folder: Path) -> None:
    """The digits PNGs as a dataset written by ``datasets`` itself (an Image column with the files' bytes and a
    ClassLabel, save_to_disk of train and test splits): its train split is decoded once into the cached index, to
    the same images, labels, classes and split as the class folders (so it trains to the same metrics); an
    evaluation reads its test split, labelled by class name, with each image named by shard and row; a dataset
    without an Image column is refused naming its features."""
    from datasets import ClassLabel, Dataset, DatasetDict, Features, Image, Value

    from twinkle_core.data import DataError

    classes = sorted(p.name for p in digits_folder.iterdir() if p.is_dir())
    files = [(c, p) for c in classes for p in sorted((digits_folder / c).iterdir())]
    features = Features({"image": Image(), "label": ClassLabel(names=classes)})

    def rows(items: list[tuple[str, Path]]) -> Dataset:
        return Dataset.from_dict({"image": [{"bytes": p.read_bytes(), "path": None} for _, p in items],
                                  "label": [classes.index(c) for c, _ in items]}, features=features)

    saved = tmp_path / "digits-hf"
    DatasetDict({"train": rows(files), "test": rows(files[::50])}).save_to_disk(str(saved))
    context = PrepareContext(home=str(tmp_path / "home"))
    want = ImageFolderProcessor().prepare(str(digits_folder), context)
    got = ImageFolderProcessor().prepare(str(saved), context)
    assert got.spec.class_names == want.spec.class_names and got.details["images"] == len(files)
    assert np.array_equal(np.asarray(got.train.images), np.asarray(want.train.images))
    assert np.array_equal(got.train.rows, want.train.rows) and np.array_equal(got.val.rows, want.val.rows)
    assert np.array_equal(np.asarray(got.train.labels), np.asarray(want.train.labels))
    assert "Hugging Face dataset" in next(d for d in got.decisions if d.name == "image_path").reason

    samples = ImageFolderProcessor().read_samples(str(saved), got.spec)
    assert samples.labelled and len(samples.dataset) == len(files[::50])
    assert samples.ids[0] == "data-00000-of-00001.arrow, row 1"
    assert int(samples.dataset[0][1]) == classes.index(files[0][0])

    plain = tmp_path / "no-image"
    Dataset.from_dict({"pixels": ["x", "y"], "label": [0, 1]},
                      features=Features({"pixels": Value("string"), "label": ClassLabel(names=["a", "b"])})
                      ).save_to_disk(str(plain))
    with pytest.raises(DataError, match="has no Image column"):
        ImageFolderProcessor().prepare(str(plain), context)
