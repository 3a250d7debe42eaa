"""Image loading throughput: decoding every file each epoch against a memory-mapped index of decoded images.

Both read scikit-learn's digits written as PNG files (1,797 images, resized to 32×32), one epoch at a time
through a DataLoader (batch 64, no workers), in interleaved rounds. The index is built once (its cost is
reported separately). Writes ``bench/results/data_throughput.json``.

    python bench/data_throughput.py [--rounds 5]
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import statistics
import tempfile
import time
from pathlib import Path

os.environ.setdefault("OMP_NUM_THREADS", "1")

from torch.utils.data import DataLoader  # noqa: E402

from twinkle_vision.images import ImageFolderProcessor  # noqa: E402
from twinkle_vision.samples import write_digits  # noqa: E402

RESULTS = Path(__file__).resolve().parent / "results" / "data_throughput.json"


def epoch_seconds(dataset) -> float:
    """Seconds to read every sample of ``dataset`` once in batches of 64."""
    start = time.perf_counter()
    for _ in DataLoader(dataset, batch_size=64, shuffle=False):
        pass
    return time.perf_counter() - start


def main() -> None:
    """Measure both paths, print the ratio and write the results file."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=5)
    args = parser.parse_args()
    work = Path(tempfile.mkdtemp(prefix="twinkle-data-bench-"))
    os.environ["TWINKLE_HOME"] = str(work / "home")
    folder = write_digits(work / "digits")
    files = ImageFolderProcessor(image_size=32).prepare(str(folder)).train
    start = time.perf_counter()
    index = ImageFolderProcessor.build_index(str(folder), str(work / "digits.idx"), image_size=32)
    build_seconds = time.perf_counter() - start
    mapped = ImageFolderProcessor(use_mmap=True).prepare(index).train
    times: dict[str, list[float]] = {"per_file_decode": [], "mmap_index": []}
    for _ in range(args.rounds):
        times["per_file_decode"].append(epoch_seconds(files))
        times["mmap_index"].append(epoch_seconds(mapped))
    med = {k: statistics.median(v) for k, v in times.items()}
    images = len(files)
    result = {
        "machine": {"python": platform.python_version(), "cpus": os.cpu_count()},
        "images_per_epoch": images,
        "images_per_second": {k: round(images / v, 1) for k, v in med.items()},
        "speedup": round(med["per_file_decode"] / med["mmap_index"], 2),
        "index_build_seconds": round(build_seconds, 3),
        "rounds_seconds": {k: [round(x, 4) for x in v] for k, v in times.items()},
    }
    RESULTS.parent.mkdir(parents=True, exist_ok=True)
    RESULTS.write_text(json.dumps(result, indent=2) + "\n")
    print(f"per-file decode {result['images_per_second']['per_file_decode']:.0f} img/s, "
          f"mmap index {result['images_per_second']['mmap_index']:.0f} img/s: {result['speedup']}× "
          f"(index built once in {build_seconds:.2f} s)")
    print(f"written to {RESULTS}")


if __name__ == "__main__":
    main()
