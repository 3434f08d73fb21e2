"""A chat endpoint whose answer survives a reload, with a stop button: FastAPI, the OpenAI SDK,
and ``unbroken.server``.

    pip install -e '.[examples]'
    python examples/chat_app.py            # then open http://127.0.0.1:8000

The model is ``unbroken mock`` (started here in a thread, or the one at ``$MOCK_URL``, e.g.
``unbroken mock --port 8100`` and ``MOCK_URL=http://127.0.0.1:8100``). Send a message, reload
the page mid-answer: the answer goes on where it was (the producer never depended on the page),
and ends with its true status. Stop cancels the generation. Streams are kept in ``chat.db``
(``$UNBROKEN_STORE``: ``memory://``, ``sqlite:///path.db``, ``redis://host:6379/0``).

Each browser is one owner (a random id in a cookie): only it, or the holder of a stream's
token, reads or stops its streams.
"""

from __future__ import annotations

import contextlib
import os
import secrets
from collections.abc import AsyncIterator
from typing import Any

from fastapi import FastAPI, Request, Response
from fastapi.responses import HTMLResponse, JSONResponse
from openai import AsyncOpenAI

import unbroken
from unbroken.server import ResumableStreams, StreamNotFoundError, StreamRefusedError

STORE = os.environ.get("UNBROKEN_STORE", "sqlite:///chat.db")
# The mock answers slowly enough to reload mid-answer: 120 deltas, 60 ms apart.
MOCK_SCENARIO = {"unbroken-mock": "tokens=120; delay_ms=60"}

streams = ResumableStreams(STORE)
state: dict[str, Any] = {}


@contextlib.asynccontextmanager
async def lifespan(app: FastAPI) -> AsyncIterator[None]:
    with contextlib.ExitStack() as stack:
        mock_url = os.environ.get("MOCK_URL")
        if mock_url is None:
            from unbroken.cli.serving import serve_in_thread
            from unbroken.mock import create_app

            mock_url = stack.enter_context(serve_in_thread(create_app()))
        async with AsyncOpenAI(base_url=mock_url + "/v1", api_key="sk-mock") as client:
            state["openai"] = client
            async with streams.lifespan(app):
                yield


app = FastAPI(lifespan=lifespan)


def owner(request: Request) -> str | None:
    return request.cookies.get("chat_user")


@app.get("/", response_class=HTMLResponse)
async def page(request: Request) -> Response:
    response = HTMLResponse(PAGE)
    if owner(request) is None:
        response.set_cookie("chat_user", secrets.token_urlsafe(16), httponly=True,
                            samesite="strict")
    return response


@app.post("/chat")
async def chat(request: Request) -> Response:
    user = owner(request)
    if user is None:
        return JSONResponse({"error": "no user: load the page first"}, status_code=401)
    body = await request.json()
    client: AsyncOpenAI = state["openai"]
    stream = await client.chat.completions.create(
        model="gpt-mock", stream=True, extra_headers=MOCK_SCENARIO,
        messages=[{"role": "user", "content": str(body.get("message", ""))}])
    try:
        # The tracked SDK stream: its text is sent, and its finish reason ends the stream.
        handle = await streams.start(unbroken.from_openai(stream), owner=user,
                                     idempotency_key=body.get("request_id"))
    except StreamRefusedError as exc:
        return JSONResponse({"error": str(exc)}, status_code=exc.status)
    return JSONResponse({"stream_id": handle.stream_id})


@app.get("/chat/{stream_id}/events")
async def events(stream_id: str, request: Request) -> Response:
    return streams.response(stream_id, request, owner=owner(request))


@app.post("/chat/{stream_id}/cancel")
async def cancel(stream_id: str, request: Request) -> Response:
    try:
        return JSONResponse(await streams.cancel(stream_id, owner=owner(request) or ""))
    except StreamNotFoundError:
        return JSONResponse({"error": "no such stream"}, status_code=404)


PAGE = """<!doctype html>
<meta charset="utf-8">
<title>unbroken chat</title>
<style>body{font:16px system-ui;max-width:40em;margin:2em auto}#answer{white-space:pre-wrap;
min-height:6em;border:1px solid #ccc;padding:.5em}#status{color:#666}</style>
<h1>unbroken chat</h1>
<form id="ask"><input id="message" value="Tell me a story" size="40">
<button>Send</button> <button type="button" id="stop" disabled>Stop</button></form>
<p id="status">idle</p>
<div id="answer"></div>
<script>
const answer = document.getElementById("answer"), status = document.getElementById("status");
const stop = document.getElementById("stop");
let source = null;

function follow(streamId) {
  // From the start: the page was reloaded, or this is a new answer. EventSource itself
  // resumes with Last-Event-ID when its connection breaks.
  if (source) source.close();
  answer.textContent = "";
  status.textContent = "streaming";
  stop.disabled = false;
  source = new EventSource(`/chat/${streamId}/events`);
  source.addEventListener("text", (e) => { answer.textContent += JSON.parse(e.data); });
  source.addEventListener("end", (e) => {
    const end = JSON.parse(e.data);
    status.textContent = end.status + (end.error ? ": " + end.error.message : "");
    stop.disabled = true;
    localStorage.removeItem("streamId");
    source.close();
  });
  source.onerror = () => { status.textContent = "reconnecting"; };
  source.onopen = () => { status.textContent = "streaming"; };
}

document.getElementById("ask").onsubmit = async (event) => {
  event.preventDefault();
  const response = await fetch("/chat", {method: "POST", headers: {"content-type":
    "application/json"}, body: JSON.stringify({message: document.getElementById("message")
    .value, request_id: crypto.randomUUID()})});
  const started = await response.json();
  if (!response.ok) { status.textContent = started.error; return; }
  localStorage.setItem("streamId", started.stream_id);
  follow(started.stream_id);
};
stop.onclick = async () => {
  const streamId = localStorage.getItem("streamId");
  if (streamId) await fetch(`/chat/${streamId}/cancel`, {method: "POST"});
};
const live = localStorage.getItem("streamId");
if (live) follow(live);
</script>
"""


if __name__ == "__main__":
    import uvicorn

    uvicorn.run(app, host="127.0.0.1", port=int(os.environ.get("PORT", "8000")))
