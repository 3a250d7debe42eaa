"""The NumPy pieces of ``twinkle predict model.onnx`` (``twinkle_core.inference``), against the libraries a run
uses: OpenCV's bilinear resize, torchvision's NMS. (That the readers give an export the pixels a plugin's own
reading gives it is twinkle-vision's test_export_reading.py; end to end without torch, its classification and
detection tests.)"""

from __future__ import annotations

import numpy as np
import pytest

from twinkle_core.inference.detection import non_max_suppression
from twinkle_core.inference.images import letterbox
from twinkle_core.inference.resize import resize_linear


def test_resize_linear_equals_opencv_bit_for_bit() -> None:
    """``resize_linear`` gives exactly ``cv2.resize(..., INTER_LINEAR)``'s pixels on random grey and RGB images,
    reduced, enlarged, reduced one way and enlarged the other, by exactly 2 and from a single row or column."""
    cv2 = pytest.importorskip("cv2")
    rng = np.random.default_rng(0)
    cases = [(rng.integers(1, 160, 2), rng.integers(1, 160, 2)) for _ in range(120)]
    cases += [((2 * h, 2 * w), (h, w)) for h, w in rng.integers(1, 60, (20, 2))]
    cases += [((1, 37), (5, 90)), ((41, 1), (80, 3)), ((64, 64), (64, 64))]
    for n, ((height, width), (new_height, new_width)) in enumerate(cases):
        shape = (int(height), int(width)) if n % 3 == 0 else (int(height), int(width), 3)
        image = rng.integers(0, 256, shape, dtype=np.uint8)
        expected = cv2.resize(image, (int(new_width), int(new_height)), interpolation=cv2.INTER_LINEAR)
        assert np.array_equal(resize_linear(image, int(new_width), int(new_height)), expected), (shape, new_height,
                                                                                                 new_width)


def test_the_letterbox_keeps_the_aspect_and_centres_the_image() -> None:
    """A 50 × 100 image letterboxed to 64: its long side resized to 64, the short to 32, centred on grey 114
    (16 rows above and below); the letterbox records the gain and padding that map boxes back."""
    image = np.full((50, 100, 3), 200, dtype=np.uint8)
    array, boxed = letterbox(image, 64, 114)
    assert array.shape == (3, 64, 64)
    assert (array[:, :16] == 114).all() and (array[:, 48:] == 114).all() and (array[:, 16:48] == 200).all()
    assert (boxed.width, boxed.height, boxed.pad) == (100, 50, (0, 16))
    assert boxed.gain == pytest.approx((32 / 50, 0.64))


def test_non_max_suppression_keeps_what_torchvision_keeps() -> None:
    """Greedy NMS in NumPy keeps the boxes ``torchvision.ops.nms`` keeps, in its order, on crowded random boxes
    at several IoU thresholds."""
    torch = pytest.importorskip("torch")
    ops = pytest.importorskip("torchvision.ops")
    rng = np.random.default_rng(1)
    for iou in (0.3, 0.5, 0.7, 0.9):
        corners = rng.uniform(0, 100, (300, 2)).astype(np.float32)
        sizes = rng.uniform(5, 40, (300, 2)).astype(np.float32)
        boxes = np.concatenate([corners, corners + sizes], axis=1)
        scores = rng.uniform(0, 1, 300).astype(np.float32)
        expected = ops.nms(torch.from_numpy(boxes), torch.from_numpy(scores), iou).numpy()
        assert non_max_suppression(boxes, scores, iou).tolist() == expected.tolist()


def test_the_image_reader_follows_the_runs_bad_files_setting(tmp_path) -> None:
    """A folder holding an image, a text file and a truncated PNG: with the card's ``bad_files`` ``"error"`` (a run
    that stops on a bad file) the reader names the first bad file; with ``"skip"`` (a run that leaves them out) it
    reads the one image and reports the two files it left out, as the run's processor does."""
    from PIL import Image

    from twinkle_core.inference.images import ImageReadError, classifier_files

    folder = tmp_path / "images"
    folder.mkdir()
    Image.new("RGB", (8, 8), (10, 20, 30)).save(folder / "a.png")
    (folder / "b.png").write_bytes((folder / "a.png").read_bytes()[:20])
    (folder / "notes.txt").write_text("not an image")
    card = {"suffixes": ["png", "jpg"], "ignored": []}
    with pytest.raises(ImageReadError, match=r"b\.png' cannot be decoded"):
        classifier_files(str(folder), {**card, "bad_files": "error"})
    _, paths, ids, skipped = classifier_files(str(folder), {**card, "bad_files": "skip"})
    assert ids == ["a.png"] and sorted(p.rsplit("/", 1)[-1] for p, _ in skipped) == ["b.png", "notes.txt"]
