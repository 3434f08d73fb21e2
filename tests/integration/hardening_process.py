"""The proxy as a real process for the hardening tests (this module holds no tests).

``ProxyProcess.start(mock, store, log, *flags)`` runs ``python -m unbroken.proxy`` on a free port
with its stdout and stderr in ``log`` (a file, so a test can read every line after the process
ended), and waits for ``/healthz`` (trying another port if the chosen one was taken before the
process bound it). ``store`` is a SQLite file (a ``Path``) or a journal URL used
as is (a ``str``, e.g. ``redis://127.0.0.1:PORT/0``). ``kill()`` is SIGKILL, ``terminate()``
SIGTERM.
"""

from __future__ import annotations

import json
import re
import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import IO, Any

import httpx2
from tests.integration.test_proxy_support import free_port

# Starting is importing everything (uvicorn, starlette, httpx2, redis, sqlite3) and opening the
# journal: a second on a warm machine, many more on a cold, loaded 2-core one (no bytecode cached
# yet, two replicas starting at once). Only the wait is long; a started process answers at once.
_START_S = 60.0
_PAIR = re.compile(r'(\w+)=("(?:[^"\\]|\\.)*"|\S+)')


class ProxyProcess:
    """One ``python -m unbroken.proxy`` process and its log file."""

    def __init__(self, process: subprocess.Popen[bytes], base_url: str, log: Path,
                 sink: IO[bytes]) -> None:
        self.process = process
        self.base_url = base_url
        self.log = log
        self._sink = sink

    @classmethod
    def start(cls, mock: str, store: Path | str, log: Path, *flags: str) -> ProxyProcess:
        for _attempt in range(3):  # a free port can be taken before the process binds it
            offset = log.stat().st_size if log.exists() else 0
            started = cls._launch(mock, store, log, flags)
            if started is not None:
                return started
            said = log.read_bytes()[offset:].decode(errors="replace")
            if "address already in use" not in said.lower():
                raise AssertionError(f"the proxy exited: {said}")
            with log.open("r+b") as written:  # the failed attempt's lines are no test's
                written.truncate(offset)
        raise AssertionError(f"the proxy found no free port: {said}")

    @classmethod
    def _launch(cls, mock: str, store: Path | str, log: Path,
                flags: tuple[str, ...]) -> ProxyProcess | None:
        """Start one process and wait for its /healthz; ``None`` if it exited first."""
        port = free_port()
        url = f"sqlite:///{store}" if isinstance(store, Path) else store
        command = [
            sys.executable, "-m", "unbroken.proxy", "--host", "127.0.0.1", "--port", str(port),
            "--upstream", mock, "--store", url, *flags,
        ]
        sink = log.open("ab")
        process = subprocess.Popen(command, stdout=sink, stderr=subprocess.STDOUT)
        started = cls(process, f"http://127.0.0.1:{port}", log, sink)
        deadline = time.monotonic() + _START_S
        while True:
            if process.poll() is not None:
                sink.close()
                return None
            try:
                if httpx2.get(started.base_url + "/healthz", timeout=5).status_code == 200:
                    return started
            except httpx2.TransportError:
                pass
            if time.monotonic() > deadline:
                started.kill()
                raise AssertionError(f"the proxy did not start within {_START_S} s: "
                                     + log.read_text(errors="replace")[-3000:])
            time.sleep(0.05)

    def kill(self) -> None:
        """SIGKILL: no shutdown code runs."""
        if self.process.poll() is None:
            self.process.send_signal(signal.SIGKILL)
        self.process.wait(timeout=10)
        self._sink.close()

    def terminate(self, timeout: float = 20.0) -> int:
        """SIGTERM, then wait for the exit (at most ``timeout``); the return code."""
        if self.process.poll() is None:
            self.process.send_signal(signal.SIGTERM)
        try:
            return self.process.wait(timeout=timeout)
        finally:
            if self.process.poll() is None:
                self.process.kill()
                self.process.wait()
            self._sink.close()

    def __enter__(self) -> ProxyProcess:
        return self

    def __exit__(self, *exc: object) -> None:
        if self.process.poll() is None:
            self.terminate()
        elif not self._sink.closed:
            self._sink.close()


def log_records(log: Path) -> list[dict[str, Any]]:
    """The logfmt lines of a log file as dicts (values unquoted). A last line without its newline
    is being written by the running process: it is left for the next read."""
    records = []
    whole_lines = log.read_text(encoding="utf-8", errors="replace").split("\n")[:-1]
    for line in whole_lines:
        if not line.startswith("ts="):
            continue
        record: dict[str, Any] = {}
        for name, value in _PAIR.findall(line):
            record[name] = json.loads(value) if value.startswith('"') else value
        records.append(record)
    return records
