"""Observability of a real proxy process: structured log lines (stream id, seq, status changes,
upstream latency), ``GET /metrics`` with exact counts, ``GET /healthz``; and the test API keys
appear nowhere: not in the logs (uvicorn's access log included, at debug level), not in the
journal's raw bytes (database and WAL), not in a client capture of a stream through the proxy."""

from __future__ import annotations

import re
from pathlib import Path

import anthropic
import httpx2
import ollama
import openai
import pytest
from google import genai
from google.genai import types as genai_types
from tests.integration.hardening_process import ProxyProcess, log_records
from tests.integration.test_proxy_support import CALLS, stream_status

import unbroken
from unbroken.finish import Status
from unbroken.mock import reply_text

pytestmark = pytest.mark.integration

SECRETS = {
    "openai": "sk-proj-SECRET-openai-31f9c2",
    "anthropic": "sk-ant-SECRET-anthropic-77ab",
    "gemini_header": "AIzaSECRET-gemini-header-90c1",
    "gemini_param": "AIzaSECRET-gemini-param-12de",
    "ollama": "ollama-SECRET-bearer-5e5e",
    "capture": "sk-proj-SECRET-capture-0a0a",
}
MESSAGES = [{"role": "user", "content": "hi"}]
SCENARIO = "seed=51; tokens=5"


def _metric(text: str, name: str) -> float:
    match = re.search(rf"^{re.escape(name)} (\S+)$", text, re.MULTILINE)
    assert match is not None, name
    return float(match.group(1))


def test_logs_metrics_and_no_secret_anywhere(tmp_path: Path, mock_server: str) -> None:
    store, log, capture = tmp_path / "journal.db", tmp_path / "proxy.log", tmp_path / "cap.jsonl"
    full = reply_text(51, 5)
    with ProxyProcess.start(mock_server, store, log, "--log-level", "debug") as process:
        proxy = process.base_url
        assert httpx2.get(proxy + "/healthz").json() == {"status": "ok", "live_streams": 0}
        texts: list[str] = []
        with openai.OpenAI(base_url=proxy + "/v1", api_key=SECRETS["openai"],
                           max_retries=0) as client:
            texts.append("".join(
                c.choices[0].delta.content or "" for c in client.chat.completions.create(
                    model="m", messages=[{"role": "user", "content": "hi"}], stream=True,
                    extra_headers={"Unbroken-Mock": SCENARIO}) if c.choices))
        with anthropic.Anthropic(base_url=proxy, api_key=SECRETS["anthropic"],
                                 max_retries=0) as claude, claude.messages.stream(
                model="m", max_tokens=100, messages=[{"role": "user", "content": "hi"}],
                extra_headers={"Unbroken-Mock": SCENARIO}) as streamed:
            texts.append("".join(streamed.text_stream))
        options = genai_types.HttpOptions(
            base_url=proxy, headers={"Unbroken-Mock": SCENARIO},
            retry_options=genai_types.HttpRetryOptions(attempts=1))
        with genai.Client(api_key=SECRETS["gemini_header"], http_options=options) as gemini:
            texts.append("".join(chunk.text or "" for chunk in
                                 gemini.models.generate_content_stream(model="gemini-m",
                                                                       contents="hi")))
        with ollama.Client(host=proxy, headers={"Unbroken-Mock": SCENARIO, "Authorization":
                                                f"Bearer {SECRETS['ollama']}"}) as local:
            texts.append("".join(part.message.content or "" for part in
                                 local.chat(model="m", messages=MESSAGES, stream=True)))
        assert texts == [full] * 4

        # Gemini's key in the query, a stream that breaks upstream, and a resume.
        gemini_call = CALLS["gemini"]
        broken = httpx2.post(
            f"{proxy}{gemini_call.path}&key={SECRETS['gemini_param']}", json=gemini_call.body,
            headers={"Unbroken-Mock": f"{SCENARIO}; drop_after=3"}, timeout=10)
        broken_id = broken.headers["unbroken-stream-id"]
        token = broken.headers["unbroken-stream-token"]
        resumed = httpx2.get(f"{proxy}/v1/streams/{broken_id}/events?after=2&token={token}")
        assert resumed.status_code == 200
        # The client library through the proxy, with a capture file.
        with unbroken.stream("POST", proxy + "/v1/chat/completions", dialect="openai-chat",
                             json={"model": "m", "messages": MESSAGES, "stream": True},
                             headers={"authorization": f"Bearer {SECRETS['capture']}",
                                      "Unbroken-Mock": SCENARIO},
                             capture=capture) as stream:
            for _event in stream:
                pass
        assert (stream.message.status, stream.message.text) == (Status.COMPLETED, full)
        broken_status = stream_status(proxy, broken_id, SECRETS["gemini_param"])
        assert broken_status["status"] == "interrupted"

        metrics = httpx2.get(proxy + "/metrics")
        assert metrics.headers["content-type"].startswith("text/plain; version=0.0.4")
        text = metrics.text
        # 4 SDK streams, the broken Gemini one, the client's: 6 streams, all ended.
        assert _metric(text, "unbroken_streams_started_total") == 6
        assert _metric(text, "unbroken_active_streams") == 0
        assert _metric(text, 'unbroken_streams_ended_total{status="completed"}') == 5
        assert _metric(text, "unbroken_streams_interrupted_total") == 1
        assert _metric(text, 'unbroken_upstream_errors_total{kind="broken"}') == 1
        assert _metric(text, "unbroken_resumes_total") == 1
        # Frames: chat 5+3, anthropic 5+6, gemini 5+1, ollama 5+1, broken 3+1, client 5+3.
        assert _metric(text, "unbroken_frames_total") == 8 + 11 + 6 + 6 + 4 + 8
        commits = _metric(text, "unbroken_journal_commit_seconds_count")
        assert commits >= 6
        assert _metric(text, 'unbroken_journal_commit_seconds_bucket{le="+Inf"}') == commits
        assert _metric(text, "unbroken_upstream_response_seconds_count") == 6

    records = log_records(log)
    started = {r["stream_id"]: r for r in records if r.get("event") == "stream.start"}
    assert len(started) == 6
    assert all(float(r["upstream_ms"]) > 0 for r in started.values())
    assert started[broken_id]["dialect"] == "gemini"
    changes = [(r["status"], r["seq"]) for r in records
               if r.get("event") == "stream.status" and r["stream_id"] == broken_id]
    assert changes == [("streaming", "1"), ("interrupted", "4")]
    access = [r["msg"] for r in records if r["logger"] == "uvicorn.access"]
    assert any("key=REDACTED" in line for line in access)
    assert any("token=REDACTED" in line for line in access)

    secrets = [value.encode() for value in SECRETS.values()] + [token.encode()]
    places = {"log": log, "capture": capture, "journal": store,
              "journal-wal": Path(f"{store}-wal"), "journal-shm": Path(f"{store}-shm")}
    for name, path in places.items():
        data = path.read_bytes() if path.exists() else b""
        leaked = [secret for secret in secrets if secret in data]
        assert leaked == [], f"{name} holds {leaked}"
