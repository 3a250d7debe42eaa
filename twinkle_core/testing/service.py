"""``ServiceRunner``: ``twinkle serve`` on loopback ports for a test, killed whole when the test ends (the pytest
fixture ``twinkle_service`` gives one per test).

```python
def test_my_algorithm_through_the_service(twinkle_service, tmp_path):
    home, data, tokens = twinkle_service.home(tmp_path / "train.jsonl", "alice")
    port = twinkle_service.free_port()
    twinkle_service.start(home, port, "--workers", "1")
    client = Client(f"http://127.0.0.1:{port}", tokens["alice"])
    job = client.submit("my-algorithm", data, {"max_epochs": 1})
    twinkle_service.wait_for(lambda: client.job(job.id).state == "finished", 300, "the job")
```
"""

from __future__ import annotations

import os
import shutil
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path
from typing import Any, Callable

from twinkle_core.client import Client


def wait_for(condition: Callable[[], Any], timeout: float, what: str, poll: float = 0.2) -> Any:
    """Poll ``condition`` every ``poll`` seconds until it returns something true (and return that), or fail naming
    ``what``.

    Raises:
        AssertionError: ``timeout`` seconds passed.
    """
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        value = condition()
        if value:
            return value
        time.sleep(poll)
    raise AssertionError(f"timed out after {timeout} s waiting for {what}")


class ServiceRunner:
    """Starts ``twinkle serve`` processes on loopback ports (each in its own session, one torch thread per
    process) and kills whatever is left at the end; the servers' output goes to ``log``.

    Attributes:
        folder: where the store (``home()``) and ``server.log`` go.
        log: the servers' combined output, to show when a test fails.
    """

    def __init__(self, folder: Path) -> None:
        """Keep everything under ``folder`` (a test's temporary folder)."""
        self.folder = Path(folder)
        self.log = self.folder / "server.log"
        self.processes: list[subprocess.Popen[bytes]] = []

    def home(self, data: Path, *users: str) -> tuple[Path, str, dict[str, str]]:
        """A run store holding a copy of ``data`` (a file or a folder) under ``datasets/``, and an account with a
        token for each of ``users``; returns the store, the copy's path and the tokens by user."""
        from twinkle_core.serve import Accounts, ServerConfig

        home = self.folder / "home"
        target = home / "datasets" / Path(data).name
        target.parent.mkdir(parents=True, exist_ok=True)
        if Path(data).is_dir():
            shutil.copytree(data, target, dirs_exist_ok=True)
        else:
            shutil.copy(data, target)
        accounts = Accounts(ServerConfig(home=str(home)).db_path)
        return home, str(target), {name: accounts.add_user(name) for name in users}

    @staticmethod
    def free_port() -> int:
        """A loopback port nobody listens on now."""
        with socket.socket() as sock:
            sock.bind(("127.0.0.1", 0))
            return int(sock.getsockname()[1])

    def start(self, home: Path, port: int, *extra: str, timeout: float = 60) -> subprocess.Popen[bytes]:
        """``twinkle serve --home HOME --port PORT EXTRA...``, returned once it answers ``/api/v1/health``.

        Raises:
            AssertionError: the server exited, or did not answer within ``timeout`` seconds (with its log).
        """
        env = {**os.environ, "OMP_NUM_THREADS": "1", "TWINKLE_HOME": str(home)}
        with open(self.log, "ab") as out:
            process = subprocess.Popen([sys.executable, "-m", "twinkle_core", "serve", "--home", str(home), "--port",
                                        str(port), *extra], env=env, stdout=out, stderr=subprocess.STDOUT,
                                       start_new_session=True)
        self.processes.append(process)
        self.wait_for(lambda: self.healthy(port) or process.poll() is not None, timeout, "the server to answer")
        assert process.poll() is None, self.log.read_text()[-3000:]
        return process

    @staticmethod
    def healthy(port: int) -> bool:
        """Whether a server on ``port`` answers its health check."""
        try:
            with socket.create_connection(("127.0.0.1", port), timeout=1):
                return bool(Client(f"http://127.0.0.1:{port}").request("GET", "/health")["status"] == "ok")
        except OSError:
            return False

    @staticmethod
    def wait_for(condition: Callable[[], Any], timeout: float, what: str) -> Any:
        """``wait_for`` (this module's), polling every 0.2 s."""
        return wait_for(condition, timeout, what)

    def stop_all(self) -> None:
        """SIGKILL the whole session of every server still alive (its workers and their training processes)."""
        for process in self.processes:
            if process.poll() is None:
                os.killpg(process.pid, signal.SIGKILL)
                process.wait()
