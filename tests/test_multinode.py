"""Two torchrun "nodes" on loopback (2 × 1 process, c10d rendezvous) started from ``twinkle launch``'s command:
one finished run in the store, whichever node became rank 0, and the same final weights on both ranks."""

from __future__ import annotations

import json
import os
import socket
import subprocess
import sys
from pathlib import Path

from twinkle_core import RunStore


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def test_two_torchrun_nodes_make_one_run_with_equal_weights(tmp_path, cancer_csv) -> None:
    home = tmp_path / "home"
    env = {**os.environ, "TWINKLE_HOME": str(home), "TWINKLE_USER": "tester", "OMP_NUM_THREADS": "1"}
    printed = subprocess.run(
        [sys.executable, "-m", "twinkle_core", "launch", "tabular-mlp", "--data", str(cancer_csv), "--nodes", "2",
         "--devices", "1", "--master-port", str(_free_port()), "--project", "nodes", "--json",
         "--hp", "max_epochs=3", "--hp", "batch_size=32", "--hp", "progress_bar=false"],
        env=env, capture_output=True, text=True, timeout=120)
    assert printed.returncode == 0, printed.stderr[-3000:]
    launch = json.loads(printed.stdout)
    assert "torch.distributed.run" in launch["command"] and "--nnodes=2" in launch["command"]
    nodes = [subprocess.Popen(launch["command"], env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
                              start_new_session=True) for _ in range(2)]
    outputs = [node.communicate(timeout=600)[0] for node in nodes]
    assert [node.returncode for node in nodes] == [0, 0], "\n".join(o[-3000:] for o in outputs)
    folder = Path(launch["folder"])
    result = json.loads((folder / "result.json").read_text())
    ranks = [json.loads((folder / f"rank-{r}.json").read_text()) for r in (0, 1)]
    assert result["status"] == "finished" and ranks[0]["weights_md5"] == ranks[1]["weights_md5"]
    (run,) = RunStore(str(home)).list(project="nodes")
    assert run.uri == result["run_uri"] == ranks[1]["run"] and run.status == "finished"
    plan = run.plan
    assert (plan["num_nodes"], plan["devices"], plan["strategy"]) == (2, 1, "ddp")
    reasons = {d["name"]: d["reason"] for d in plan["decisions"]}
    assert reasons["num_nodes"] == "torchrun: 2 node(s)"
