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


SHAPE_CLASSES = ("rectangle", "ellipse", "triangle", "cross")


def write_shapes(root: str | Path, train: int = 300, val: int = 60, size: int = 160, seed: int = 0,
                 classes: int = 3) -> Path:
    """Write a generated object-detection set in YOLO format; returns the path of its ``data.yaml``.

    Each image (``size`` × ``size`` RGB) has a noisy or gradient background, lightly blurred, with 1–4 solid
    shapes of ``classes`` classes (rectangle, ellipse, triangle, and with ``classes=4`` cross), each 15–60 % of
    the side, in random colours; labels
    are ``class x_center y_center width height`` in [0, 1] (YOLO format). Layout: ``images/{train,val}``,
    ``labels/{train,val}``, ``data.yaml``. Deterministic for a seed.
    """
    import numpy as np
    from PIL import Image, ImageDraw, ImageFilter

    rng = np.random.default_rng(seed)
    root = Path(root)
    for split, count in (("train", train), ("val", val)):
        (root / "images" / split).mkdir(parents=True, exist_ok=True)
        (root / "labels" / split).mkdir(parents=True, exist_ok=True)
        for n in range(count):
            if rng.random() < 0.5:
                background = rng.normal(127, 40, (size, size, 3)).clip(0, 255).astype(np.uint8)
            else:
                ramp = np.linspace(0, 1, size)[None, :, None] * rng.uniform(0, 255, 3) + rng.uniform(0, 120, 3)
                background = np.broadcast_to(ramp, (size, size, 3)).clip(0, 255).astype(np.uint8)
            image = Image.fromarray(np.ascontiguousarray(background))
            draw = ImageDraw.Draw(image)
            lines = []
            for _ in range(int(rng.integers(1, 5))):
                cls = int(rng.integers(0, classes))
                w, h = (rng.uniform(0.15, 0.6, 2) * size).astype(int)
                x0, y0 = int(rng.integers(0, size - w)), int(rng.integers(0, size - h))
                box = (x0, y0, x0 + w, y0 + h)
                colour = tuple(int(c) for c in rng.integers(0, 256, 3))
                if cls == 0:
                    draw.rectangle(box, fill=colour)
                elif cls == 1:
                    draw.ellipse(box, fill=colour)
                elif cls == 2:
                    draw.polygon([(x0 + w / 2, y0), (x0, y0 + h), (x0 + w, y0 + h)], fill=colour)
                else:
                    draw.rectangle((x0 + w // 3, y0, x0 + 2 * w // 3, y0 + h), fill=colour)
                    draw.rectangle((x0, y0 + h // 3, x0 + w, y0 + 2 * h // 3), fill=colour)
                lines.append(f"{cls} {(x0 + w / 2) / size:.6f} {(y0 + h / 2) / size:.6f} {w / size:.6f} {h / size:.6f}")
            image = image.filter(ImageFilter.GaussianBlur(radius=float(rng.uniform(0, 1.0))))
            image.save(root / "images" / split / f"{n:04d}.png")
            (root / "labels" / split / f"{n:04d}.txt").write_text("\n".join(lines) + "\n")
    names = "\n".join(f"  {i}: {name}" for i, name in enumerate(SHAPE_CLASSES[:classes]))
    # no "path:" entry: ultralytics and Twinkle then both resolve the splits against this file's folder
    (root / "data.yaml").write_text(f"train: images/train\nval: images/val\nnames:\n{names}\n")
    return root / "data.yaml"


def write_digits_as_found(root: str | Path, count: int = 600, seed: int = 0,
                          sides: tuple[int, int] = (16, 96)) -> Path:
    """Write ``count`` of scikit-learn's digits as a folder as users have them: RGB JPEGs of random sizes
    (a shorter side from ``sides``, 16–96 px by default; some not square), one RGBA PNG and one palette GIF, in
    ``root/<digit>/``. Returns ``root``.

    Deterministic for a seed; needs scikit-learn.
    """
    import numpy as np
    from PIL import Image
    from sklearn.datasets import load_digits

    digits = load_digits()
    rng = np.random.default_rng(seed)
    root = Path(root)
    picked = rng.permutation(len(digits.target))[:count]
    for n, i in enumerate(picked):
        folder = root / str(digits.target[i])
        folder.mkdir(parents=True, exist_ok=True)
        grey = Image.fromarray(np.clip(digits.images[i] * (255 / 16), 0, 255).astype(np.uint8), mode="L")
        side = int(rng.integers(sides[0], sides[1] + 1))
        wide = side + int(rng.integers(0, side // 4 + 1)) if rng.random() < 0.3 else side
        image = grey.resize((wide, side), Image.BICUBIC).convert("RGB")
        if n == 0:
            image.convert("RGBA").save(folder / f"{n:04d}.png")
        elif n == 1:
            image.convert("P").save(folder / f"{n:04d}.gif")
        else:
            image.save(folder / f"{n:04d}.jpg", quality=int(rng.integers(70, 96)))
    return root
