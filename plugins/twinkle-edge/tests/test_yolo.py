"""EdgeOptimizer on a published YOLOv8n trained on the generated shapes set — the article's line as written:
C2f split and pruned 30 % (the detection head kept), fine-tuned back, INT8 ``.rknn`` for rk3588 with the head's
raw per-scale maps decoded on the CPU; rknn's simulator's mAP50 stays within 0.05 of the float model's."""

from __future__ import annotations

from pathlib import Path

import pytest

from twinkle_core import RunStore, Trainer

pytestmark = pytest.mark.slow


@pytest.fixture(scope="module")
def published_yolo(tmp_path_factory: pytest.TempPathFactory):  # noqa: ANN201
    from twinkle_vision.samples import write_shapes

    mp = pytest.MonkeyPatch()
    home = tmp_path_factory.mktemp("home")
    mp.setenv("TWINKLE_HOME", str(home))
    mp.setenv("TWINKLE_USER", "tester")
    data = write_shapes(tmp_path_factory.mktemp("data") / "shapes", train=240, val=40, size=128, seed=0).parent
    # 16 epochs (about 100 s): the detector must find the shapes (mAP50 >= 0.3) before it is pruned; it ends at 0.42
    # (0.58 after 20 epochs, 0.35 after 14)
    hyperparams = {"image_size": 128, "batch_size": 16, "effective_batch_size": 16, "max_epochs": 16, "close_mosaic": 3}
    result = Trainer("yolov8n", hyperparams=hyperparams, progress_bar=False, verbose=False).fit(str(data))
    RunStore().publish(result.run_uri, "yolov8n")
    yield home, result
    mp.undo()


def test_the_articles_line_on_a_published_yolov8n(published_yolo) -> None:
    from twinkle_edge import EdgeOptimizer

    _, trained = published_yolo
    assert trained.metrics["val_map50"] >= 0.3  # a detector that finds the shapes
    report = EdgeOptimizer(model="twinkle://models/yolov8n", target="rk3588", pruning_ratio=0.3).optimize()
    print(report)
    original, pruned, tuned, converted = (report.stage(n) for n in ("original", "pruned", "fine-tuned", "converted"))
    assert report.pruning["kept"] == ["Detect"]  # the detection head keeps its size
    assert pruned.parameters < 0.75 * original.parameters and pruned.macs < 0.75 * original.macs
    assert converted.file_bytes < tuned.file_bytes < original.file_bytes
    assert original.metric == tuned.metric == converted.metric == "map50"
    assert original.metric_value == pytest.approx(trained.metrics["val_map50"], abs=0.02)  # its ONNX = its validation
    assert pruned.metric_value < tuned.metric_value  # pruning hurt; fine-tuning recovered
    assert tuned.metric_value >= 0.3
    assert abs(converted.metric_value - tuned.metric_value) <= 0.05  # the simulated INT8 NPU model vs float
    assert converted.notes["decoded_on_cpu"] and converted.notes["vs_pytorch_model"]["cosine"] >= 0.98
    assert Path(converted.artefact).name == "model-rk3588-int8.rknn"
    assert Path(converted.notes["accuracy_analysis"]).stat().st_size > 0  # rknn's per-layer error analysis
    assert "top1_agreement" not in converted.similarity  # no classes per row to agree on
    # the pruned detector reloads from its config plus tensors (C2f split again, then reshaped)
    again, *_ = Trainer.from_checkpoint(report.finetune_run, mode="finetune", verbose=False).model_for_export()
    assert sum(p.numel() for p in again.export_module().parameters()) == tuned.parameters


def test_trainer_export_of_a_yolo_run_to_rknn_reports_map50(published_yolo) -> None:
    _, trained = published_yolo
    result = Trainer.from_checkpoint(trained.run_uri, mode="finetune", verbose=False).export(
        format="rknn", target="rk3588", quantize=True)
    print(result)
    assert result.details["decoded_on_cpu"] and result.metric == "map50" and result.samples == 40
    assert abs(result.metric_export - result.metric_torch) <= 0.05 and result.cosine >= 0.98
