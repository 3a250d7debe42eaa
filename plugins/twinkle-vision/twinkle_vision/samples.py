"""Small real image data written to disk, for demos and tests (nothing is downloaded)."""

from __future__ import annotations

from pathlib import Path


def write_digits(root: str | Path) -> Path:
    """Write scikit-learn's digits (1,797 greyscale 8×8 images, 10 classes) as ``root/<digit>/<n>.png``.

    Needs scikit-learn, which ships the data. Returns ``root``.
    """
    import numpy as np
    from PIL import Image
    from sklearn.datasets import load_digits

    digits = load_digits()
    root = Path(root)
    for n, (pixels, label) in enumerate(zip(digits.images, digits.target)):
        folder = root / str(label)
        folder.mkdir(parents=True, exist_ok=True)
        image = np.clip(pixels * (255 / 16), 0, 255).astype(np.uint8)
        Image.fromarray(image, mode="L").save(folder / f"{n:04d}.png")
    return root
