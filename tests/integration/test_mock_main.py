"""``python -m unbroken.mock --host 127.0.0.1 --port N`` serves the mock."""

from __future__ import annotations

import socket
import subprocess
import sys
import time

import httpx2
import pytest

from unbroken.mock import reply_text
from unbroken.mock.__main__ import main

pytestmark = pytest.mark.integration


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port: int = sock.getsockname()[1]
        return port


def test_python_dash_m_serves_the_mock() -> None:
    port = _free_port()
    process = subprocess.Popen(
        [sys.executable, "-m", "unbroken.mock", "--host", "127.0.0.1", "--port", str(port)],
        stdout=subprocess.DEVNULL, stderr=subprocess.PIPE,
    )
    try:
        base_url = f"http://127.0.0.1:{port}"
        # Up to 60 s for the interpreter and uvicorn to start: a bound for a cold, loaded CI
        # machine (a warm one takes about a second).
        deadline = time.monotonic() + 60
        while True:
            try:
                counts = httpx2.get(base_url + "/_mock/requests", timeout=5)
                break
            except httpx2.TransportError:
                assert process.poll() is None, process.stderr.read() if process.stderr else ""
                if time.monotonic() > deadline:
                    pytest.fail("python -m unbroken.mock did not start within 60 s")
                time.sleep(0.05)
        assert counts.json() == {"generations": {}, "resumes": {}}
        response = httpx2.post(base_url + "/api/chat", json={"stream": False},
                               headers={"Unbroken-Mock": "tokens=3"}, timeout=5)
        assert response.json()["message"]["content"] == reply_text(0, 3)
    finally:
        process.terminate()
        process.wait(timeout=10)
        if process.stderr:
            process.stderr.close()


def test_main_help_exits_cleanly(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as caught:
        main(["--help"])
    assert caught.value.code == 0
    assert "--port" in capsys.readouterr().out
