"""``marginalia serve`` as a real subprocess on a random free port, for the API, MCP and event
contract tests and the load benchmark: started, waited for (``/api/health``), stopped."""

from __future__ import annotations

import os
import socket
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import httpx

ROOT = Path(__file__).resolve().parents[1]
START_TIMEOUT_S = 180.0  # a loaded 2-core machine, with other test runs beside this one


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def server_env(db: str | Path, **extra: str) -> dict[str, str]:
    """Offline (no key), this work tree importable, none of the developer's own settings."""
    env = {k: v for k, v in os.environ.items()
           if not k.startswith(("MARGINALIA_", "GEMINI_", "OPENAI_"))}
    env.pop("GOOGLE_API_KEY", None)
    env.pop("GOOGLE_GEMINI_BASE_URL", None)
    env["HF_HUB_OFFLINE"] = "1"
    env["PYTHONPATH"] = str(ROOT) + os.pathsep + env.get("PYTHONPATH", "")
    env["MARGINALIA_DB"] = str(db)
    env.update(extra)
    return env


class ApiServer:
    """One ``python -m marginalia_core serve`` process; ``client()`` talks to it (with the token
    when one is set)."""

    def __init__(self, env: dict[str, str], *args: str, token: str | None = None):
        self.env = dict(env)
        if token is not None:
            self.env["MARGINALIA_API_TOKEN"] = token
        self.token = token
        self.args = args
        self.port = free_port()
        self.proc: subprocess.Popen[bytes] | None = None
        self._log = tempfile.NamedTemporaryFile(  # noqa: SIM115 - open for the process life
            prefix="marginalia-serve-", suffix=".log", delete=False)

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    @property
    def headers(self) -> dict[str, str]:
        return {"Authorization": f"Bearer {self.token}"} if self.token else {}

    def client(self, **options: Any) -> httpx.Client:
        options.setdefault("timeout", httpx.Timeout(120.0, connect=10.0))
        return httpx.Client(base_url=self.url, headers=self.headers, **options)

    def start(self) -> ApiServer:
        self.proc = subprocess.Popen(
            [sys.executable, "-m", "marginalia_core", "serve", "--port", str(self.port),
             "--log-level", "warning", *self.args],
            cwd=ROOT, env=self.env, stdout=self._log, stderr=subprocess.STDOUT,
        )
        deadline = time.monotonic() + START_TIMEOUT_S
        while time.monotonic() < deadline:
            if self.proc.poll() is not None:
                raise RuntimeError(f"serve exited {self.proc.returncode}: {self.log()}")
            try:
                if httpx.get(f"{self.url}/api/health", headers=self.headers,
                             timeout=5).status_code == 200:
                    return self
            except httpx.HTTPError:
                pass
            time.sleep(0.2)
        self.stop()
        raise RuntimeError(f"serve did not answer within {START_TIMEOUT_S:.0f} s: {self.log()}")

    def log(self) -> str:
        return Path(self._log.name).read_text(encoding="utf-8", errors="replace")

    def stop(self) -> None:
        if self.proc is not None and self.proc.poll() is None:
            self.proc.terminate()
            try:
                self.proc.wait(timeout=15)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait(timeout=15)
        self._log.close()

    def __enter__(self) -> ApiServer:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()
        Path(self._log.name).unlink(missing_ok=True)


def ndjson(response: httpx.Response) -> list[dict[str, Any]]:
    """Every line of a streamed NDJSON response, parsed."""
    import json

    return [json.loads(line) for line in response.iter_lines() if line.strip()]
