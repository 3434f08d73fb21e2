"""Each command run as a subprocess, as a user runs it."""

from __future__ import annotations

import json
import socket
import subprocess
import sys
from pathlib import Path

import pytest

from unbroken.mock import reply_deltas, reply_text

pytestmark = pytest.mark.integration

CHAT = "/v1/chat/completions"
CHAT_BODY = '{"model": "m", "stream": true, "messages": []}'


def unbroken(*args: str, timeout: float = 60) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "unbroken", *args],
        capture_output=True,
        text=True,
        timeout=timeout,
        env={"PATH": "/usr/bin:/bin", "COLUMNS": "120", "PYTHONIOENCODING": "utf-8"},
    )


def capture(tmp_path: Path, base: str, scenario: str, name: str = "cap.jsonl") -> Path:
    out = tmp_path / name
    done = unbroken(
        "capture", base + CHAT, "-H", "Authorization: Bearer sk-test-SECRET-1",
        "-H", f"Unbroken-Mock: {scenario}", "-d", CHAT_BODY, "--dialect", "openai-chat",
        "-o", str(out), "--json",
    )
    assert done.returncode == 0, done.stderr
    return out


def inspect(path: Path) -> dict[str, object]:
    done = unbroken("inspect", str(path), "--json")
    assert done.returncode == 0, done.stderr
    result: dict[str, object] = json.loads(done.stdout)
    return result


def test_capture_then_inspect_completed(tmp_path: Path, mock_server: str) -> None:
    path = capture(tmp_path, mock_server, "seed=4; tokens=12; split_utf8=1")
    assert "SECRET" not in path.read_text()
    report = inspect(path)
    verdict = report["verdict"]
    assert isinstance(verdict, dict)
    assert verdict["status"] == "completed"
    assert verdict["finish_reason"] == "stop"
    assert verdict["raw_finish_reason"] == "stop"
    assert verdict["text"] == reply_text(4, 12)
    # role chunk, 12 content chunks, finish chunk, [DONE]
    frames = report["frames"]
    assert isinstance(frames, list)
    assert [f["seq"] for f in frames] == list(range(1, 16))
    assert verdict["warnings"] == []


def test_drop_after_capture_says_interrupted_with_exact_prefix(
    tmp_path: Path, mock_server: str
) -> None:
    path = capture(tmp_path, mock_server, "seed=5; tokens=12; drop_after=6")
    verdict = inspect(path)["verdict"]
    assert isinstance(verdict, dict)
    assert verdict["status"] == "interrupted"
    assert verdict["finish_reason"] is None
    # Frame 1 is the role chunk; frames 2..6 carry the first five deltas.
    assert verdict["text"] == "".join(reply_deltas(5, 12)[:5])
    codes = [w["code"] for w in verdict["warnings"]]
    assert "no_finish_reason" in codes
    assert "unterminated_tail" not in codes


def test_drop_mid_capture_reports_the_unterminated_tail(tmp_path: Path, mock_server: str) -> None:
    path = capture(tmp_path, mock_server, "seed=5; tokens=12; drop_after=6; drop_mid=1")
    verdict = inspect(path)["verdict"]
    assert isinstance(verdict, dict)
    assert verdict["status"] == "interrupted"
    assert verdict["text"] == "".join(reply_deltas(5, 12)[:5])
    codes = [w["code"] for w in verdict["warnings"]]
    assert "unterminated_tail" in codes
    assert "truncated_utf8" in codes
    assert "no_finish_reason" in codes


def test_inspect_human_view_has_three_columns_and_the_verdict(
    tmp_path: Path, mock_server: str
) -> None:
    path = capture(tmp_path, mock_server, "seed=6; tokens=4")
    done = unbroken("inspect", str(path))
    assert done.returncode == 0, done.stderr
    for heading in ("raw lines", "parsed delta", "committed position"):
        assert heading in done.stdout
    assert "verdict: completed, finish reason stop (raw 'stop')" in done.stdout
    assert "warnings: none" in done.stdout


@pytest.mark.parametrize("split", ["whole", "bytes", "random", "utf8"])
def test_replay_gives_identical_results(tmp_path: Path, mock_server: str, split: str) -> None:
    path = capture(tmp_path, mock_server, "seed=8; tokens=10; drop_after=7; drop_mid=1")
    done = unbroken("replay", str(path), "--split", split, "--json")
    assert done.returncode == 0, done.stderr
    result = json.loads(done.stdout)
    assert result["identical"] is True
    assert result["differs"] == []
    assert result["replayed"]["text"] == "".join(reply_deltas(8, 10)[:6])
    assert result["replayed"]["status"] == "interrupted"
    if split == "bytes":
        assert result["reads"] == len(b"".join(_body_bytes(path)))


def _body_bytes(path: Path) -> list[bytes]:
    import base64

    records = [json.loads(line) for line in path.read_text().splitlines()]
    return [base64.b64decode(r["b"]) for r in records if "b" in r]


def test_missing_capture_is_one_line_and_exit_3(tmp_path: Path) -> None:
    done = unbroken("inspect", str(tmp_path / "nope.jsonl"))
    assert done.returncode == 3
    assert done.stderr == f"unbroken: cannot read capture {tmp_path / 'nope.jsonl'}: no such file\n"
    assert "Traceback" not in done.stderr


def test_unreadable_capture_is_one_line_and_exit_3(tmp_path: Path) -> None:
    bad = tmp_path / "bad.jsonl"
    bad.write_text('{"unbroken_capture": 1}\n{"t": 0.1, "b": "!!!"}\n')
    done = unbroken("replay", str(bad))
    assert done.returncode == 3
    assert done.stderr.startswith("unbroken: unreadable capture: ")
    assert "line 2" in done.stderr
    assert done.stderr.count("\n") == 1


def test_unknown_dialect_is_one_line_and_exit_3(tmp_path: Path, mock_server: str) -> None:
    path = capture(tmp_path, mock_server, "seed=1; tokens=2")
    done = unbroken("inspect", str(path), "--dialect", "klingon")
    assert done.returncode == 3
    assert done.stderr.startswith("unbroken: unknown dialect 'klingon'")
    done = unbroken("capture", mock_server + CHAT, "--dialect", "klingon", "-o",
                    str(tmp_path / "x.jsonl"))
    assert done.returncode == 3
    assert done.stderr.startswith("unbroken: unknown dialect 'klingon'")


def test_port_in_use_is_one_line_and_exit_4() -> None:
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        for command in ("mock", "proxy"):
            done = unbroken(command, "--host", "127.0.0.1", "--port", str(port))
            assert done.returncode == 4, (command, done.stderr)
            assert done.stderr == (
                f"unbroken: cannot listen on 127.0.0.1:{port}: Address already in use\n"
            )


def test_a_journal_that_cannot_be_opened_is_one_line_and_exit_4(tmp_path: Path) -> None:
    with socket.socket() as closed:  # a port nothing listens on
        closed.bind(("127.0.0.1", 0))
        dead = closed.getsockname()[1]
    port = _free_port()
    done = unbroken("proxy", "--port", str(port),
                    "--store", f"redis://:hunter2@127.0.0.1:{dead}/0")
    assert done.returncode == 4, done.stderr
    assert done.stderr.startswith(
        f"unbroken: cannot open the journal redis://***@127.0.0.1:{dead}/0: ")
    assert done.stderr.count("\n") == 1 and "hunter2" not in done.stderr
    unwritable = tmp_path / "missing-dir" / "journal.db"
    done = unbroken("proxy", "--port", str(port), "--store", f"sqlite:///{unwritable}")
    assert (done.returncode, done.stderr) == (
        4, f"unbroken: cannot open the journal sqlite:///{unwritable}: "
           "unable to open database file\n")


def test_an_unknown_store_is_refused_as_an_argument() -> None:
    done = unbroken("proxy", "--port", str(_free_port()), "--store", "postgres://db/x")
    assert done.returncode == 2
    assert done.stderr.endswith(
        "error: unknown store 'postgres://db/x': use memory://, sqlite:///path.db or "
        "redis://host:6379/0\n")


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port: int = sock.getsockname()[1]
        return port


def test_no_command_prints_help_and_exit_2() -> None:
    done = unbroken()
    assert done.returncode == 2
    assert "demo" in done.stderr and "capture" in done.stderr


def test_demo_json_reports_the_checks() -> None:
    done = unbroken("demo", "--json", "--delay-ms", "0", timeout=120)
    assert done.returncode == 0, done.stdout + done.stderr
    result = json.loads(done.stdout)
    assert result["ok"] is True
    names = [scene["name"] for scene in result["scenes"]]
    assert names == [
        "chat: split characters, dropped connection, resume",
        "responses: upstream repeats a frame",
    ]
    for scene in result["scenes"]:
        assert scene["text_equal"] is True
        assert scene["duplicated_characters"] == 0
        assert scene["missing_characters"] == 0
        assert scene["generations"] == 1
        assert scene["status"] == "completed"
        assert scene["finish_reason"] == "stop"
    # The first scene really was cut and resumed on a second connection.
    assert [scene["connections"] for scene in result["scenes"]] == [2, 1]


def test_duplicated_characters_counts_exactly() -> None:
    from unbroken.cli.demo import duplicated_characters

    assert duplicated_characters("你好世界", "你好世界") == (0, 0)
    assert duplicated_characters("你好世界", "你好你好世界") == (2, 0)
    assert duplicated_characters("你好世界", "你好界") == (0, 1)
