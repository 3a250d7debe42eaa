"""YOLO through Twinkle's engine on generated shapes: loss falls, plan, continue with an added class,
verified ONNX export, and named errors for bad labels."""

from __future__ import annotations

import shutil
from pathlib import Path

import pandas as pd
import pytest
import torch

from twinkle_core import DataSpec, Trainer, list_algorithms
from twinkle_core.data import DataError, MissingColumnError
from twinkle_core.planning import Hardware, ModelFacts, PlanContext
from twinkle_vision.samples import write_shapes
from twinkle_vision.yolo.data import LabelError, YoloDataProcessor
from twinkle_vision.yolo.strategy import DetectionStrategy

HP = {"image_size": 96, "batch_size": 8}


@pytest.fixture(scope="module")
def shapes(tmp_path_factory) -> Path:
    return write_shapes(tmp_path_factory.mktemp("shapes"), train=48, val=12, size=96, seed=1).parent


@pytest.fixture(scope="module")
def trained(tmp_path_factory, shapes):
    mp = pytest.MonkeyPatch()
    mp.setenv("TWINKLE_HOME", str(tmp_path_factory.mktemp("home")))
    mp.setenv("TWINKLE_USER", "tester")
    # predict_conf 0.001 (validation's threshold): four epochs find boxes only at low confidence, and predict's
    # test compares every box with ultralytics' own predictor
    trainer = Trainer("yolov8n", hyperparams={**HP, "max_epochs": 4, "close_mosaic": 1, "predict_conf": 0.001},
                      progress_bar=False)
    yield trainer, trainer.fit(str(shapes))
    mp.undo()


def test_yolo_ids_are_listed() -> None:
    assert list_algorithms(task="object_detection") == sorted(
        f"{family}{size}" for family in ("yolov8", "yolo11") for size in "nslmx")


def test_loss_falls_and_metrics_are_logged(trained) -> None:
    trainer, result = trained
    assert result.status == "finished" and result.monitor == "val_map50_95"
    metrics = pd.read_csv(Path(result.run_dir) / "logs" / "metrics.csv")
    losses = metrics["train_loss_epoch"].dropna().tolist()
    assert len(losses) == 4 and losses[-1] < losses[0]
    assert {"val_map50", "val_map50_95", "val_precision", "val_recall", "train_box_loss"} <= set(metrics.columns)
    assert 0.0 <= result.metrics["val_map50"] <= 1.0


def test_plan_uses_the_detection_strategy(trained) -> None:
    _, result = trained
    plan = result.plan
    assert plan.resource_strategy == "yolo-detection"
    assert (plan.micro_batch_size, plan.accumulate_grad_batches, plan.effective_batch_size) == (8, 8, 64)
    gpu = Hardware("cuda", 1, "NVIDIA H200", 141 * 10**9, True, True, 16, 128 * 10**9)
    context = PlanContext("yolov8n", "object_detection", ModelFacts(3_000_000, 3_000_000, 10**9, 10**6, 48 * 10**6),
                          10**7, 300, 16, None, 10, gpu)
    gpu_plan = DetectionStrategy().plan(context)
    assert gpu_plan.precision == "bf16-mixed" and gpu_plan.accumulate_grad_batches == 4
    assert "YOLO" in {d.name: d.reason for d in gpu_plan.decisions}["precision"]


def test_onnx_export_is_verified(trained, tmp_path) -> None:
    trainer, _ = trained
    export = trainer.export(format="onnx", output=str(tmp_path / "yolo.onnx"))
    assert export.samples == 12 and export.max_abs_diff < 0.05
    import onnxruntime as ort

    import numpy as np

    session = ort.InferenceSession(str(tmp_path / "yolo.onnx"), providers=["CPUExecutionProvider"])
    (output,) = session.run(None, {"input": np.random.rand(2, 3, 96, 96).astype(np.float32)})
    assert output.shape[:2] == (2, 4 + 3)  # per anchor: a box and three class scores


def test_continue_with_an_added_class(trained, tmp_path) -> None:
    trainer, result = trained
    four = write_shapes(tmp_path / "four", train=24, val=8, size=96, seed=2, classes=4).parent
    child = Trainer.from_checkpoint(result.run_uri, new_data=str(four), hyperparams={"max_epochs": 1})
    child_result = child.fit()
    assert child_result.status == "finished" and child_result.parent == result.run_uri
    assert child.algorithm.data_spec.class_names == ("rectangle", "ellipse", "triangle", "cross")
    # the remap itself: old classes keep their rows, the new one starts from a fresh initialisation
    old = trainer.algorithm.data_spec
    new = DataSpec("object_detection", old.input_shape, 4, ("cross", "rectangle", "ellipse", "triangle"), extra=old.extra)
    fresh = type(trainer.algorithm).from_hyperparams({})
    fresh.configure_data(new)
    state = trainer.algorithm.state_dict()
    adapted = fresh.adapt_checkpoint(state, old, new)
    head = [k for k, v in state.items() if v.shape and v.shape[0] == 3 and adapted[k].shape[0] == 4]
    assert head and all(torch.equal(adapted[k][1:], state[k]) for k in head)
    assert all(torch.equal(adapted[k][0], fresh.state_dict()[k][0]) for k in head)


def _copy(shapes: Path, tmp_path: Path) -> Path:
    target = tmp_path / "bad"
    shutil.copytree(shapes, target)
    return target


@pytest.mark.parametrize(
    ("line", "error", "message"),
    [
        ("0 0.5 0.5 0.2", LabelError, "has 4 columns; YOLO boxes need 5"),
        ("7 0.5 0.5 0.2 0.2", LabelError, "has class id 7, but data.yaml names 3 classes"),
        ("1 0.5 1.5 0.2 0.2", LabelError, "has coordinates outside \\[0, 1\\]"),
    ],
)
def test_bad_labels_are_named(shapes, tmp_path, line, error, message) -> None:
    root = _copy(shapes, tmp_path)
    label = root / "labels" / "train" / "0005.txt"
    label.write_text(label.read_text() + line + "\n")
    with pytest.raises(error, match=f"label '.*0005.txt' line \\d+ {message}"):
        YoloDataProcessor(image_size=96).prepare(str(root))


def test_missing_split_is_named(shapes, tmp_path) -> None:
    root = _copy(shapes, tmp_path)
    shutil.rmtree(root / "images" / "val")
    with pytest.raises(DataError, match="the val split 'images/val' of .*data.yaml' does not exist"):
        YoloDataProcessor(image_size=96).prepare(str(root))
    (root / "data.yaml").write_text("path: .\ntrain: images/train\nnames: [a, b, c]\n")
    with pytest.raises(MissingColumnError, match="has no 'val:' entry"):
        YoloDataProcessor(image_size=96).prepare(str(root))


def test_operations_work_on_yolo(twinkle_home, shapes) -> None:
    """Monitor, budget and resume — the run operations — on a plugin's algorithm."""
    trainer = Trainer("yolov8n", hyperparams={**HP, "max_epochs": 3}, verbose=False)
    trainer.monitor(metrics=["grad_norm"], alert_rules={"map50_95": "< 2"})
    trainer.set_budget_alert(max_cpu_hours=1.5 / 3600, cloud_provider="local")
    result = trainer.fit(str(shapes))
    kinds = [a.get("kind") for a in result.alerts]
    budget = [a for a in result.alerts if a.get("kind") == "budget"]
    # the order of the two kinds depends on the machine's speed: on a slow one the budget runs out before the first
    # validation, and Lightning validates a run that stops early, so the rule's alert may come after the stop
    assert "compare" in kinds and budget[-1]["action"] == "stop" and result.status == "stopped"
    resumed = Trainer.from_checkpoint(result.run_uri, mode="resume").fit()
    assert resumed.status == "finished"
    assert torch.load(resumed.last_checkpoint, weights_only=True)["epoch"] == 2


@pytest.mark.parametrize(
    ("change", "message"),
    [
        ("yaml:train: [images/train\nval: images/val\n", r"data.yaml' line \d+, column \d+ is not valid YAML"),
        ("yaml:- train\n- val\n", "holds a list, not a mapping"),
        ("yaml:train: images/train\nval: images/val\nnames: {0: a, 2: c}\n", "ids must run 0..1 without gaps"),
        ("no-labels", r"none of the 48 images in '.*images/train' has a label file .*labels/train"),
        ("flat", "is not inside an 'images' folder"),
    ],
)
def test_yolo_layout_and_yaml_errors_are_named(shapes, tmp_path, change, message) -> None:
    root = _copy(shapes, tmp_path)
    if change.startswith("yaml:"):
        (root / "data.yaml").write_text(change[5:])
    elif change == "no-labels":
        shutil.rmtree(root / "labels")
    else:  # images straight in split folders, without images/ and labels/
        shutil.move(root / "images" / "train", root / "train")
        shutil.move(root / "images" / "val", root / "val")
        (root / "data.yaml").write_text("train: train\nval: val\nnames: [a, b, c]\n")
    with pytest.raises(DataError, match=message):
        YoloDataProcessor(image_size=96).prepare(str(root))


def test_training_makes_no_network_connection_and_writes_only_into_the_store(twinkle_home, shapes, monkeypatch,
                                                                            tmp_path) -> None:
    import socket

    attempts: list[object] = []

    def refuse(self, address, *args, **kwargs):
        attempts.append(address)
        raise OSError("network disabled in this test")

    monkeypatch.setattr(socket.socket, "connect", refuse)
    monkeypatch.setattr(socket.socket, "connect_ex", refuse)
    cwd = tmp_path / "cwd"
    cwd.mkdir()
    monkeypatch.chdir(cwd)  # ultralytics would leave runs/detect/... here
    before = sorted(p.relative_to(shapes) for p in shapes.rglob("*"))
    trainer = Trainer("yolo11n", hyperparams={**HP, "max_epochs": 1}, verbose=False)
    result = trainer.fit(str(shapes))
    trainer.export(format="onnx")
    assert attempts == []
    assert list(cwd.iterdir()) == []
    assert sorted(p.relative_to(shapes) for p in shapes.rglob("*")) == before  # no label cache in the user's data
    assert (Path(result.run_dir) / "ultralytics" / "val").is_dir()


def test_remote_dataset_is_staged_locally(twinkle_home, shapes) -> None:
    import fsspec

    memory = fsspec.filesystem("memory")
    for path in shapes.rglob("*"):
        if path.is_file() and not path.name.endswith(".cache"):
            memory.pipe(f"/remote-shapes/{path.relative_to(shapes).as_posix()}", path.read_bytes())
    prepared = YoloDataProcessor(image_size=96).prepare("memory://remote-shapes")
    staged = Path(prepared.spec.extra["data_yaml"])
    assert staged.is_relative_to(twinkle_home / "cache" / "datasets") and staged.exists()
    assert prepared.details["train_images"] == 48 and len(prepared.train) == 48
    local = YoloDataProcessor(image_size=96).prepare(str(shapes))
    assert prepared.details == local.details


def test_fingerprint_ignores_ultralytics_label_cache(shapes) -> None:
    first = YoloDataProcessor(image_size=96).local_yaml(str(shapes))[1]
    (shapes / "labels" / "extra.cache").write_bytes(b"written by ultralytics")
    try:
        assert YoloDataProcessor(image_size=96).local_yaml(str(shapes))[1] == first
    finally:
        (shapes / "labels" / "extra.cache").unlink()


def test_image_size_is_one_name_and_ultralytics_imgsz_still_works_with_a_warning() -> None:
    """Classification and detection take the input side under one name, ``image_size``; YOLO's old ``imgsz``
    (ultralytics' name) is accepted for this release — as a hyperparameter and as the processor's keyword —
    with a ``DeprecationWarning`` naming ``image_size``; both at once is refused."""
    from twinkle_core.errors import HyperparameterError

    with pytest.warns(DeprecationWarning, match="'imgsz' is renamed 'image_size'"):
        assert YoloDataProcessor(imgsz=64).image_size == 64
    with pytest.warns(DeprecationWarning, match="'imgsz' is renamed 'image_size' \\(YoloDataProcessor\\)"):
        trainer = Trainer("yolov8n", hyperparams={"imgsz": 64, "batch_size": 8})
    assert trainer.hyperparams["image_size"] == 64 and "imgsz" not in trainer.hyperparams
    with pytest.raises(HyperparameterError, match="pass only image_size"):
        Trainer("yolov8n", hyperparams={"imgsz": 64, "image_size": 96})
    with pytest.raises(TypeError, match="unexpected keyword argument.*imgsize"):
        YoloDataProcessor(imgsize=64)


def test_evaluate_scores_boxes_as_validation_does(trained, shapes, tmp_path) -> None:
    """``evaluate`` on the dataset's ``val`` split (its data.yaml) reproduces the best checkpoint's validation
    mAP50-95 within 1e-6, with per-class AP and the precision–recall curve; a dataset of other classes is named."""
    import json

    trainer, result = trained
    evaluation = trainer.evaluate(str(shapes / "data.yaml"), output=str(tmp_path / "evaluation"))
    assert evaluation.metrics["map50_95"] == pytest.approx(result.best_metric, abs=1e-6)
    assert 0.0 <= evaluation.metrics["map50"] <= 1.0 and evaluation.details["split"] == "val"
    classes = {row["class"] for row in evaluation.tables["per_class"]}
    assert classes and classes <= set(trainer.algorithm.data_spec.class_names)
    assert (tmp_path / "evaluation" / "pr_curve.png").read_bytes()[:4] == b"\x89PNG"
    assert json.loads((tmp_path / "evaluation" / "evaluation.json").read_text())["metrics"]["map50"] == \
        pytest.approx(evaluation.metrics["map50"])
    other = tmp_path / "other"
    shutil.copytree(shapes, other)
    yaml_text = (other / "data.yaml").read_text()
    (other / "data.yaml").write_text(yaml_text.replace("rectangle", "box"))
    with pytest.raises(DataError, match="must list the run's classes"):
        trainer.evaluate(str(other / "data.yaml"), output=str(tmp_path / "other-evaluation"))


def test_predict_finds_the_boxes_ultralytics_predictor_finds(trained, shapes, tmp_path) -> None:
    """``predict`` on a folder of images of other sizes than the run's (80 × 56, letterboxed to 96) writes each
    image once, in file order, with the boxes, scores and classes ultralytics' own ``YOLO.predict`` finds with the
    same weights and thresholds, in the image's pixels — and the exported ONNX file alone finds the same boxes
    (``predict_export``: the card's processor and algorithm read and decode); ``.json`` is COCO's shape (``[x, y, w, h]`` boxes),
    ``draw`` writes each image with its boxes; an unreadable image is skipped and counted; an empty folder is a
    named error."""
    import json

    from PIL import Image

    from twinkle_core.data import EmptyDataError
    from twinkle_core.inference import predict_export
    from twinkle_vision.yolo import offline

    trainer, _ = trained
    photos = tmp_path / "photos"
    photos.mkdir()
    for n, image in enumerate(sorted((shapes / "images" / "val").glob("*.png"))[:6]):
        Image.open(image).crop((0, 0, 80, 56)).save(photos / f"{n}.png")
    (photos / "9-broken.png").write_bytes(b"not an image")
    written = trainer.predict(str(photos), str(tmp_path / "boxes.jsonl"), draw=True)
    rows = [json.loads(line) for line in (tmp_path / "boxes.jsonl").read_text().splitlines()]
    assert written.count == 6 and written.details["skipped"] == 1
    assert [row["id"] for row in rows] == [str(photos / f"{n}.png") for n in range(6)]
    assert all((row["width"], row["height"]) == (80, 56) for row in rows)

    offline.prepare()
    from ultralytics import YOLO

    model = trainer.model_for_export()[0]
    yolo = YOLO("yolov8n.yaml", task="detect")
    network = model._eval_model()
    network.args = model.hyp()
    yolo.model = network
    theirs = yolo.predict([str(photos / f"{n}.png") for n in range(6)], imgsz=96, conf=0.001, iou=0.7,
                          device="cpu", verbose=False)
    names = list(model.data_spec.class_names)
    found = 0
    for row, result in zip(rows, theirs):
        ours = sorted((b["class"], b["score"], *b["box"]) for b in row["boxes"])
        expected = sorted((names[int(c)], float(s), *map(float, box)) for box, s, c in
                          zip(result.boxes.xyxy, result.boxes.conf, result.boxes.cls))
        assert [o[0] for o in ours] == [e[0] for e in expected]
        assert torch.allclose(torch.tensor([o[1:] for o in ours]).reshape(-1, 5),
                              torch.tensor([e[1:] for e in expected]).reshape(-1, 5), atol=0.02)
        found += len(ours)
    assert found > 0
    drawn = [tmp_path / row["drawn"] for row in rows]
    assert all(Image.open(path).size == (80, 56) for path in drawn)
    assert drawn[0].name == "000001-0.png"

    coco = trainer.predict(str(photos), str(tmp_path / "boxes.json"))
    document = json.loads((tmp_path / "boxes.json").read_text())
    assert coco.count == 6 and [c["name"] for c in document["categories"]] == names
    assert [image["file_name"] for image in document["images"]] == [row["id"] for row in rows]
    first = rows[0]["boxes"][0]
    annotation = next(a for a in document["annotations"] if a["image_id"] == 1)
    x1, y1, x2, y2 = first["box"]
    assert annotation["bbox"] == pytest.approx([x1, y1, x2 - x1, y2 - y1], abs=0.02)
    assert len(document["annotations"]) == found

    exported = trainer.export(format="onnx", output=str(tmp_path / "yolo.onnx")).path
    alone = predict_export(exported, str(photos), str(tmp_path / "onnx.jsonl"))
    from_onnx = [json.loads(line) for line in (tmp_path / "onnx.jsonl").read_text().splitlines()]
    assert alone.count == 6 and [row["id"] for row in from_onnx] == [row["id"] for row in rows]
    for ours, theirs in zip(rows, from_onnx):
        ordered = [sorted((b["class"], b["score"], *b["box"]) for b in row["boxes"]) for row in (ours, theirs)]
        assert [b[0] for b in ordered[0]] == [b[0] for b in ordered[1]]
        assert torch.allclose(torch.tensor([b[1:] for b in ordered[0]]).reshape(-1, 5),
                              torch.tensor([b[1:] for b in ordered[1]]).reshape(-1, 5), atol=0.05)

    (tmp_path / "empty").mkdir()
    with pytest.raises(EmptyDataError, match="holds no image"):
        trainer.predict(str(tmp_path / "empty"), str(tmp_path / "none.jsonl"))


def _ultralytics_layout(shapes: Path, tmp_path: Path) -> Path:
    """The shapes as ultralytics' own dataset YAMLs lay data out: the YAML in a folder of its own (``cfg/``), its
    splits relative to its ``path:`` (``../ds``, relative to the YAML's folder), ``val`` a list of folders and
    ``test`` a ``.txt`` listing the test images (``./`` lines: relative to the ``.txt``). The test images are the
    validation images, so that scores can be compared. Returns the YAML."""
    ds = tmp_path / "ds"
    shutil.copytree(shapes, ds, ignore=shutil.ignore_patterns("*.cache", "data.yaml"))
    shutil.copytree(ds / "images" / "val", ds / "images" / "test")
    shutil.copytree(ds / "labels" / "val", ds / "labels" / "test")
    tests = sorted((ds / "images" / "test").glob("*.png"))
    (ds / "test.txt").write_text("".join(f"./images/test/{p.name}\n" for p in tests))
    (tmp_path / "cfg").mkdir()
    names = (shapes / "data.yaml").read_text().split("names:", 1)[1]
    yaml = tmp_path / "cfg" / "data.yaml"
    yaml.write_text(f"path: ../ds\ntrain: images/train\nval: [images/val]\ntest: test.txt\nnames:{names}")
    return yaml


def test_evaluate_and_predict_resolve_splits_as_ultralytics_does(trained, shapes, tmp_path) -> None:
    """One resolver serves fit, evaluate and predict: an ultralytics-style ``data.yaml`` whose splits are relative to
    its ``path:`` (``../ds``: relative to the YAML's folder), with ``val`` a list of folders and ``test`` a ``.txt``
    of ``./`` image lines, is read by ``prepare`` (fit's reader: 48 train, 12 val images), by ``evaluate`` (its
    ``test`` split: the same 12 images score exactly as the plain dataset's ``val`` split) and by ``predict`` (the
    same 12 images, ids the user's own paths). The fingerprint covers the data under ``path:``, not only the YAML's
    folder. Before the fix ``evaluate`` failed with ``EmptyDataError: 'images/test' has no images``."""
    import json

    trainer, _ = trained
    yaml = _ultralytics_layout(shapes, tmp_path)
    prepared = YoloDataProcessor(image_size=96).prepare(str(yaml))
    assert (prepared.details["train_images"], prepared.details["val_images"]) == (48, 12)

    evaluation = trainer.evaluate(str(yaml), output=str(tmp_path / "evaluation"))
    assert evaluation.details["split"] == "test" and evaluation.details["images"] == 12
    plain = trainer.evaluate(str(shapes / "data.yaml"), output=str(tmp_path / "plain"))
    assert evaluation.metrics["map50_95"] == pytest.approx(plain.metrics["map50_95"], abs=1e-9)
    as_reported = yaml.parent / "strings.yaml"  # the issue's own file: every split a string under path:
    as_reported.write_text(yaml.read_text().replace("[images/val]", "images/val").replace("test.txt", "images/test"))
    again = trainer.evaluate(str(as_reported), output=str(tmp_path / "strings"))
    assert again.details["images"] == 12 and again.metrics["map50_95"] == evaluation.metrics["map50_95"]

    written = trainer.predict(str(yaml), str(tmp_path / "boxes.jsonl"))
    ids = [json.loads(line)["id"] for line in (tmp_path / "boxes.jsonl").read_text().splitlines()]
    assert written.count == 12 and written.details["split"] == "test"
    assert ids == [str(p) for p in sorted((tmp_path / "ds" / "images" / "test").glob("*.png"))]

    before = YoloDataProcessor(image_size=96).local_yaml(str(yaml))[1]
    label = tmp_path / "ds" / "labels" / "train" / "0000.txt"
    label.write_text(label.read_text() + "0 0.5 0.5 0.1 0.1\n")
    assert YoloDataProcessor(image_size=96).local_yaml(str(yaml))[1] != before


def test_split_entries_are_named_when_missing(shapes, tmp_path) -> None:
    """A split entry that does not exist under ``path:`` is a ``DataError`` naming the entry, the YAML and where it
    looked; a ``.txt`` line naming a missing image is named with its file and line; a YAML for ``evaluate`` needs
    only ``names`` and ``test`` or ``val``."""
    from twinkle_vision.yolo.data import load_yaml

    yaml = _ultralytics_layout(shapes, tmp_path)
    text = yaml.read_text()
    yaml.write_text(text.replace("val: [images/val]", "val: [images/val, images/nowhere]"))
    with pytest.raises(DataError, match=r"the val split entry 'images/nowhere' of '.*data.yaml' does not exist "
                                        r"\(looked in .*ds/images/nowhere"):
        YoloDataProcessor(image_size=96).prepare(str(yaml))
    (tmp_path / "ds" / "test.txt").write_text("./images/test/0000.png\n./images/test/missing.png\n")
    with pytest.raises(DataError, match=r"'.*test.txt' line 2 names '.*images/test/missing.png', which does not "
                                        "exist"):
        YoloDataProcessor(image_size=96).read_samples(str(yaml), DataSpec(
            "object_detection", (3, 96, 96), 3, ("rectangle", "ellipse", "triangle"), extra={"imgsz": 96}))
    yaml.write_text("path: ../ds\ntest: test.txt\nnames: [rectangle, ellipse, triangle]\n")
    assert load_yaml(str(yaml), required=())["test"] == [str(tmp_path / "ds" / "test.txt")]


def test_cli_evaluate_prints_a_detectors_metrics(trained, shapes) -> None:
    """``twinkle evaluate RUN --data data.yaml`` for a detector, without ``--json``, prints the detector's figures
    (mAP50, mAP50-95, precision, recall) and each class's AP50, AP50-95, precision and recall, and exits 0. Before
    the fix it stored the evaluation, then ended in ``KeyError: 'f1'`` (the printout assumed a classifier's table)."""
    from click.testing import CliRunner

    from twinkle_core.cli import main

    _, result = trained
    shown = CliRunner().invoke(main, ["evaluate", result.run_uri, "--data", str(shapes / "data.yaml")])
    assert shown.exit_code == 0, shown.output
    lines = shown.output.splitlines()
    for figure in ("map50", "map50_95", "precision", "recall"):
        assert any(line.split()[:1] == [figure] for line in lines), figure
    header = lines.index("Per class:") + 1
    assert lines[header].split() == ["CLASS", "AP50", "AP50_95", "PRECISION", "RECALL"]
    assert {line.split()[0] for line in lines[header + 1:] if line.split()[0] in ("rectangle", "ellipse", "triangle")}
    assert "Written to" in shown.output


def test_an_export_finds_the_runs_boxes_without_torch_or_this_plugin(trained, shapes, tmp_path,
                                                                     without_torch) -> None:
    """``twinkle predict yolo3.onnx`` where torch, ultralytics, OpenCV, Lightning and this plugin cannot be imported
    (core, onnxruntime, NumPy and Pillow only) letterboxes the images and decodes the boxes from the card and
    writes the run's own rows: the same images (an unreadable one skipped), sizes and classes, scores within 1e-4
    and boxes within 0.05 px — for crops smaller than the run's 96 px, enlarged ones and a grey one. The export was
    asked for as ``yolo3`` and written as ``yolo3.onnx``; its cards name no path of this machine (no data.yaml).
    Before, the card's reader and decoding were the plugin's, which import torch and ultralytics."""
    import json

    from PIL import Image

    trainer, _ = trained
    photos = tmp_path / "photos"
    photos.mkdir()
    for n, image in enumerate(sorted((shapes / "images" / "val").glob("*.png"))[:6]):
        picture = Image.open(image)
        shaped = [picture.crop((0, 0, 80, 56)), picture.resize((150, 130)), picture.convert("L")][n % 3]
        shaped.save(photos / f"{n}.png")
    (photos / "9-broken.png").write_bytes(b"not an image")
    trainer.predict(str(photos), str(tmp_path / "run.jsonl"))
    reference = [json.loads(line) for line in (tmp_path / "run.jsonl").read_text().splitlines()]
    exported = trainer.export(format="onnx", output=str(tmp_path / "yolo3")).path
    assert exported == str(tmp_path / "yolo3.onnx")
    text = (tmp_path / "yolo3.onnx.json").read_text()
    card = json.loads(text)["inference"]
    assert card["output"]["decoding"]["confidence"] == 0.001 and card["preprocessing"]["reader"] == "yolo-images"
    assert "data_yaml" not in text and str(shapes) not in text and str(tmp_path) not in text
    printed = without_torch("predict", exported, "--data", str(photos), "-o", str(tmp_path / "onnx.jsonl"))
    assert "Predicted 6 samples" in printed
    alone = [json.loads(line) for line in (tmp_path / "onnx.jsonl").read_text().splitlines()]
    assert [row["id"] for row in alone] == [row["id"] for row in reference]
    found = 0
    for ours, theirs in zip(alone, reference):
        assert (ours["width"], ours["height"]) == (theirs["width"], theirs["height"])
        ordered = [sorted((b["class"], b["score"], *b["box"]) for b in row["boxes"]) for row in (ours, theirs)]
        assert [b[0] for b in ordered[0]] == [b[0] for b in ordered[1]]
        if ordered[0]:
            mine, expected = torch.tensor([b[1:] for b in ordered[0]]), torch.tensor([b[1:] for b in ordered[1]])
            assert torch.allclose(mine[:, 0], expected[:, 0], atol=1e-4)
            assert torch.allclose(mine[:, 1:], expected[:, 1:], atol=0.05)
        found += len(ordered[0])
    assert found > 0
