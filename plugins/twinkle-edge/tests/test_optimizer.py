"""EdgeOptimizer on a published ResNet-18 trained on digits: pruned 30 %, fine-tuned back through the engine
(a ``finetune`` child run), INT8 ONNX — fewer parameters and MACs, a smaller file, accuracy within a point of
the unpruned model, the pruned network reloaded from tensors plus its record, the report saved with the run."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from twinkle_core import RunStore, Trainer, load_torch_file
from twinkle_core.errors import TwinkleError

pytestmark = pytest.mark.slow


@pytest.fixture(scope="module")
def published(tmp_path_factory: pytest.TempPathFactory):  # noqa: ANN201
    from twinkle_vision.samples import write_digits

    mp = pytest.MonkeyPatch()
    home = tmp_path_factory.mktemp("home")
    mp.setenv("TWINKLE_HOME", str(home))
    mp.setenv("TWINKLE_USER", "tester")
    data = write_digits(tmp_path_factory.mktemp("data") / "digits")
    result = Trainer("resnet18", task="image_classification", hyperparams={"max_epochs": 6, "use_mmap": True},
                     progress_bar=False, verbose=False).fit(str(data))
    RunStore().publish(result.run_uri, "digits18")
    yield home, result
    mp.undo()


def test_the_articles_line_prunes_recovers_and_quantizes_a_published_resnet(published) -> None:
    from twinkle_edge import EdgeOptimizer

    home, trained = published
    # the default five epochs of recovery fine-tuning: with two, one machine's run ended 2 points short of the
    # original; with three, its INT8 model lost 1.1 points to the float one
    report = EdgeOptimizer(model="twinkle://models/digits18", target="onnx-int8", pruning_ratio=0.3).optimize()
    print(report)
    original, pruned, tuned, quantized = (report.stage(n) for n in ("original", "pruned", "fine-tuned", "quantized"))
    assert pruned.parameters < 0.6 * original.parameters and pruned.macs < 0.6 * original.macs
    assert report.pruning["ratio"] == 0.3 and report.pruning["kept"] == ["Linear"]  # the classifier kept its size
    assert quantized.file_bytes < tuned.file_bytes < original.file_bytes
    assert original.metric == "accuracy" and original.similarity["cosine"] > 0.9999  # its own ONNX export
    assert tuned.metric_value >= original.metric_value - 0.01  # fine-tuned back to within a point
    assert pruned.metric_value < tuned.metric_value  # pruning alone hurt; fine-tuning recovered it
    assert quantized.metric_value >= tuned.metric_value - 0.01
    assert quantized.similarity["top1_agreement"] >= 0.97
    assert all(s.latency_ms and s.latency_ms > 0 for s in report.stages)
    # the fine-tuning is an ordinary child run of the model's run, with the report beside it
    store = RunStore()
    child = store.get(report.finetune_run)
    assert child.parent == store.get(trained.run_uri).id and child.mode == "finetune" and child.status == "finished"
    saved = json.loads((Path(store.run_dir(child.id)) / "edge-report.json").read_text())
    assert [s["name"] for s in saved["stages"]] == ["original", "pruned", "fine-tuned", "quantized"]
    assert (Path(store.run_dir(child.id)) / "edge-report.png").stat().st_size > 5000
    # the pruned network is tensors plus a record (weights_only), and reloads through core from them
    pruned_ckpt = Path(store.run_dir(store.get(trained.run_uri).id)) / "edge" / "pruned-0.3.ckpt"
    saved = load_torch_file(str(pruned_ckpt))
    assert saved["twinkle"]["structure"]["pruned"]["ratio"] == 0.3
    convolutions = [v.shape[0] for k, v in saved["state_dict"].items() if k.endswith(".weight") and v.ndim == 4]
    assert convolutions and all(c % 8 == 0 for c in convolutions)  # aligned channel counts (channel_multiple=8)
    again, *_ = Trainer.from_checkpoint(report.finetune_run, mode="finetune", verbose=False).model_for_export()
    assert sum(p.numel() for p in again.parameters()) == tuned.parameters
    assert str(report).startswith("Edge report: twinkle://models/digits18") and "quantized" in report.table()


def test_the_articles_line_for_rk3588_converts_and_the_simulator_agrees(published) -> None:
    from twinkle_edge import EdgeOptimizer

    report = EdgeOptimizer(model="twinkle://models/digits18", target="rk3588", pruning_ratio=0.3,
                           finetune_epochs=2).optimize()
    print(report)
    original, tuned, converted = (report.stage(n) for n in ("original", "fine-tuned", "converted"))
    assert converted.parameters < 0.6 * original.parameters and converted.macs < 0.6 * original.macs
    assert converted.file_bytes < 0.3 * original.file_bytes  # INT8 and pruned
    assert Path(converted.artefact).name == "model-rk3588-int8.rknn" and Path(converted.artefact).exists()
    assert converted.notes["vs_pytorch_model"]["cosine"] >= 0.99  # rknn's simulator agrees with the PyTorch model
    assert converted.metric_value >= tuned.metric_value - 0.03
    assert converted.latency_ms is None and "not measured" in converted.notes["board"]  # board-only, not invented
    assert "not measured" in report.table()


def test_bad_arguments_are_named_before_anything_loads() -> None:
    from twinkle_edge import EdgeOptimizer

    with pytest.raises(TwinkleError, match="unknown target 'rk9999'.*onnx-int8"):
        EdgeOptimizer(model="twinkle://models/x", target="rk9999")
    with pytest.raises(TwinkleError, match="pruning_ratio=1.5"):
        EdgeOptimizer(model="twinkle://models/x", pruning_ratio=1.5)
    with pytest.raises(TwinkleError, match="quantize='int4'"):
        EdgeOptimizer(model="twinkle://models/x", quantize="int4")
    with pytest.raises(TwinkleError, match="target_device='abc' is for Rockchip boards"):
        EdgeOptimizer(model="twinkle://models/x", target="onnx-int8", target_device="abc")


def test_trainer_export_makes_a_verified_rknn_and_onnx_int8(published, tmp_path) -> None:
    _, trained = published
    trainer = Trainer.from_checkpoint(trained.run_uri, mode="finetune", verbose=False)
    int8 = trainer.export(format="rknn", target="rk3588", quantize=True)
    print(int8)
    assert int8.format == "rknn" and int8.quantized and Path(int8.path).name == "model-int8.rknn"
    assert Path(int8.path).stat().st_size == int8.size_bytes > 1_000_000
    assert int8.samples == 256 and int8.details["target"] == "rk3588" and int8.details["calibration_samples"] == 256
    assert int8.cosine >= 0.99 and int8.metric == "accuracy" and int8.metric_export >= int8.metric_torch - 0.02
    # float (fp16 on the NPU) for another platform, held to the fp16 tolerance
    fp16 = trainer.export(format="rknn", target="rk3566", output=str(tmp_path / "rk3566.rknn"))
    assert not fp16.quantized and fp16.cosine >= 0.9999 and fp16.metric_delta == pytest.approx(0, abs=0.01)
    onnx8 = trainer.export(format="onnx-int8")  # INT8 by definition
    assert onnx8.quantized and Path(onnx8.path).name == "model-int8.onnx" and onnx8.cosine >= 0.99
    record = RunStore().get(trained.run_uri)
    assert [e["format"] for e in record.exports][-3:] == ["rknn", "rknn", "onnx-int8"]


def test_rknn_export_errors_are_named(published, tmp_path, monkeypatch) -> None:
    from twinkle_core.exporting import ExportError
    from twinkle_edge.rknn.convert import RKNNError
    from twinkle_edge.rknn.venv import ConverterMissingError

    _, trained = published
    trainer = Trainer.from_checkpoint(trained.run_uri, mode="finetune", verbose=False)
    out = str(tmp_path / "x.rknn")
    with pytest.raises(RKNNError, match="unknown RKNN target 'rk9999'.*rk3588"):
        trainer.export(format="rknn", target="rk9999", output=out)
    with pytest.raises(RKNNError, match="opset_version=20: rknn-toolkit2 reads opsets up to 19"):
        trainer.export(format="rknn", opset_version=20, output=out)
    with pytest.raises(RKNNError, match="rv1106 does not run float models.*quantize=True"):
        trainer.export(format="rknn", target="rv1106", output=out)
    with pytest.raises(ExportError, match="unknown RKNN export option.*mean"):
        trainer.export(format="rknn", mean=[0, 0, 0], output=out)
    import subprocess
    import sys

    cli = subprocess.run([sys.executable, "-m", "twinkle_core", "export", trained.run_uri, "--format", "rknn",
                          "--target", "rk9999", "--quantize"], capture_output=True, text=True, timeout=300)
    assert cli.returncode == 1 and "unknown RKNN target 'rk9999'" in cli.stderr and "Traceback" not in cli.stderr
    monkeypatch.setenv("TWINKLE_RKNN_VENV", str(tmp_path / "nowhere"))
    with pytest.raises(ConverterMissingError, match="twinkle edge setup"):
        trainer.export(format="rknn", output=out)
    assert not Path(out).exists()


def test_a_model_whose_data_is_gone_or_unrecorded_asks_for_calibration_data(published, tmp_path) -> None:
    import torch

    from twinkle_edge import EdgeOptimizer

    home, _ = published
    checkpoint = load_torch_file(str(home / "models" / "digits18" / "model.ckpt"))
    checkpoint["twinkle"]["data_uri"] = str(tmp_path / "moved-away")
    torch.save(checkpoint, tmp_path / "moved.ckpt")
    with pytest.raises(TwinkleError, match="moved-away.*calibration_data="):
        EdgeOptimizer(model=str(tmp_path / "moved.ckpt"), target="onnx-int8").optimize()
    checkpoint["twinkle"]["data_uri"] = None
    torch.save(checkpoint, tmp_path / "unrecorded.ckpt")
    with pytest.raises(TwinkleError, match="records no data.*calibration_data="):
        EdgeOptimizer(model=str(tmp_path / "unrecorded.ckpt"), target="onnx-int8").optimize()
