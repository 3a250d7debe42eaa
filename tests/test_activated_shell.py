"""What ``make`` sets up works from a plain shell: ``source .venv/bin/activate`` in a clean environment — a fresh
``HOME``, none of the Makefile's variables (no ``XDG_CACHE_HOME``, ``TWINKLE_*``, ``YOLO_*``, ``HF_*``) — runs the
README's commands and the edge guide's flow. rknn-toolkit2's converter venv that ``make`` built is found inside the
venv with no variable set (it used to be made under the Makefile's cache, which only the Makefile knew)."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

VENV = Path(sys.prefix)
"""The environment the tests run in: the ``.venv`` that ``make`` set up (the activate script a user sources)."""


def activated(script: str, folder: Path) -> subprocess.CompletedProcess[str]:
    """Run ``script`` in bash after ``source VENV/bin/activate``, in ``folder``, with an environment that holds only
    what a login shell would: ``HOME`` (``folder/home``), a system ``PATH`` and a locale."""
    home = folder / "home"
    home.mkdir(exist_ok=True)
    env = {"HOME": str(home), "PATH": "/usr/local/bin:/usr/bin:/bin", "LANG": "C.UTF-8", "OMP_NUM_THREADS": "1"}
    return subprocess.run(["bash", "--noprofile", "--norc", "-c", f"set -e\nsource {VENV}/bin/activate\n{script}"],
                          cwd=folder, env=env, capture_output=True, text=True, timeout=900)


@pytest.fixture(scope="module")
def readme_shell(tmp_path_factory: pytest.TempPathFactory, cancer_csv: Path) -> tuple[Path, subprocess.CompletedProcess[str]]:
    """The README's 'source .venv/bin/activate' block, run once in a fresh folder with ``cancer.csv``: the folder
    (its ``home`` holds the run ``twinkle train`` made, 30 epochs of the tabular MLP as the README writes it) and
    what the shell printed. Then, as a new user's first hour goes on: ``twinkle doctor`` (the shell stops if it exits
    non-zero) and a LoRA run of twinkle-llm from the command line on a tiny local Qwen3 folder."""
    from twinkle_llm.samples import code_words, write_chat_base, write_conversations

    folder = tmp_path_factory.mktemp("shell")
    (folder / "cancer.csv").write_bytes(cancer_csv.read_bytes())
    train = code_words(words=4)[0]  # a tiny local Qwen3 folder and a few chats for the LoRA run
    write_chat_base(folder / "qwen3-tiny", [f"{prompt} {answer}" for prompt, answer in train])
    write_conversations(folder / "chats.jsonl", train)
    done = activated("""
        twinkle plugins list --json > plugins.json
        twinkle algorithms list 'resnet*' --json > resnets.json
        twinkle train tabular-mlp --data cancer.csv --epochs 30
        twinkle tasks list
        twinkle runs list --json > runs.json
        twinkle plugins new acme
        twinkle doctor > doctor.txt
        twinkle train llm-tiny --task instruction_tuning --data chats.jsonl --hp weights=qwen3-tiny --hp lora_rank=4 \
          --epochs 1 --max-restarts 0 --json > lora.json
    """, folder)
    return folder, done


def test_the_readmes_commands_run_in_an_activated_shell(readme_shell) -> None:
    """Every plugin loads, training lands in ``~/.twinkle``, the plugin project is made."""
    folder, done = readme_shell
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    plugins = {row["name"]: row for row in json.loads((folder / "plugins.json").read_text())}
    assert {"vision", "timeseries", "audio", "edge"} <= set(plugins), sorted(plugins)
    assert all(row["error"] is None for row in plugins.values()), plugins
    assert "resnet18" in [row["name"] for row in json.loads((folder / "resnets.json").read_text())]
    assert "tabular_classification" in done.stdout
    (run,) = json.loads((folder / "runs.json").read_text())
    assert run["status"] == "finished" and run["uri"].startswith("twinkle://")
    assert (folder / "home" / ".twinkle" / "catalogue.sqlite").exists()  # the default store, under HOME
    assert (folder / "twinkle-acme" / "pyproject.toml").exists()


def test_doctor_finds_nothing_missing_and_lora_trains_in_an_activated_shell(readme_shell) -> None:
    """What `make` set up is everything a plugin needs (`twinkle doctor` exits 0: soundfile's libsndfile loads, so
    transformers' model classes import, and espeak-ng is on the system PATH), and twinkle-llm trains LoRA adapters
    from the command line in a plain shell."""
    folder, done = readme_shell
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    doctor = (folder / "doctor.txt").read_text()
    assert "everything needed is here" in doctor, doctor
    for line in ("audio: libsndfile", "audio: espeak-ng", "llm: transformers"):
        assert any(row.split()[0] == "ok" and line in row for row in doctor.splitlines()), doctor
    lora = json.loads((folder / "lora.json").read_text())
    assert lora["status"] == "finished", lora


@pytest.mark.slow
def test_the_edge_flow_finds_the_converter_that_make_built(readme_shell) -> None:
    """The edge guide's two calls on the README's run — ``EdgeOptimizer(...).optimize()`` for rk3588 and
    ``twinkle export RUN --format rknn`` — from the activated shell: both convert in rknn's simulator through the
    venv's own converter."""
    folder, trained = readme_shell
    assert trained.returncode == 0, trained.stderr[-3000:]
    done = activated("""
        RUN=$(python -c 'import json; print(json.load(open("runs.json"))[0]["uri"])')
        python - "$RUN" <<'EOF'
import sys
from twinkle_edge import EdgeOptimizer

report = EdgeOptimizer(model=sys.argv[1], target="rk3588", pruning_ratio=0.3, finetune_epochs=1).optimize()
print("STAGES", [stage.name for stage in report.stages])
EOF
        twinkle export "$RUN" --format rknn
    """, folder)
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    assert "ConverterMissingError" not in done.stderr
    assert "STAGES" in done.stdout and "converted" in done.stdout.split("STAGES", 1)[1].splitlines()[0]
    assert len(list((folder / "home" / ".twinkle").rglob("*.rknn"))) >= 2, "both calls write a .rknn"
