"""``twinkle launch``: one job over several machines, through torchrun (c10d rendezvous).

It writes the job (``Job``) into the run store's ``jobs/`` folder and prints the
command to start on every node; with ``--run`` it starts this node's share itself. Every node runs the same
command: torchrun's c10d rendezvous assigns the ranks, whichever node becomes rank 0 creates the one run, and
``--max-restarts`` restarts the whole group from the run's last checkpoint when a process dies (the same run,
resumed exactly). The run store (``TWINKLE_HOME``) must be on storage every node sees.
"""

from __future__ import annotations

import shlex
import subprocess
import sys

import click

from twinkle_core.cli.options import hyperparams_from
from twinkle_core.cli.output import echo_json
from twinkle_core.processes import DEFAULT_MAX_RESTARTS


def torchrun_command(folder: str, nodes: int, devices: int, endpoint: str, job_id: str, max_restarts: int) -> list[str]:
    """The torchrun command line every node runs for the job in ``folder``."""
    return [sys.executable, "-m", "torch.distributed.run", f"--nnodes={nodes}", f"--nproc-per-node={devices}",
            "--rdzv-backend=c10d", f"--rdzv-endpoint={endpoint}", f"--rdzv-id={job_id}",
            f"--max-restarts={max_restarts}", "-m", "twinkle_core.jobs.child", folder]


@click.command()
@click.argument("algorithm")
@click.option("--data", "-d", required=True, help="Data path or URI every node can read.")
@click.option("--task", "-t", help="The task (default: the algorithm's).")
@click.option("--hp", "hp", multiple=True, metavar="KEY=VALUE", help="A hyperparameter; repeatable.")
@click.option("--epochs", type=int, help="Shorthand for --hp max_epochs=N.")
@click.option("--nodes", type=click.IntRange(min=1), default=1, show_default=True, help="Machines taking part.")
@click.option("--devices", type=click.IntRange(min=1), default=1, show_default=True,
              help="Processes per machine (GPUs per node; CPU processes on CPU-only nodes).")
@click.option("--master-addr", default="127.0.0.1", show_default=True,
              help="The rendezvous host: an address every node reaches (the first node's).")
@click.option("--master-port", type=int, default=29400, show_default=True, help="The rendezvous port.")
@click.option("--max-restarts", type=click.IntRange(min=0), default=DEFAULT_MAX_RESTARTS, show_default=True,
              help="Restarts of the whole group from the last checkpoint after a process dies.")
@click.option("--user", help="Run store user.")
@click.option("--project", help="Run store project.")
@click.option("--run", "start", is_flag=True, help="Start this node's share now (and wait for the job).")
@click.option("--json", "as_json", is_flag=True, help="Print the job folder and command as JSON.")
def launch(algorithm: str, data: str, task: str | None, hp: tuple[str, ...], epochs: int | None, nodes: int,
           devices: int, master_addr: str, master_port: int, max_restarts: int, user: str | None,
           project: str | None, start: bool, as_json: bool) -> None:
    """Write a job for ALGORITHM on --data and print (or --run) the torchrun command for each of --nodes."""
    import os

    from twinkle_core import TrainingSpec  # imported with the collector paused (twinkle_core.imports)
    from twinkle_core.jobs import Job, job_dir
    from twinkle_core.spec import resolve

    spec = TrainingSpec.of(algorithm, task, hyperparams_from(hp, epochs), user=user, project=project)
    resolve(spec)  # names and values checked now, as Trainer(...) checks them
    job = Job.from_spec(spec, data, max_restarts)
    folder = job_dir()
    job.save(folder)
    job_id = os.path.basename(folder)
    command = torchrun_command(folder, nodes, devices, f"{master_addr}:{master_port}", job_id, max_restarts)
    if as_json:
        echo_json({"job": job_id, "folder": folder, "command": command, "nodes": nodes, "devices": devices})
    else:
        click.echo(f"Job {job_id} ({folder}). On each of the {nodes} node(s), with TWINKLE_HOME on shared storage:")
        click.echo("  " + shlex.join(command))
    if start:
        sys.exit(subprocess.call(command))


COMMANDS = (launch,)
