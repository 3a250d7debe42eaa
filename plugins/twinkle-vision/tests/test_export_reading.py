"""``twinkle predict model.onnx`` without this plugin: core's NumPy/Pillow readers and decoding (driven by the
card this plugin writes) give the graph exactly the pixels this plugin's own reading gives it, and the rows its
own decoding writes. Nothing is trained here; the trained models' exports are checked end to end, without torch,
in test_classification.py and test_detection.py."""

from __future__ import annotations

import io
from pathlib import Path

import numpy as np
import pytest
import torch
from PIL import Image
from torch.utils.data import DataLoader

from twinkle_core.inference.detection import box_rows
from twinkle_core.inference.images import classifier_batches, detector_batches, detector_input
from twinkle_vision.images import ImageFolderProcessor
from twinkle_vision.samples import write_digits_as_found
from twinkle_vision.yolo.data import YoloDataProcessor


def _exif_rotated(image: Image.Image) -> bytes:
    """``image`` as a JPEG whose EXIF says "rotate 90° clockwise to view" (orientation 6)."""
    exif = image.getexif()
    exif[0x0112] = 6
    buffer = io.BytesIO()
    image.save(buffer, "JPEG", exif=exif, quality=92)
    return buffer.getvalue()


@pytest.fixture(scope="module")
def found(tmp_path_factory) -> Path:
    """Images as users have them: 60 digits as RGB JPEGs of 16–96 px (an RGBA PNG and a palette GIF among them),
    plus an EXIF-rotated JPEG, a 16-bit grey PNG, a palette PNG with transparency, a grey+alpha PNG, an image in a
    nested folder, a loose image at the top, and a hidden file and Thumbs.db that are not images to read."""
    root = write_digits_as_found(tmp_path_factory.mktemp("found") / "digits", count=60, seed=3)
    rng = np.random.default_rng(0)
    extra = root / "extra"
    (extra / "nested").mkdir(parents=True)
    picture = Image.fromarray(rng.integers(0, 256, (37, 61, 3), dtype=np.uint8))
    (extra / "rotated.jpg").write_bytes(_exif_rotated(picture))
    Image.fromarray(rng.integers(0, 65535, (40, 28)).astype(np.uint16)).save(extra / "deep.png")
    palette = picture.convert("P")
    palette.info["transparency"] = 0
    palette.save(extra / "palette.png", transparency=0)
    Image.fromarray(rng.integers(0, 256, (30, 30, 2), dtype=np.uint8), mode="LA").save(extra / "nested" / "la.png")
    picture.resize((50, 20)).save(root / "loose.png")
    (extra / ".hidden.png").write_bytes(b"not read")
    (extra / "Thumbs.db").write_bytes(b"not read")
    return root


@pytest.mark.parametrize("channels, size, store, interpolation", [(1, 32, 36, "bilinear"), (3, 24, 27, "bicubic")])
def test_core_reads_an_image_folder_as_the_plugin_does(found, channels, size, store, interpolation) -> None:
    """For a grey and an RGB classifier (other sizes, crops and filters), core's ``image`` reader, from the card's
    ``preprocessing`` alone, lists the same files in the same order with the same ids as ``read_samples`` and
    gives every image the same pixels (bit for bit) — EXIF orientation, 16-bit, palette and alpha images included."""
    layout = {"size": size, "store": store, "channels": channels, "interpolation": interpolation}
    spec = ImageFolderProcessor._spec(layout, ["a", "b"], [0.5] * channels, [0.25] * channels)
    processor = ImageFolderProcessor()
    card = processor.preprocessing(spec)
    assert (card["size"], card["resize_shorter_side"], card["interpolation"]) == (size, store, interpolation)
    theirs = processor.read_samples(str(found), spec, targets=False)
    batches, ids, details = classifier_batches(str(found), card, batch_size=16)
    ours = np.concatenate([array for _, array in batches])
    assert ids == theirs.ids and details["images"] == len(theirs.ids) == 65
    expected = np.stack([theirs.dataset[i][0].numpy() for i in range(len(theirs.dataset))])
    assert ours.dtype == np.float32 and ours.shape == expected.shape == (65, channels, size, size)
    assert np.array_equal(ours, expected)


@pytest.fixture(scope="module")
def photos(tmp_path_factory) -> Path:
    """Detection inputs of every shape the letterbox handles: the run's own size (96), smaller and larger ones,
    portrait and landscape, an exact 2× reduction, grey, 16-bit grey, RGBA and EXIF-rotated ones — and files ultralytics skips
    (too small, not an image, a GIF named .png) or never lists (hidden)."""
    rng = np.random.default_rng(1)
    root = tmp_path_factory.mktemp("photos")
    (root / "sub").mkdir()

    def noise(height: int, width: int, mode: str = "RGB") -> Image.Image:
        channels = {"RGB": 3, "RGBA": 4, "L": 1}[mode]
        pixels = rng.integers(0, 256, (height, width, channels), dtype=np.uint8)
        return Image.fromarray(pixels[..., 0] if channels == 1 else pixels, mode=mode)

    for name, (height, width) in {"a-same.png": (96, 96), "b-wide.png": (56, 80), "c-big.png": (130, 200),
                                  "d-tall.png": (50, 30), "e-double.png": (192, 192), "f-odd.png": (97, 171)}.items():
        noise(height, width).save(root / name)
    noise(70, 45, "L").save(root / "g-grey.png")
    Image.fromarray(rng.integers(0, 65535, (60, 80)).astype(np.uint16)).save(root / "g-sixteen-bit.png")
    noise(64, 100, "RGBA").save(root / "sub" / "h-alpha.png")
    (root / "sub" / "i-rotated.jpg").write_bytes(_exif_rotated(noise(40, 90)))
    noise(120, 9).save(root / "j-thin.png")  # under 10 px: skipped
    (root / "k-broken.png").write_bytes(b"not an image")
    noise(30, 30).save(root / "l-gif.png", format="GIF")  # a GIF: not a format ultralytics reads
    noise(30, 30).save(root / ".m-hidden.png")
    return root


def test_core_letterboxes_images_as_ultralytics_does(twinkle_home, photos) -> None:
    """Core's ``yolo-images`` reader, from the card alone, lists the images ``read_samples`` lists (same order, ids,
    skipped count) and letterboxes each to the same pixels, bit for bit (OpenCV's bilinear resize done in NumPy),
    with the gains and padding that map boxes back to the image."""
    from twinkle_core import DataSpec

    spec = DataSpec("object_detection", (3, 96, 96), num_classes=3, class_names=("rectangle", "ellipse", "triangle"),
                    extra={"imgsz": 96})
    processor = YoloDataProcessor(image_size=96)
    card = processor.preprocessing(spec)
    theirs = processor.read_samples(str(photos), spec, targets=False)
    batches, ids, details = detector_batches(str(photos), card, batch_size=4)
    assert ids == theirs.ids and len(ids) == 10
    assert details["skipped"] == theirs.details["skipped"] == 4  # too small, not an image, a GIF, hidden
    arrays, boxes = [], []
    for _, array, letterboxes in batches:
        arrays.append(array)
        boxes += letterboxes
    ours = np.concatenate(arrays)
    for i in range(len(theirs.dataset)):
        item = theirs.dataset[i]
        assert np.array_equal(ours[i], item["img"].numpy().astype(np.float32) / np.float32(255)), ids[i]
        (gain_y, gain_x), (left, top) = item["ratio_pad"]
        assert (boxes[i].height, boxes[i].width) == tuple(item["ori_shape"])
        assert boxes[i].gain == pytest.approx((gain_y, gain_x), abs=1e-12) and boxes[i].pad == (left, top)


def test_core_decodes_boxes_as_the_plugin_does(twinkle_home, photos) -> None:
    """On a detector output with crowded, overlapping boxes of three classes and scores around the threshold,
    core's NumPy decoding (the card's ``decoding``: best class, threshold, per-class NMS, ``max_det``, the letterbox
    undone and clipped) writes the rows ``YoloDetector.box_rows`` (ultralytics' NMS) writes: the same classes and
    boxes in the same order, scores within 1e-5 and coordinates within 0.01 px (their rounding)."""
    from twinkle_core import DataSpec
    from twinkle_vision.yolo.model import YoloDetector

    names = ("rectangle", "ellipse", "triangle")
    spec = DataSpec("object_detection", (3, 96, 96), num_classes=3, class_names=names, extra={"imgsz": 96})
    samples = YoloDataProcessor(image_size=96).read_samples(str(photos), spec, targets=False)
    batch = next(iter(DataLoader(samples.dataset, batch_size=6, collate_fn=samples.collate_fn)))
    card = YoloDataProcessor(image_size=96).preprocessing(spec)
    letterboxes = [detector_input((photos / Path(i).relative_to(photos)).read_bytes(), i, card)[1]
                   for i in samples.ids[:6]]
    rng = np.random.default_rng(7)
    anchors = 400
    centres = rng.uniform(0, 96, (6, 2, 8))  # eight clusters an image: neighbours overlap, NMS has work
    outputs = np.zeros((6, 7, anchors), dtype=np.float32)
    pick = rng.integers(0, 8, (6, anchors))
    outputs[:, 0] = np.take_along_axis(centres[:, 0], pick, 1) + rng.normal(0, 3, (6, anchors))
    outputs[:, 1] = np.take_along_axis(centres[:, 1], pick, 1) + rng.normal(0, 3, (6, anchors))
    outputs[:, 2:4] = rng.uniform(4, 60, (6, 2, anchors))
    outputs[:, 4:] = rng.beta(0.6, 3, (6, 3, anchors))
    model = YoloDetector(predict_conf=0.25, iou=0.6, max_det=40)
    model.data_spec = spec
    theirs = model.box_rows(torch.from_numpy(outputs.copy()), batch)
    ours = box_rows(outputs, letterboxes, names, model.export_decoding())
    assert sum(len(row["boxes"]) for row in theirs) > 30
    for mine, expected in zip(ours, theirs):
        assert (mine["width"], mine["height"]) == (expected["width"], expected["height"])
        assert [b["class"] for b in mine["boxes"]] == [b["class"] for b in expected["boxes"]]
        assert np.allclose([b["score"] for b in mine["boxes"]], [b["score"] for b in expected["boxes"]], atol=1e-5)
        assert np.allclose([b["box"] for b in mine["boxes"]], [b["box"] for b in expected["boxes"]], atol=0.011)


def test_core_reads_a_data_yaml_split_as_the_plugin_does(twinkle_home, tmp_path) -> None:
    """Pointed at a YOLO dataset, core's ``yolo-images`` reader (with PyYAML) reads the split ``read_samples``
    reads — ``val`` when there is no ``test``; a ``test:`` given as a ``.txt`` list of ``./`` images relative to
    ``path:`` — in the same order with the same ids."""
    from twinkle_core import DataSpec
    from twinkle_core.inference.images import detector_files
    from twinkle_vision.samples import write_shapes

    yaml = write_shapes(tmp_path / "shapes", train=2, val=5, size=48, seed=4)
    spec = DataSpec("object_detection", (3, 48, 48), num_classes=3, class_names=("rectangle", "ellipse", "triangle"),
                    extra={"imgsz": 48})
    processor = YoloDataProcessor(image_size=48)
    card = processor.preprocessing(spec)
    listed = tmp_path / "elsewhere.yaml"
    (tmp_path / "shapes" / "test.txt").write_text("./images/val/0003.png\n./images/val/0001.png\n")
    listed.write_text("path: shapes\ntrain: images/train\ntest: test.txt\nnames: [rectangle, ellipse, triangle]\n")
    for data, split, count in ((yaml, "val", 5), (tmp_path / "shapes", "val", 5), (listed, "test", 2)):
        theirs = processor.read_samples(str(data), spec, targets=False)
        _, _, ids, details = detector_files(str(data), card)
        assert ids == theirs.ids and len(ids) == count and details["split"] == theirs.details["split"] == split
