"""llm-tiny on two processes (DDP over gloo) is one run: the same result on both ranks, a validation perplexity
over every rank's windows (what one process computes on the whole validation split with the best checkpoint),
and held-out generations that both ranks make together and rank 0 writes once per validation."""

from __future__ import annotations

import json
import math
import os
from pathlib import Path

import pytest
import torch

from twinkle_core import RunStore, Trainer
from twinkle_core.testing import run_script

pytestmark = [pytest.mark.slow, pytest.mark.processes]  # two training processes


def test_two_processes_make_one_run_with_a_whole_validation_and_one_set_of_generations(topics: Path,
                                                                                        tmp_path: Path) -> None:
    data = tmp_path / "topics-24.jsonl"
    data.write_text("".join(topics.read_text().splitlines(keepends=True)[:24]))
    home = tmp_path / "home"
    env = {**os.environ, "PYTHONWARNINGS": "ignore", "OMP_NUM_THREADS": "1", "TWINKLE_HOME": str(home),
           "TWINKLE_USER": "tester"}
    done = run_script([str(Path(__file__).with_name("train_ddp.py")), str(data), str(tmp_path)], env=env,
                      timeout=900)
    assert done.returncode == 0, done.stdout[-2000:] + done.stderr[-4000:]
    ranks = [json.loads((tmp_path / f"rank{rank}.json").read_text()) for rank in (0, 1)]
    assert ranks[0]["strategy"] == "ddp" and ranks[0] == ranks[1]  # one result, on every rank
    (run,) = RunStore(str(home)).list()
    assert run.uri == ranks[0]["run_uri"] and run.status == "finished"

    written = sorted((home / "runs" / "tester" / "default" / run.uri.rsplit("/", 1)[1] / "generations").glob("*"))
    assert len(written) == 2  # one file per validation, written once
    assert all(len(path.read_text().splitlines()) == 2 for path in written)

    model, prepared, _, _ = Trainer.from_checkpoint(run.uri, mode="finetune", home=str(home),
                                                    verbose=False).model_for_export()
    model.eval()
    total = count = 0.0
    with torch.no_grad():
        for ids, labels, positions in torch.utils.data.DataLoader(prepared.val, batch_size=16):
            logits = model(ids, positions)[:, :-1]
            targets = labels[:, 1:]
            total += float(torch.nn.functional.cross_entropy(logits.reshape(-1, logits.size(-1)), targets.reshape(-1),
                                                             ignore_index=-100, reduction="sum"))
            count += float((targets != -100).sum())
    assert ranks[0]["best_metric"] == pytest.approx(total / count, rel=1e-4)  # val_loss over the whole split
    assert ranks[0]["metrics"]["val_perplexity"] == pytest.approx(math.exp(ranks[0]["metrics"]["val_loss"]), rel=1e-4)
