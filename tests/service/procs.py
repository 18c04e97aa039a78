"""Real servers and workers for the service tests: uvicorn on loopback (in a thread or as a
`kvtune serve` process) and `kvtune worker` processes."""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import sys
import threading
import time
from pathlib import Path
from typing import Any

import httpx
import uvicorn

REPO = Path(__file__).resolve().parents[2]


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


class ThreadServer:
    """uvicorn serving `app` on a loopback socket picked by the kernel, in a background thread."""

    def __init__(self, app: Any) -> None:
        self.sock = socket.socket()
        self.sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        self.sock.bind(("127.0.0.1", 0))
        self.url = f"http://127.0.0.1:{self.sock.getsockname()[1]}"
        self.server = uvicorn.Server(uvicorn.Config(app, log_level="warning", lifespan="on"))
        self.thread = threading.Thread(target=self.server.run, kwargs={"sockets": [self.sock]}, daemon=True)

    def __enter__(self) -> ThreadServer:
        self.thread.start()
        end = time.monotonic() + 20
        while not self.server.started:
            if time.monotonic() > end or not self.thread.is_alive():
                raise RuntimeError("uvicorn did not start")
            time.sleep(0.02)
        return self

    def __exit__(self, *exc: object) -> None:
        self.server.should_exit = True
        self.thread.join(10)
        self.sock.close()


def service_env(db_url: str, **extra: str) -> dict[str, str]:
    env = dict(os.environ)
    env["PYTHONPATH"] = f"{REPO}{os.pathsep}{env.get('PYTHONPATH', '')}"
    env["KVTUNE_DATABASE_URL"] = db_url
    env.setdefault("KVTUNE_LOG_LEVEL", "INFO")
    env.update(extra)
    return env


def kvtune(args: list[str], env: dict[str, str], log: Path) -> subprocess.Popen[bytes]:
    fh = open(log, "ab")
    return subprocess.Popen([sys.executable, "-m", "kvtune.cli", *args], cwd=REPO, env=env, stdout=fh,
                            stderr=subprocess.STDOUT, start_new_session=True)


def start_server(db_url: str, token: str, log: Path, **extra: str) -> tuple[subprocess.Popen[bytes], str]:
    port = free_port()
    proc = kvtune(["serve", "--host", "127.0.0.1", "--port", str(port)],
                  service_env(db_url, KVTUNE_API_TOKEN=token, **extra), log)
    url = f"http://127.0.0.1:{port}"
    end = time.monotonic() + 60
    while time.monotonic() < end:
        if proc.poll() is not None:
            raise RuntimeError(f"kvtune serve exited with {proc.returncode}:\n{log.read_text()[-3000:]}")
        try:
            if httpx.get(f"{url}/healthz", timeout=1).status_code == 200:
                return proc, url
        except httpx.HTTPError:
            pass
        time.sleep(0.1)
    stop(proc)
    raise RuntimeError(f"kvtune serve did not come up:\n{log.read_text()[-3000:]}")


def start_worker(db_url: str, log: Path, *args: str, **extra: str) -> subprocess.Popen[bytes]:
    return kvtune(["worker", "--arch", "interp", *args], service_env(db_url, **extra), log)


def stop(proc: subprocess.Popen[bytes], sig: int = signal.SIGTERM, timeout: float = 20) -> int | None:
    if proc.poll() is None:
        try:
            os.kill(proc.pid, sig)
            proc.wait(timeout)
        except subprocess.TimeoutExpired:
            os.kill(proc.pid, signal.SIGKILL)
            proc.wait(5)
        except ProcessLookupError:
            pass
    return proc.returncode
