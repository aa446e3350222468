"""A real `appliance serve` in a child process on a loopback port, and a tiny corpus for it."""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path

import httpx

REPO = Path(__file__).resolve().parent.parent

TINY_DOCS = {
    "aurora.md": "# Aurora Lake\n\nAurora Lake is a lake in the north of Veldland. The lake was named by "
                 "the surveyor Mira Holt in 1921. Aurora Lake is 14 kilometres long.\n",
    "holt.md": "# Mira Holt\n\nMira Holt was a surveyor born in Brennick in 1888. Mira Holt mapped the "
               "northern lakes of Veldland and died in 1960.\n",
    "brennick.md": "# Brennick\n\nBrennick is a port town on the west coast of Veldland. Brennick has a "
                   "population of about 20,000 people.\n",
}


def make_tiny_corpus(settings, folder: Path, name: str = "tiny") -> str:
    """Three short documents ingested into corpus ``name`` of the settings' state folder."""
    from appliance.sources.corpus import Corpus

    folder.mkdir(parents=True, exist_ok=True)
    for file_name, text in TINY_DOCS.items():
        (folder / file_name).write_text(text, encoding="utf-8")
    Corpus(settings, name).add([folder])
    return name


def tiny_home(folder: Path) -> Path:
    """A state folder (``folder``/home) holding the tiny corpus, its documents in ``folder``/docs."""
    from conftest import make_settings

    home = folder / "home"
    make_tiny_corpus(make_settings(home), folder / "docs")
    return home


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


class Server:
    """`python -m appliance serve` on ``host``:port with APPLIANCE_HOME=home."""

    def __init__(self, home: Path, *args: str, host: str = "127.0.0.1"):
        self.home, self.args, self.host = home, args, host
        self.port = free_port()
        self.url = f"http://{host}:{self.port}"
        self.log = home / f"serve-{self.port}.log"
        self.process: subprocess.Popen | None = None

    def start(self, token: str | None = None, timeout: float = 60) -> "Server":
        config = self.home / "empty-config.toml"
        config.write_text("", encoding="utf-8")
        env = {**os.environ, "APPLIANCE_HOME": str(self.home)}
        env.pop("APPLIANCE_SERVE_TOKEN", None)
        self.stderr = open(self.log, "ab")
        self.process = subprocess.Popen(
            [sys.executable, "-m", "appliance", "--config", str(config), "serve", "--host", self.host,
             "--port", str(self.port), *self.args], cwd=REPO, env=env, stdout=subprocess.DEVNULL,
            stderr=self.stderr)
        headers = {"authorization": f"Bearer {token}"} if token else {}
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if self.process.poll() is not None:
                raise RuntimeError(f"serve exited {self.process.returncode}: {self.log_text()}")
            try:
                if httpx.get(f"{self.url}/api/openapi.json", headers=headers, timeout=2).status_code < 500:
                    return self
            except httpx.HTTPError:
                pass
            time.sleep(0.2)
        raise RuntimeError(f"serve did not answer in {timeout} s: {self.log_text()}")

    def log_text(self) -> str:
        return self.log.read_text(encoding="utf-8", errors="replace") if self.log.exists() else ""

    def kill(self) -> None:
        """SIGKILL: no cleanup of any kind, as a crash or the OOM killer would."""
        assert self.process is not None
        self.process.send_signal(signal.SIGKILL)
        self.process.wait(10)
        self.stderr.close()

    def stop(self) -> None:
        if self.process and self.process.poll() is None:
            self.process.terminate()
            try:
                self.process.wait(20)
            except subprocess.TimeoutExpired:
                self.process.kill()
                self.process.wait(10)
        if self.process:
            self.stderr.close()


def wait_status(client: httpx.Client, run_id: str, statuses: set[str], timeout: float) -> dict:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        job = client.get(f"/api/runs/{run_id}").json()
        if job["status"] in statuses:
            return job
        time.sleep(0.3)
    raise AssertionError(f"run {run_id} not {statuses} after {timeout} s: {job}")
