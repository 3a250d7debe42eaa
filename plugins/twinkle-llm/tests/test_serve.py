"""A language model through ``twinkle serve`` trains like any other job: alice submits llm-tiny pre-training on
text in the server's datasets folder; the job finishes in a run of hers that logged its perplexity, wrote held-out
generations and continues text from its best checkpoint. A reinforcement-learning job on the same server — prompts
and a base model folder under the datasets root, rewards named in the job — trains GRPO in her run."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest

from twinkle_core import RunStore, Trainer
from twinkle_core.client import Client

pytestmark = [pytest.mark.slow, pytest.mark.processes]  # a server and its worker


def test_an_llm_job_through_the_service_trains_in_the_users_run(twinkle_service, topics: Path, small_base: Path,
                                                                tmp_path: Path) -> None:
    some = tmp_path / "topics-20.jsonl"
    some.write_text("".join(topics.read_text().splitlines(keepends=True)[:20]))
    home, data, tokens = twinkle_service.home(some, "alice")
    port = twinkle_service.free_port()
    twinkle_service.start(home, port, "--workers", "1", "--poll", "0.2")
    client = Client(f"http://127.0.0.1:{port}", tokens["alice"])
    job = client.submit("llm-tiny", data, {"max_epochs": 2, "max_seq_len": 64, "vocab_size": 512, "batch_size": 16,
                                           "progress_bar": False}, project="text")
    assert job.wait(timeout=600, poll=0.5) == "finished", twinkle_service.log.read_text()[-3000:]
    run_uri = job.result()["run"]
    assert run_uri.startswith("twinkle://alice/text/")
    record = RunStore(str(home)).get(run_uri)
    assert record.status == "finished" and record.algorithm == "llm-tiny" and record.task == "causal_lm"
    assert record.metrics["val_perplexity"] < 512  # below a uniform guess over the 512-id vocabulary
    assert {row.get("val_perplexity") is not None for row in job.metrics()} >= {True}
    assert record.measured["tokens_per_second"] > 0 and record.measured["mfu"] > 0
    written = sorted(Path(RunStore(str(home)).run_dir(RunStore(str(home)).run_id(run_uri))).glob(
        "generations/step-*.jsonl"))
    assert len(written) == 2 and all(json.loads(line)["prompt"] for line in written[-1].read_text().splitlines())
    trained = Trainer.from_checkpoint(run_uri, mode="finetune", home=str(home), verbose=False)
    assert trained.generate("The ", max_new_tokens=8)

    # reinforcement learning as a job: the base and the prompts under the datasets root, the reward by name
    datasets = Path(data).parent
    shutil.copytree(small_base, datasets / "base")
    (datasets / "prompts.jsonl").write_text("".join(json.dumps({"prompt": f"Spell {100 + i}"}) + "\n"
                                                    for i in range(12)))
    rl = client.submit("llm-tiny", str(datasets / "prompts.jsonl"), task="reinforcement_learning", project="rl",
                       weights=str(datasets / "base"), rewards=[{"name": "format", "pattern": "7", "search": True}],
                       group_size=4, max_new_tokens=8, batch_size=4, max_epochs=2, lr=1e-2, progress_bar=False)
    assert rl.wait(timeout=600, poll=0.5) == "finished", twinkle_service.log.read_text()[-3000:]
    record = RunStore(str(home)).get(rl.result()["run"])
    assert record.task == "reinforcement_learning" and record.hyperparams["rewards"][0]["name"] == "format"
    assert "val_reward" in record.metrics and record.metrics["train_reward_epoch"] >= 0.0
    plan = json.loads((Path(RunStore(str(home)).run_dir(record.id)) / "plan.json").read_text())
    assert any(d["name"] == "rollouts" and d["value"] == 16 for d in plan["decisions"])
