"""Image folders as users have them: mixed sizes and modes, EXIF, damaged files, OS litter, the input size
chosen from the model and the data (and explained in the plan)."""

from __future__ import annotations

import io
import json
import shutil
from pathlib import Path

import numpy as np
import pytest
import torch
from PIL import Image

from twinkle_core import Trainer
from twinkle_core.data import UnsupportedFormatError
from twinkle_vision.classification import ResNet18, TimmClassifier
from twinkle_vision.imagefiles import CorruptImageError, decode_image
from twinkle_vision.images import ImageFolderProcessor
from twinkle_vision.samples import write_digits_as_found
from twinkle_vision.transforms import choose_size


@pytest.fixture(scope="module")
def as_found(tmp_path_factory) -> Path:
    """600 digits as RGB JPEGs of 16–64 px (some not square; median about 40: mixed as found, at half the pixels
    of the default 16–96), one RGBA PNG, one palette GIF."""
    return write_digits_as_found(tmp_path_factory.mktemp("found") / "digits", sides=(16, 64))


def test_the_articles_call_trains_a_mixed_size_folder_without_image_size(twinkle_home, as_found) -> None:
    trainer = Trainer(algorithm="resnet18", task="image_classification",
                      hyperparams={"lr": 1e-3, "batch_size": 64, "max_epochs": 10}, verbose=False)
    result = trainer.fit(data=str(as_found))
    assert result.status == "finished" and result.best_metric >= 0.97
    decision = next(d for d in result.plan.decisions if d.name == "input_size")
    median = int(np.median([min(Image.open(p).size) for p in as_found.rglob("*.*")]))
    assert decision.value == median and trainer.algorithm.data_spec.input_shape[1:] == (
        decision.value, decision.value)
    assert "own resolution" in decision.reason and "resnet18's own size is 224" in decision.reason
    stored = json.loads((Path(result.run_dir) / "plan.json").read_text())
    assert any(d["name"] == "input_size" and d["value"] == median for d in stored["decisions"])


def test_the_input_size_comes_from_the_model_and_the_images() -> None:
    resnet = ResNet18().model_input()
    assert (resnet.size, resnet.min_size, resnet.fixed, resnet.interpolation) == ((224, 224), 32, False, "bicubic")
    tiny = choose_size(None, resnet, 8, "8 px")
    assert tiny.value == 32 and "upsampled to 32" in tiny.reason
    assert choose_size(None, resnet, 480, "300–800 px (median 480)").value == 224
    assert choose_size(24, resnet, 480, "x").value == 24
    vit = TimmClassifier(model_name="vit_tiny_patch16_224").model_input()
    assert vit.fixed and choose_size(None, vit, 40, "40 px").value == 224
    assert choose_size(None, None, 57, "57 px").value == 57  # no model config: the images' own size


def _encoded(image: Image.Image, fmt: str, **options) -> bytes:
    buffer = io.BytesIO()
    image.save(buffer, format=fmt, **options)
    return buffer.getvalue()


def test_modes_formats_and_exif_orientation_decode_as_expected() -> None:
    transparent = Image.new("RGBA", (20, 10), (0, 0, 0, 0))
    assert decode_image(_encoded(transparent, "PNG"), "t.png", None, 3).min() == 255  # over white, not black
    sixteen = Image.fromarray(np.full((12, 12), 65535 // 2, dtype=np.uint16))
    assert abs(int(decode_image(_encoded(sixteen, "PNG"), "d.png", None, 1)[0, 0, 0]) - 127) <= 1  # not clipped
    palette = Image.new("RGB", (12, 12), (200, 10, 10)).convert("P")
    assert decode_image(_encoded(palette, "GIF"), "p.gif", None, 3)[:, 0, 0].tolist()[0] > 150
    wide = Image.new("RGB", (40, 20), (10, 200, 10))
    exif = Image.Exif()
    exif[0x0112] = 6  # rotate 90°: the stored 40×20 is a 20×40 picture
    assert decode_image(_encoded(wide, "JPEG", exif=exif), "r.jpg", None, 3).shape == (3, 40, 20)
    for fmt in ("WEBP", "BMP", "TIFF", "JPEG"):
        image = Image.new("CMYK" if fmt == "TIFF" else "RGB", (30, 50), 60)
        out = decode_image(_encoded(image, fmt), f"x.{fmt.lower()}", 16, 3)
        assert out.shape == (3, 16, 16) and out.dtype == np.uint8


def _small_tree(root: Path, as_found: Path, per_class: int = 12) -> Path:
    for name in ("3", "8"):
        (root / name).mkdir(parents=True)
        for image in sorted((as_found / name).glob("*.jpg"))[:per_class]:
            shutil.copy(image, root / name / image.name.replace(".jpg", ".JPEG"))
    return root


def test_bad_files_stop_the_run_or_are_skipped_counted_and_listed(twinkle_home, tmp_path, as_found) -> None:
    root = _small_tree(tmp_path / "tree", as_found)
    (root / "3" / ".DS_Store").write_bytes(b"\x00\x01")  # operating-system litter is ignored
    (root / "8" / "Thumbs.db").write_bytes(b"\x00\x01")
    (root / "3" / "broken.png").write_bytes(b"not a png")
    data = (root / "8" / sorted(p.name for p in (root / "8").iterdir() if p.suffix == ".JPEG")[0]).read_bytes()
    (root / "8" / "truncated.jpg").write_bytes(data[: len(data) // 2])
    (root / "8" / "notes.txt").write_text("labels by hand")
    with pytest.raises(CorruptImageError, match=r"image '.*3/broken.png' cannot be decoded.*bad_files='skip'"):
        ImageFolderProcessor().prepare(str(root))
    (root / "3" / "broken.png").rename(tmp_path / "broken.png")
    with pytest.raises(UnsupportedFormatError, match=r"'.*8/notes.txt' is not an image file"):
        ImageFolderProcessor().prepare(str(root))
    (root / "3" / "broken.png").write_bytes((tmp_path / "broken.png").read_bytes())
    trainer = Trainer("resnet18", hyperparams={"bad_files": "skip", "max_epochs": 1, "batch_size": 8}, verbose=False)
    result = trainer.fit(str(root))
    assert result.status == "finished"
    record = json.loads((Path(result.run_dir) / "data.json").read_text())
    skipped = {Path(s["path"]).name: s["reason"] for s in record["skipped"]}
    assert record["skipped_files"] == 3 and set(skipped) == {"broken.png", "truncated.jpg", "notes.txt"}
    assert record["images"] == 24 and "truncated" in skipped["truncated.jpg"].lower()  # PIL: "Truncated File Read"
    assert any(d.name == "bad_files" and d.value == 3 for d in result.plan.decisions)


def test_the_decoded_once_cache_works_for_mixed_sizes(twinkle_home, tmp_path, as_found) -> None:
    root = _small_tree(tmp_path / "tree", as_found)
    processor = ImageFolderProcessor(use_mmap=True)
    processor.model_input = ResNet18().model_input()
    mapped = processor.prepare(str(root))
    cached = list((twinkle_home / "cache" / "images").glob("*.idx"))
    assert len(cached) == 1
    stamp = cached[0].stat().st_mtime_ns
    again = processor.prepare(str(root))
    assert cached[0].stat().st_mtime_ns == stamp and len(list(cached[0].parent.glob("*.idx"))) == 1
    files = ImageFolderProcessor()
    files.model_input = processor.model_input
    plain = files.prepare(str(root))
    size = plain.details["input_size"]
    assert mapped.spec == again.spec and mapped.spec.input_shape == plain.spec.input_shape == (3, size, size)
    assert mapped.spec.extra["preprocess"] == plain.spec.extra["preprocess"]
    assert mapped.spec.extra["std"] == pytest.approx(plain.spec.extra["std"])
    for i in range(len(plain.val)):  # validation is deterministic: the cached and decoded images agree
        assert torch.equal(mapped.val[i][0], plain.val[i][0])
    first, second = mapped.train[0][0], mapped.train[0][0]
    assert first.shape == (3, size, size) and not torch.equal(first, second)  # training views are augmented
    other = ImageFolderProcessor(use_mmap=True, image_size=24)
    other.model_input = processor.model_input
    assert other.prepare(str(root)).spec.input_shape == (3, 24, 24)
    assert len(list(cached[0].parent.glob("*.idx"))) == 2  # another layout, another cached index


def test_a_bad_augmentation_policy_is_refused_before_anything_runs() -> None:
    with pytest.raises(Exception, match="auto_augment='trivial' is not a timm augmentation policy"):
        ImageFolderProcessor(auto_augment="trivial")
    ImageFolderProcessor(auto_augment="rand-m9-mstd0.5")


def test_without_a_model_config_the_images_own_size_is_kept(tmp_path, as_found) -> None:
    root = _small_tree(tmp_path / "tree", as_found, per_class=4)
    prepared = ImageFolderProcessor().prepare(str(root))
    median = int(np.median([min(Image.open(p).size) for p in root.rglob("*.JPEG")]))
    assert prepared.details["input_size"] == max(32, median) and prepared.details["channels"] == 3
    assert prepared.spec.extra["preprocess"]["center_crop"] == prepared.details["input_size"]
