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
