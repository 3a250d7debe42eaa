"""The Twinkle plugin of twinkle-vision, found through the ``twinkle`` entry-point group.

It registers the ResNet family and any timm model (``timm/<name>``) for image classification with the
image-folder data processor, and YOLO v8/11 detectors (ultralytics, the ``yolo`` extra) with the YOLO-format
data processor and the detection resource strategy. Every target is a ``"module:attr"`` string: listing
imports neither torch nor timm nor ultralytics.
"""

from __future__ import annotations

from twinkle_core import Register, hookimpl

RESNETS = (18, 34, 50, 101, 152)
YOLO_SIZES = ("n", "s", "m", "l", "x")


@hookimpl
def register_algorithms(register: Register) -> None:
    """ResNet-18 … ResNet-152 and the ``timm/*`` family."""
    for depth in RESNETS:
        register(
            f"resnet{depth}",
            f"twinkle_vision.classification:ResNet{depth}",
            task="image_classification",
            description=f"ResNet-{depth} (timm), random init unless weights= is given",
        )
    register(
        "timm/*",
        "twinkle_vision.classification:TimmClassifier",
        task="image_classification",
        variant_param="model_name",
        description="any timm model by name, e.g. timm/convnext_atto (random init unless weights=)",
    )
    for family, label in (("yolov8", "YOLOv8"), ("yolo11", "YOLO11")):
        for size in YOLO_SIZES:
            register(
                f"{family}{size}",
                f"twinkle_vision.yolo.model:{family.upper().replace('YOLO', 'Yolo')}{size.upper()}",
                task="object_detection",
                licence="AGPL-3.0 (ultralytics)",
                description=f"{label}{size} from ultralytics' {family}{size}.yaml (needs twinkle-vision[yolo])",
            )


@hookimpl
def register_data_processors(register: Register) -> None:
    """Image folders (one folder per class) at any URI, or a Hugging Face dataset folder with an Image column."""
    register(
        "image-folder",
        "twinkle_vision.images:ImageFolderProcessor",
        task="image_classification",
        formats=["folder", "idx", "hf-dataset"],
        description="one folder per class (train/ and val/ or a seeded split), or a Hugging Face dataset folder "
                    "(Image and ClassLabel columns); use_mmap decodes once",
    )
    register(
        "yolo-format",
        "twinkle_vision.yolo.data:YoloDataProcessor",
        task="object_detection",
        formats=["yaml", "folder"],
        description="YOLO format: data.yaml, images/, labels/ (validated; remote data staged locally)",
    )


@hookimpl
def register_resource_strategies(register: Register) -> None:
    """YOLO's: mixed precision and accumulation to a nominal batch of 64."""
    register(
        "yolo-detection",
        "twinkle_vision.yolo.strategy:DetectionStrategy",
        task="object_detection",
        description="mixed precision where supported, gradient accumulation to a nominal batch of 64",
    )


@hookimpl
def register_checks(register: Register) -> None:
    """``twinkle doctor``: timm, and ultralytics for YOLO (the ``yolo`` extra)."""
    register("timm", "twinkle_vision.checks:timm_models", description="timm, which builds the ResNets")
    register("ultralytics", "twinkle_vision.checks:ultralytics_yolo",
             description="ultralytics, for the YOLO detectors (the yolo extra, AGPL-3.0)")
