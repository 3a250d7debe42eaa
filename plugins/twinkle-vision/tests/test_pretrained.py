"""Starting from released weights, written here in each released format (nothing is downloaded): a timm
checkpoint folder (``save_for_hf``) and a lone ``.safetensors``, an ultralytics ``.pt`` saved by ultralytics itself
(the model object pickled) — each loads into Twinkle's model with outputs equal to the source model's
(max |Δ| ≤ 1e-5), a report naming what matched and what was left fresh, and a new class set re-initialising
the head alone. A ``.pt`` that would run code when unpickled is refused by name and runs nothing; weights of
another architecture are a named error listing the first differences. No training: models are built and compared.
"""

from __future__ import annotations

import os
from pathlib import Path

import pytest
import torch

from twinkle_core.data import DataSpec
from twinkle_core.pretrained import UnsafeWeightsError, WeightsMismatchError


def _classifier(weights: Path, classes: int, channels: int = 3) -> object:
    from twinkle_vision.classification import TimmClassifier

    algorithm = TimmClassifier(model_name="resnet10t", weights=str(weights))
    algorithm.configure_data(DataSpec("image_classification", (channels, 32, 32), num_classes=classes,
                                      class_names=tuple(map(str, range(classes)))))
    return algorithm


def _timm_source() -> torch.nn.Module:
    import timm

    torch.manual_seed(0)
    source = timm.create_model("resnet10t", pretrained=False, num_classes=10).train()
    with torch.no_grad():  # non-trivial BatchNorm statistics, so that a missed buffer would show
        source(torch.rand(8, 3, 32, 32) * 3)
    return source.eval()


def test_timm_checkpoint_folders_and_safetensors_load_with_equal_outputs(tmp_path: Path) -> None:
    """A ``save_for_hf`` folder (config.json + model.safetensors) and a lone ``.safetensors`` give the source's
    logits; the folder's ``pretrained_cfg`` sets the input normalisation; new classes leave ``fc`` alone fresh;
    one input channel adapts the stem as timm does; resnet18's weights in a resnet10t are a named mismatch."""
    from safetensors.torch import save_file
    from timm.models import save_for_hf

    source = _timm_source()
    source.pretrained_cfg = {**source.pretrained_cfg, "mean": (0.1, 0.2, 0.3), "std": (0.5, 0.5, 0.5)}
    folder = tmp_path / "resnet10t-hub"
    save_for_hf(source, str(folder), safe_serialization=True)
    single = tmp_path / "resnet10t.safetensors"
    save_file(source.state_dict(), str(single))
    x = torch.rand(2, 3, 32, 32)
    with torch.no_grad():
        expected = source(x)
    for weights in (folder, single):
        loaded = _classifier(weights, 10).eval()
        with torch.no_grad():
            assert (loaded.model.net(x) - expected).abs().max().item() <= 1e-5
        report = loaded.weights_report
        assert report.fresh == [] and report.ignored == [] and report.loaded == len(source.state_dict())
    assert report.format == "safetensors"
    folder_model = _classifier(folder, 10)
    assert folder_model.weights_report.format == "hf-folder"
    assert folder_model.model_input().mean == (0.1, 0.2, 0.3)  # the checkpoint's own data config
    assert torch.allclose(folder_model.model.mean.flatten(), torch.tensor([0.1, 0.2, 0.3]))

    three = _classifier(folder, 3)
    assert three.weights_report.fresh == ["fc.weight", "fc.bias"]
    assert torch.equal(three.model.net.state_dict()["layer4.0.conv1.weight"], source.state_dict()["layer4.0.conv1.weight"])
    grey = _classifier(folder, 10, channels=1)
    assert grey.weights_report.fresh == [] and "adapt_input_conv" in grey.weights_report.notes[0]

    import timm

    other = tmp_path / "resnet18.safetensors"
    save_file(timm.create_model("resnet18", pretrained=False, num_classes=10).state_dict(), str(other))
    with pytest.raises(WeightsMismatchError, match=r"do not fit ResNet: \d+ differences beyond a new head, first: "):
        _classifier(other, 10)
    wrong_folder = tmp_path / "resnet18-hub"
    save_for_hf(timm.create_model("resnet18", pretrained=False), str(wrong_folder), safe_serialization=True)
    from twinkle_core.errors import HyperparameterError

    with pytest.raises(HyperparameterError, match="is a resnet18 checkpoint, not resnet10t; use timm/resnet18"):
        _classifier(wrong_folder, 10)


def test_a_timm_folders_input_size_is_the_models_configured_size_and_the_plan_says_so(twinkle_home,
                                                                                      tmp_path: Path) -> None:
    """A timm folder's ``pretrained_cfg.input_size`` is the model's configured size, as timm's
    ``resolve_data_config`` reads it — the ceiling of the plan's input size (DESIGN: the data's own size below it):
    images larger than it are trained at it, and the plan's ``input_size`` reason names the folder's
    ``config.json`` as the source; images smaller keep their own size and the reason names the folder's size and the
    ``image_size=`` that trains at it. The weights report says where the size came from and what the run uses. The
    network's minimum side stays its stride (32) whatever size the folder gives. Before the fix the reason called
    the folder's size "resnet10t's own" and the minimum side came out at 6."""
    from timm.models import save_for_hf

    from twinkle_core import Trainer
    from twinkle_vision.samples import write_digits_as_found

    photos = write_digits_as_found(tmp_path / "photos", count=40)  # 16–96 px
    source = _timm_source()
    for side in (40, 128):
        source.pretrained_cfg = {**source.pretrained_cfg, "input_size": (3, side, side)}
        save_for_hf(source, str(tmp_path / f"hub-{side}"), safe_serialization=True)
    assert _classifier(tmp_path / "hub-40", 10).model_input().min_size == 32

    small = Trainer("timm/resnet10t", hyperparams={"weights": str(tmp_path / "hub-40")}, verbose=False)
    decision = next(d for d in small.plan(str(photos)).decisions if d.name == "input_size")
    assert decision.value == 40
    assert decision.reason.startswith(f"the input size of weights '{tmp_path / 'hub-40'}' (its config.json's "
                                      "pretrained_cfg.input_size 40×40); images are ")

    large = Trainer("timm/resnet10t", hyperparams={"weights": str(tmp_path / "hub-128")}, verbose=False)
    decision = next(d for d in large.plan(str(photos)).decisions if d.name == "input_size")
    assert decision.value < 128 and decision.reason.startswith("the images' own resolution")
    assert (f"the input size of weights '{tmp_path / 'hub-128'}' (its config.json's pretrained_cfg.input_size "
            "128×128) is 128, but upsampling") in decision.reason and "image_size=128" in decision.reason
    notes = _classifier(tmp_path / "hub-128", 10).weights_report.notes  # built for 32 × 32 images
    note = next(n for n in notes if "input_size" in n)
    assert "config.json's pretrained_cfg.input_size 128×128 is this model's configured size, the ceiling" in note
    assert "this run's input size is 32 (plan.json's input_size says why)" in note
    assert any(n.startswith("config.json's pretrained_cfg mean") for n in notes)


@pytest.fixture(scope="module")
def yolov8n(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, torch.nn.Module, list[str]]:
    """A YOLOv8n saved by ultralytics' own ``YOLO.save`` (the model object pickled in fp16, as released files
    are), the model the file holds (fp32) and its class names."""
    from twinkle_vision.yolo import offline

    offline.prepare()
    from ultralytics import YOLO

    import copy

    path = tmp_path_factory.mktemp("yolo") / "yolov8n.pt"
    torch.manual_seed(0)
    yolo = YOLO("yolov8n.yaml")  # built from its configuration: nothing is downloaded
    yolo.save(str(path))
    held = copy.deepcopy(yolo.model).half().float().eval()  # what the file holds: the model rounded to fp16
    return path, held, [held.names[k] for k in sorted(held.names)]


def _detector(weights: Path, names: list[str]) -> object:
    from twinkle_vision.yolo.model import YoloDetector

    detector = YoloDetector(weights=str(weights))
    detector.configure_data(DataSpec("object_detection", (3, 64, 64), num_classes=len(names), class_names=tuple(names),
                                     extra={"imgsz": 64}))
    return detector


def test_a_released_style_yolov8n_pt_loads_without_running_code_and_keeps_its_classes(yolov8n: tuple) -> None:
    """ultralytics' own ``.pt`` loads (``weights_only`` with the documented classes admitted): on its 80 classes the
    detector's outputs equal the file's model's; on 3 new classes the backbone and neck load and only the head's
    class branch starts fresh."""
    path, held, names = yolov8n
    x = torch.rand(1, 3, 64, 64)
    same = _detector(path, names)
    model = same.model.eval()
    with torch.no_grad():
        assert (model(x)[0] - held(x)[0]).abs().max().item() <= 1e-5
    report = same.weights_report
    assert report.format == "ultralytics" and report.fresh == [] and "are the data's" in report.notes[0]

    new = _detector(path, ["cat", "dog", "bird"])
    fresh = new.weights_report.fresh
    head = f"model.{len(held.model) - 1}."
    assert fresh and all(name.startswith(head + "cv3.") for name in fresh)  # the class branch only
    kept = new.model.state_dict()
    for name, value in held.state_dict().items():
        if not name.startswith(head):  # backbone and neck
            assert torch.equal(kept[name], value), name
    assert "differ from the data's 3" in new.weights_report.notes[0]


@pytest.fixture(scope="module")
def wide_three_class_pt(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, torch.nn.Module]:
    """A 3-class detector saved by ultralytics' ``YOLO.save`` whose class branch is wider than the one Twinkle
    builds for 3 classes: ultralytics sizes the ``cv3`` convolutions ``max(channels, min(classes, 100))`` from the
    classes the model was *built* for — 80 channels here (built for 80, then given a 3-class output, as a file
    fine-tuned from a COCO model can be), 64 in the model Twinkle builds for 3 classes. Returns the file and the
    model it holds (fp32)."""
    from twinkle_vision.yolo import offline

    offline.prepare()
    import copy

    from ultralytics import YOLO

    torch.manual_seed(1)
    yolo = YOLO("yolov8n.yaml")
    head = yolo.model.model[-1]
    for branch in head.cv3:
        branch[2] = torch.nn.Conv2d(branch[2].in_channels, 3, 1)
    head.nc, head.no = 3, 3 + head.reg_max * 4
    yolo.model.yaml["nc"], yolo.model.nc = 3, 3
    yolo.model.names = {0: "cat", 1: "dog", 2: "bird"}
    path = tmp_path_factory.mktemp("wide") / "best.pt"
    yolo.save(str(path))
    return path, copy.deepcopy(yolo.model).half().float().eval()


def test_the_report_says_which_parts_of_a_yolo_file_loaded_and_why_the_rest_is_fresh(wide_three_class_pt) -> None:
    """On the file's own 3 classes but a class branch 80 channels wide against Twinkle's 64, the report no longer
    says "its head loads whole": it names each part of the model (backbone and neck, the head's box branch, its class
    branch) with how many of its tensors loaded and how many start fresh, and for each fresh tensor why (the file's
    shape against the model's); ``weights.json`` (``to_dict``) carries the same. Before the fix the note said the
    head loaded whole while 33 class-branch tensors started fresh."""
    path, held = wide_three_class_pt
    detector = _detector(path, ["cat", "dog", "bird"])
    report = detector.weights_report
    head = f"model.{len(held.model) - 1}."
    assert len(report.fresh) == 33 and all(name.startswith(head + "cv3.") for name in report.fresh)
    notes = "\n".join(report.notes)
    assert "loads whole" not in notes
    assert "the file's 3 classes (cat, dog, bird) are the data's" in report.notes[0]
    parts = {note.split(":")[0]: note for note in report.notes[1:]}
    last = len(held.model) - 1
    assert parts[f"backbone and neck (model.0–model.{last - 1})"].endswith("all loaded")
    assert "all loaded" in parts[f"box branch ({head}cv2, {head}dfl)"]
    classes = parts[f"class branch ({head}cv3)"]
    assert "33 of 42 tensors start fresh" in classes and "the file's class branch is 80 channels wide" in classes
    first = f"{head}cv3.0.0.conv.weight"
    assert report.reasons[first] == "the file's shape (80, 64, 3, 3), the model's (64, 64, 3, 3)"
    stored = report.to_dict()
    assert stored["reasons"][first] == report.reasons[first] and stored["notes"] == report.notes
    kept = detector.model.state_dict()
    for name, value in held.state_dict().items():  # everything that is not fresh came from the file
        if name not in report.fresh:
            assert torch.equal(kept[name], value), name


def test_a_yolo11n_pt_as_ultralytics_saves_it_loads(tmp_path: Path) -> None:
    """A YOLO11n ``.pt`` saved by ultralytics pickles building blocks its layer package does not export (``C3k``);
    they are ultralytics' own layers and are admitted, so the file loads with outputs equal to its model's (before,
    it was refused as code that would run)."""
    from twinkle_vision.yolo import offline
    from twinkle_vision.yolo.model import YoloDetector

    offline.prepare()
    from ultralytics import YOLO

    torch.manual_seed(0)
    yolo = YOLO("yolo11n.yaml")
    path = tmp_path / "yolo11n.pt"
    yolo.save(str(path))
    held = yolo.model.half().float().eval()
    names = [held.names[k] for k in sorted(held.names)]
    detector = YoloDetector(config="yolo11n.yaml", weights=str(path))
    detector.configure_data(DataSpec("object_detection", (3, 64, 64), num_classes=len(names), class_names=tuple(names),
                                     extra={"imgsz": 64}))
    x = torch.rand(1, 3, 64, 64)
    with torch.no_grad():
        assert (detector.model.eval()(x)[0] - held(x)[0]).abs().max().item() <= 1e-5
    assert detector.weights_report.fresh == [] and "its head loads whole" in detector.weights_report.notes[0]


class _Marker:
    """Unpickling this would create a marker file (``os.system``)."""

    def __init__(self, path: Path) -> None:
        self.path = path

    def __reduce__(self) -> tuple:
        return (os.system, (f"touch {self.path}",))


def test_a_pt_that_would_run_code_is_refused_by_name_and_nothing_runs(tmp_path: Path, yolov8n: tuple) -> None:
    """A checkpoint shaped like ultralytics' but pickling a call to ``os.system`` is refused with the call's name;
    the marker file it would create never appears. Admitting ultralytics' classes admits nothing else."""
    marker = tmp_path / "ran"
    evil = tmp_path / "yolov8n.pt"
    torch.save({"model": _Marker(marker), "date": "2024"}, evil)
    with pytest.raises(UnsafeWeightsError, match=r"would run code when loaded \(it pickles posix\.system\).*nothing ran"):
        _detector(evil, yolov8n[2])
    assert not marker.exists()
