"""``twinkle serve``, ``twinkle users``, ``twinkle submit`` and ``twinkle jobs``: the service from the command
line. The client commands reach the server at ``--server`` (``$TWINKLE_SERVER``) with ``--token``
(``$TWINKLE_TOKEN``)."""

from __future__ import annotations

import datetime as dt
import os
import sys
from typing import Any

import click

from twinkle_core.cli.options import hyperparams_from
from twinkle_core.cli.output import echo_json, echo_table
from twinkle_core.processes import DEFAULT_MAX_RESTARTS


def _home(home: str | None) -> str:
    from twinkle_core.uris import twinkle_home

    return home or twinkle_home()


@click.command()
@click.option("--host", default="127.0.0.1", show_default=True, help="Address to bind (not loopback: auth must be on).")
@click.option("--port", type=click.IntRange(0, 65535), default=8765, show_default=True)
@click.option("--workers", type=click.IntRange(min=0), help="Local worker processes (default: what the machine holds).")
@click.option("--home", help="The run store (default $TWINKLE_HOME).")
@click.option("--no-auth", is_flag=True, help="No tokens: every request is the local user (loopback only).")
@click.option("--data-root", "data_roots", multiple=True, metavar="PATH|URI",
              help="Where jobs may read data; repeatable (default: <home>/datasets).")
@click.option("--max-running-per-user", type=click.IntRange(min=1), help="Jobs of one user running at once.")
@click.option("--max-queued-per-user", type=click.IntRange(min=1), default=100, show_default=True)
@click.option("--max-wall-clock", type=click.FloatRange(min=0, min_open=True), help="Seconds any job may run.")
@click.option("--lease", "lease_seconds", type=click.FloatRange(min=0.5, min_open=True), default=30.0,
              show_default=True, help="Seconds a worker may miss before its job is given to another.")
@click.option("--grace", "grace_seconds", type=click.FloatRange(min=0), default=30.0, show_default=True,
              help="Seconds between SIGTERM and SIGKILL when a job is stopped.")
@click.option("--poll", "poll_seconds", type=click.FloatRange(min=0, min_open=True), default=1.0, show_default=True,
              help="How often an idle worker looks for a job.")
@click.option("--max-upload", "max_upload_bytes", default="1GiB", show_default=True,
              help="The largest data upload (and what an archive may unpack to), e.g. 500MiB.")
@click.option("--ray-address", help="Hand jobs with resources.backend='ray' to this Ray cluster.")
@click.option("--training-nice", type=click.IntRange(0, 19), default=10, show_default=True,
              help="The niceness workers and their training run at, so the API and dashboard answer while every core "
                   "trains (0: the API's own priority).")
@click.option("--api-processes", type=click.IntRange(1, 64),
              help="Processes answering the API and dashboard, sharing one socket [default: one per core, at most 4].")
@click.option("--fresh-processes", is_flag=True,
              help="Start each job in a new Python (sees upgraded code; ~10 s slower) instead of forking it from a "
                   "process that imported the Trainer once.")
@click.option("--tinker", is_flag=True,
              help="Also serve the Tinker-compatible training API at /tinker (the tinker SDK's base_url).")
@click.option("--tinker-model", "tinker_models", multiple=True, metavar="NAME=FOLDER",
              help="A base model the Tinker API offers: its name and local Hugging Face folder (repeatable).")
@click.option("--tinker-backend", default="llm", show_default=True, help="The training backend (a plugin's).")
@click.option("--tinker-max-models-per-user", type=click.IntRange(min=1), default=8, show_default=True,
              help="Tinker training models one user may have loaded at once (429 past it).")
@click.option("--tinker-idle-seconds", type=click.FloatRange(min=0, min_open=True), default=600.0, show_default=True,
              help="Write a Tinker model idle this long out of memory (it is loaded back when next used).")
@click.option("--tinker-max-requests-per-minute", type=click.IntRange(min=1),
              help="Tinker submissions one user may make a minute (429 past it; the SDK waits and resends).")
@click.option("--tinker-session-seconds", type=click.FloatRange(min=0, min_open=True), default=120.0,
              show_default=True,
              help="End a Tinker session whose client sent no heartbeat or request this long (a client that exited "
                   "without closing): its models' states are saved as checkpoint 'session-expired' and unloaded.")
@click.option("--tinker-report-to", "tinker_report_to", multiple=True, metavar="TRACKER",
              help="Report every Tinker training model's run to an experiment tracker (mlflow, tensorboard, wandb), "
                   "configured by its environment variables; repeatable.")
def serve(host: str, port: int, workers: int | None, home: str | None, no_auth: bool, data_roots: tuple[str, ...],
          max_running_per_user: int | None, max_queued_per_user: int, max_wall_clock: float | None,
          lease_seconds: float, grace_seconds: float, poll_seconds: float, max_upload_bytes: str,
          ray_address: str | None, training_nice: int, api_processes: int | None, fresh_processes: bool,
          tinker: bool, tinker_models: tuple[str, ...], tinker_backend: str, tinker_max_models_per_user: int,
          tinker_idle_seconds: float, tinker_max_requests_per_minute: int | None,
          tinker_session_seconds: float, tinker_report_to: tuple[str, ...]) -> None:
    """Serve training jobs: the API at /api/v1, the dashboard at /, local workers (and with --tinker the Tinker
    API at /tinker)."""
    from twinkle_core.planning.hardware import parse_bytes
    from twinkle_core.serve import ServerConfig
    from twinkle_core.serve.server import serve as run_server

    try:
        upload_limit = parse_bytes(max_upload_bytes)
    except ValueError as err:
        raise click.BadParameter(str(err), param_hint="--max-upload") from None
    config = ServerConfig(home=os.path.abspath(_home(home)) if "://" not in _home(home) else _home(home), host=host,
                          port=port, auth=not no_auth, workers=workers, data_roots=list(data_roots),
                          max_running_per_user=max_running_per_user, max_queued_per_user=max_queued_per_user,
                          max_wall_clock_seconds=max_wall_clock, lease_seconds=lease_seconds,
                          grace_seconds=grace_seconds, poll_seconds=poll_seconds,
                          max_upload_bytes=upload_limit, ray_address=ray_address, training_nice=training_nice,
                          api_processes=api_processes, fresh_processes=fresh_processes, tinker=tinker,
                          tinker_backend=tinker_backend, tinker_models=_named_folders(tinker_models),
                          tinker_max_models_per_user=tinker_max_models_per_user, tinker_idle_seconds=tinker_idle_seconds,
                          tinker_max_requests_per_minute=tinker_max_requests_per_minute,
                          tinker_session_seconds=tinker_session_seconds,
                          tinker_report_to=[n for given in tinker_report_to for n in given.split(",") if n.strip()])
    run_server(config, announce=lambda text: click.echo(text, err=True))


def _named_folders(given: tuple[str, ...]) -> dict[str, str]:
    """``NAME=FOLDER`` options as a dict, folders made absolute."""
    found = {}
    for item in given:
        name, _, folder = item.partition("=")
        if not name or not folder:
            raise click.BadParameter(f"{item!r}: write NAME=FOLDER", param_hint="--tinker-model")
        found[name] = os.path.abspath(folder)
    return found


# ---------------------------------------------------------------------- users
@click.group()
def users() -> None:
    """Users of 'twinkle serve' and their tokens (run on the server's machine)."""


def _accounts(home: str | None) -> Any:
    from twinkle_core.serve import Accounts, ServerConfig

    return Accounts(ServerConfig(home=os.path.abspath(_home(home))).db_path)


@users.command("add")
@click.argument("name")
@click.option("--admin", is_flag=True, help="May see and cancel every user's jobs and read the audit log.")
@click.option("--home", help="The server's run store (default $TWINKLE_HOME).")
def users_add(name: str, admin: bool, home: str | None) -> None:
    """Add a user and print their token (shown once: only its hash is stored)."""
    token = _accounts(home).add_user(name, admin)
    click.echo(token)
    click.echo(f"Added {name}{' (admin)' if admin else ''}. Keep the token: it is not shown again.", err=True)


@users.command("token")
@click.argument("name")
@click.option("--home", help="The server's run store (default $TWINKLE_HOME).")
def users_token(name: str, home: str | None) -> None:
    """Give a user a new token (the old one stops working)."""
    click.echo(_accounts(home).new_token(name))


@users.command("remove")
@click.argument("name")
@click.option("--home", help="The server's run store (default $TWINKLE_HOME).")
def users_remove(name: str, home: str | None) -> None:
    """Remove a user (their jobs and runs stay)."""
    _accounts(home).remove_user(name)


@users.command("list")
@click.option("--home", help="The server's run store (default $TWINKLE_HOME).")
def users_list(home: str | None) -> None:
    """List users (never their tokens)."""
    rows = [{**u, "created": dt.datetime.fromtimestamp(u["created"]).strftime("%Y-%m-%d %H:%M")}
            for u in _accounts(home).users()]
    echo_table(rows, ["name", "admin", "created"], "No users yet: twinkle users add NAME")


# ---------------------------------------------------------------------- client commands
def _client_options(func: Any) -> Any:
    func = click.option("--server", envvar="TWINKLE_SERVER", help="The server URL ($TWINKLE_SERVER).")(func)
    return click.option("--token", envvar="TWINKLE_TOKEN", help="Your API token ($TWINKLE_TOKEN).")(func)


def _client(server: str | None, token: str | None) -> Any:
    from twinkle_core.client import Client

    return Client(server, token)


@click.command()
@click.argument("algorithm")
@click.option("--data", "-d", required=True, help="The data URI (under one of the server's data roots).")
@click.option("--task", "-t", help="The task (default: the algorithm's).")
@click.option("--hp", "hp", multiple=True, metavar="KEY=VALUE", help="A hyperparameter; repeatable.")
@click.option("--epochs", type=int, help="Shorthand for --hp max_epochs=N.")
@click.option("--project", default="default", show_default=True)
@click.option("--priority", type=click.IntRange(-100, 100), default=0, show_default=True, help="Higher runs first.")
@click.option("--max-restarts", type=click.IntRange(0, 20), default=DEFAULT_MAX_RESTARTS, show_default=True)
@click.option("--wall-clock", type=click.FloatRange(min=0, min_open=True), help="Seconds it may run.")
@click.option("--from", "from_run", metavar="RUN", help="Start from a run of yours (twinkle://you/project/runN).")
@click.option("--mode", type=click.Choice(["continue", "finetune", "resume"]), default="continue", show_default=True,
              help="With --from: keep the optimizer state (continue), the weights only (finetune), or everything "
                   "on the same data (resume).")
@click.option("--wait", "wait_", is_flag=True, help="Follow its output until it ends; exit 1 unless it finished.")
@click.option("--json", "as_json", is_flag=True, help="Print the job as JSON.")
@_client_options
def submit(algorithm: str, data: str, task: str | None, hp: tuple[str, ...], epochs: int | None, project: str,
           priority: int, max_restarts: int, wall_clock: float | None, from_run: str | None, mode: str,
           wait_: bool, as_json: bool, server: str | None, token: str | None) -> None:
    """Submit a training job to a Twinkle server (with --from, one that starts from a run of yours)."""
    continues = {"continues": {"run": from_run, "mode": mode}} if from_run else {}
    job = _client(server, token).submit(algorithm, data, hyperparams_from(hp, epochs), task=task, project=project,
                                        priority=priority, max_restarts=max_restarts, wall_clock_limit=wall_clock,
                                        **continues)
    if as_json and not wait_:
        echo_json(job.data)
        return
    click.echo(f"Submitted job {job.id} ({job.data['state']}{': ' + job.data['pending_reason'] if job.data.get('pending_reason') else ''})")
    if wait_:
        for text in job.logs(follow=True):
            click.echo(text, nl=False)
        result = job.result()
        click.echo(f"Job {job.id} {result['state']}: {result['reason'] or ''} {result['run'] or ''}".rstrip())
        if result["state"] != "finished":
            sys.exit(1)


@click.command()
@click.argument("path", type=click.Path(exists=True, dir_okay=False))
@click.option("--name", help="The name on the server (default: the file's).")
@_client_options
def upload(path: str, name: str | None, server: str | None, token: str | None) -> None:
    """Upload a data file or archive (.zip, .tar, .tar.gz, .tgz: unpacked) to the server; prints the path to
    submit jobs on."""
    result = _client(server, token).upload(path, name)
    click.echo(result["data"])
    click.echo(f"Uploaded {result['bytes']} bytes; submit with --data {result['data']}", err=True)


@click.group()
def jobs() -> None:
    """Jobs on a Twinkle server: list, show, cancel, logs."""


@jobs.command("list")
@click.option("--state", help="Only jobs in this state.")
@click.option("--user", help="Only this user's jobs (admins).")
@click.option("--limit", type=click.IntRange(1, 1000), default=50, show_default=True)
@click.option("--json", "as_json", is_flag=True)
@_client_options
def jobs_list(state: str | None, user: str | None, limit: int, as_json: bool, server: str | None,
              token: str | None) -> None:
    """List jobs, newest first."""
    rows = _client(server, token).jobs(state, user, limit)
    if as_json:
        echo_json(rows)
        return
    table = [{"id": r["id"], "state": r["state"], "algorithm": r["request"]["algorithm"], "user": r["user"],
              "submitted": dt.datetime.fromtimestamp(r["created"]).strftime("%Y-%m-%d %H:%M:%S"),
              "run": r.get("run"), "why": r.get("pending_reason") or r.get("reason")} for r in rows]
    echo_table(table, ["id", "state", "algorithm", "user", "submitted", "run", "why"], "No jobs.")


@jobs.command("show")
@click.argument("job_id")
@_client_options
def jobs_show(job_id: str, server: str | None, token: str | None) -> None:
    """Show a job: its request, state, transitions and result (JSON)."""
    echo_json(_client(server, token).job(job_id).data)


@jobs.command("cancel")
@click.argument("job_id")
@_client_options
def jobs_cancel(job_id: str, server: str | None, token: str | None) -> None:
    """Cancel a job (a running one saves a checkpoint and stops)."""
    state = _client(server, token).job(job_id).cancel()
    click.echo(f"Job {job_id}: {'cancel requested (it stops at a checkpoint)' if state == 'running' else state}")


@jobs.command("logs")
@click.argument("job_id")
@click.option("--follow", "-f", is_flag=True, help="Keep printing until the job ends.")
@_client_options
def jobs_logs(job_id: str, follow: bool, server: str | None, token: str | None) -> None:
    """Print a job's output."""
    for text in _client(server, token).job(job_id).logs(follow=follow):
        click.echo(text, nl=False)


COMMANDS = [serve, users, submit, upload, jobs]
"""The commands this module adds to ``twinkle``."""
