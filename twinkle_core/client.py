"""``Client``: submit training jobs to a ``twinkle serve`` and follow them (standard library only).

For example:

```python
from twinkle_core.client import Client

client = Client("http://127.0.0.1:8765", token="tw_...")
job = client.submit("resnet18", data="/data/digits", hyperparams={"max_epochs": 3})
job.wait()                     # until finished | failed | cancelled | stopped
print(job.result()["run"])     # twinkle://alice/default/run1
```

``submit`` takes ``Trainer``'s arguments (algorithm, task, hyperparams, data_processor, resource_strategy,
project, and any other hyperparameter as a keyword) plus the job's own (priority, resources, monitor, budget,
max_restarts, wall_clock_limit). Without ``url``/``token`` it reads ``$TWINKLE_SERVER`` and ``$TWINKLE_TOKEN``.
"""

from __future__ import annotations

import json
import os
import time
import urllib.error
import urllib.parse
import urllib.request
from collections.abc import Iterator
from typing import Any

from twinkle_core.errors import TwinkleError

DEFAULT_SERVER = "http://127.0.0.1:8765"
"""Where a client looks when neither ``url`` nor ``$TWINKLE_SERVER`` says."""
FINAL = ("finished", "failed", "cancelled", "stopped")
"""Job states that do not change any more."""
_JOB_FIELDS = ("priority", "resources", "monitor", "budget", "max_restarts", "wall_clock_limit", "task",
               "data_processor", "resource_strategy", "project", "continues")


class ServiceError(TwinkleError):
    """The server refused a request (``status``: its HTTP status; the message is the server's reason)."""

    def __init__(self, status: int, message: str) -> None:
        """Keep the status."""
        super().__init__(f"{message} (HTTP {status})")
        self.status = status


def _detail(err: urllib.error.HTTPError) -> str:
    """The server's reason for refusing a request."""
    try:
        detail = json.loads(err.read().decode() or "{}").get("detail", err.reason)
    except (json.JSONDecodeError, UnicodeDecodeError, AttributeError):
        detail = err.reason
    if isinstance(detail, list):  # pydantic's validation errors
        detail = "; ".join(f"{'.'.join(str(p) for p in d.get('loc', []))}: {d.get('msg')}" for d in detail)
    return str(detail)


class Client:
    """A connection to a Twinkle server.

    Args:
        url: the server (default ``$TWINKLE_SERVER``, else ``http://127.0.0.1:8765``).
        token: an API token from ``twinkle users add`` (default ``$TWINKLE_TOKEN``; none for a server
            without auth).
        timeout: seconds for each request.
    """

    def __init__(self, url: str | None = None, token: str | None = None, timeout: float = 30.0) -> None:
        """Remember where and who; nothing is sent yet."""
        self.url = (url or os.environ.get("TWINKLE_SERVER") or DEFAULT_SERVER).rstrip("/")
        self.token = token if token is not None else os.environ.get("TWINKLE_TOKEN")
        self.timeout = timeout

    # ------------------------------------------------------------------ HTTP
    def _open(self, method: str, path: str, body: Any = None, headers: dict[str, str] | None = None,
              timeout: float | None = None) -> Any:
        data = json.dumps(body).encode() if body is not None else None
        request = urllib.request.Request(f"{self.url}/api/v1{path}", data=data, method=method)
        request.add_header("Accept", "application/json")
        if data is not None:
            request.add_header("Content-Type", "application/json")
        if self.token:
            request.add_header("Authorization", f"Bearer {self.token}")
        for key, value in (headers or {}).items():
            request.add_header(key, value)
        try:
            return urllib.request.urlopen(request, timeout=timeout or self.timeout)  # noqa: S310 — http(s) only
        except urllib.error.HTTPError as err:
            raise ServiceError(err.code, _detail(err)) from None
        except urllib.error.URLError as err:
            raise TwinkleError(f"cannot reach the Twinkle server at {self.url}: {err.reason} (is 'twinkle serve' "
                               "running? set TWINKLE_SERVER)") from None

    def request(self, method: str, path: str, body: Any = None) -> Any:
        """``method path`` under ``/api/v1``, the JSON answer parsed."""
        with self._open(method, path, body) as response:
            return json.loads(response.read().decode() or "null")

    # ------------------------------------------------------------------ jobs
    def submit(self, algorithm: str, data: str, hyperparams: dict[str, Any] | None = None, **options: Any) -> Job:
        """Queue a job; returns its handle. Keywords that are not job fields are hyperparameters;
        ``continues={"run": "twinkle://you/project/runN", "mode": "finetune"}`` starts from a run of yours (of
        ``algorithm``).

        Raises:
            ServiceError: the server refused it (a bad algorithm or hyperparameter: 400; data outside the
                server's roots: 403; the user's queue full: 429; a malformed field: 422).
        """
        body: dict[str, Any] = {"algorithm": algorithm, "data": data, "hyperparams": dict(hyperparams or {})}
        for key, value in options.items():
            if key in _JOB_FIELDS:
                body[key] = value
            else:
                body["hyperparams"][key] = value
        return Job(self, self.request("POST", "/jobs", body))

    def upload(self, path: str, name: str | None = None) -> dict[str, Any]:
        """Send a local file or archive (``.zip``, ``.tar``, ``.tar.gz``, ``.tgz``: unpacked on the server) to
        your uploads; returns ``{"name", "data", "bytes"}`` — ``data`` is what to submit jobs on.

        Raises:
            ServiceError: too large for the server (413), a bad name or archive (400).
        """
        name = name or os.path.basename(os.path.normpath(path))
        size = os.path.getsize(path)
        with open(path, "rb") as body:
            request = urllib.request.Request(f"{self.url}/api/v1/uploads/{urllib.parse.quote(name, safe='')}",
                                             data=body, method="PUT")
            request.add_header("Content-Length", str(size))
            request.add_header("Content-Type", "application/octet-stream")
            if self.token:
                request.add_header("Authorization", f"Bearer {self.token}")
            try:
                with urllib.request.urlopen(request, timeout=max(self.timeout, 600)) as response:  # noqa: S310
                    return json.loads(response.read().decode())
            except urllib.error.HTTPError as err:
                raise ServiceError(err.code, _detail(err)) from None

    def job(self, job_id: str) -> Job:
        """The handle of an existing job."""
        return Job(self, self.request("GET", f"/jobs/{urllib.parse.quote(job_id, safe='')}"))

    def jobs(self, state: str | None = None, user: str | None = None, limit: int = 100) -> list[dict[str, Any]]:
        """Jobs, newest first (filtered)."""
        query = urllib.parse.urlencode({k: v for k, v in (("state", state), ("user", user), ("limit", limit)) if v})
        return self.request("GET", f"/jobs?{query}")

    def me(self) -> dict[str, Any]:
        """Who this client's token belongs to."""
        return self.request("GET", "/me")

    def events(self, job_id: str, last_event_id: str | None = None) -> Iterator[dict[str, Any]]:
        """The job's server-sent events as ``{"event", "id", "data"}``, until ``end``; reconnects after a
        dropped connection from the last event's id."""
        cursor = last_event_id
        while True:
            headers = {"Accept": "text/event-stream", **({"Last-Event-ID": cursor} if cursor else {})}
            try:
                with self._open("GET", f"/jobs/{urllib.parse.quote(job_id, safe='')}/events", headers=headers,
                                timeout=max(self.timeout, 60)) as stream:
                    event: dict[str, Any] = {}
                    for raw in stream:
                        line = raw.decode("utf-8").rstrip("\r\n")
                        if not line:
                            if "event" in event or "data" in event:
                                event["data"] = json.loads(event.get("data") or "null")
                                cursor = event.get("id", cursor)
                                yield event
                                if event.get("event") == "end":
                                    return
                            event = {}
                            continue
                        if line.startswith(":"):
                            continue
                        key, _, value = line.partition(":")
                        value = value[1:] if value.startswith(" ") else value
                        if key == "data":
                            event["data"] = event["data"] + "\n" + value if "data" in event else value
                        elif key in ("event", "id"):
                            event[key] = value
            except (TimeoutError, ConnectionError, urllib.error.URLError):
                time.sleep(1.0)  # reconnect after the last event received


class Job:
    """A submitted job (what ``Client.submit`` returns)."""

    def __init__(self, client: Client, data: dict[str, Any]) -> None:
        """Wrap the server's view of the job."""
        self.client, self.data = client, data
        self.id: str = data["id"]

    def __repr__(self) -> str:
        """``Job('id', state)``."""
        return f"Job({self.id!r}, {self.data.get('state')})"

    def refresh(self) -> dict[str, Any]:
        """Fetch the job again; returns the server's view."""
        self.data = self.client.request("GET", f"/jobs/{self.id}")
        return self.data

    def status(self) -> str:
        """The job's state now (``queued``, ``running``, ``finished``, ``failed``, ``cancelled``, ``stopped``)."""
        return self.refresh()["state"]

    def wait(self, timeout: float | None = None, poll: float = 1.0) -> str:
        """Block until the job has ended; returns its final state.

        Raises:
            TimeoutError: ``timeout`` seconds passed first.
        """
        deadline = None if timeout is None else time.monotonic() + timeout
        while (state := self.status()) not in FINAL:
            if deadline is not None and time.monotonic() > deadline:
                raise TimeoutError(f"job {self.id} is still {state} after {timeout} s")
            time.sleep(poll)
        return state

    def logs(self, follow: bool = False) -> Iterator[str]:
        """The job's output; with ``follow``, live until the job ends."""
        if follow:
            for event in self.client.events(self.id):
                if event.get("event") == "log":
                    yield event["data"]["text"]
            return
        offset = 0
        while True:
            chunk = self.client.request("GET", f"/jobs/{self.id}/logs?offset={offset}")
            if not chunk["text"]:
                return
            yield chunk["text"]
            offset = chunk["next_offset"]

    def metrics(self) -> list[dict[str, Any]]:
        """Every metric row the job's run has logged so far."""
        return self.client.request("GET", f"/jobs/{self.id}/metrics")["rows"]

    def cancel(self) -> str:
        """Cancel the job (a running one stops at a checkpoint); returns its state after the request."""
        self.data = self.client.request("POST", f"/jobs/{self.id}/cancel")
        return self.data["state"]

    def result(self) -> dict[str, Any]:
        """How the job ended: ``state``, ``reason``, ``run`` (its run URI) and the run's result.

        Raises:
            TwinkleError: the job has not ended yet.
        """
        data = self.refresh()
        if data["state"] not in FINAL:
            raise TwinkleError(f"job {self.id} is {data['state']}; call wait() first")
        return {"state": data["state"], "reason": data.get("reason"), "run": data.get("run"),
                "result": data.get("result")}
