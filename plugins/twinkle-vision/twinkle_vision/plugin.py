"""The Twinkle plugin of twinkle-vision, found through the ``twinkle`` entry-point group.

It registers the ResNet family and any timm model (``timm/<name>``) for image classification, with the
image-folder data processor. Every target is a ``"module:attr"`` string: listing imports neither torch nor
timm nor ultralytics.
"""

from __future__ import annotations

from twinkle_core import hookimpl
from twinkle_core.hookspecs import Register

RESNETS = (18, 34, 50, 101, 152)


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


@hookimpl
def register_data_processors(register: Register) -> None:
    """Image folders (one folder per class) at any URI."""
    register(
        "image-folder",
        "twinkle_vision.images:ImageFolderProcessor",
        task="image_classification",
        formats=["folder", "idx"],
        description="one folder per class (train/ and val/ or a seeded split); use_mmap decodes once",
    )
