"""The mock's routes: one endpoint per provider, plus ``/_mock/requests`` and ``/_mock/reset``."""

from __future__ import annotations

import hashlib
import json
import math
from typing import Any

from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import JSONResponse, Response
from starlette.routing import Route

from .faults import Delivery, FrameStreamResponse, apply_data_faults, quiet_intentional_drops
from .reply import reply_deltas
from .scenario import Scenario, ScenarioError, parse_scenario
from .state import MockState, StoredResponse
from .wire import Dialect, Framing, Plan, PlannedFrame, encode
from .wire_anthropic import ANTHROPIC
from .wire_bedrock import BEDROCK_CONVERSE, BEDROCK_INVOKE
from .wire_gemini import GEMINI
from .wire_ollama import OLLAMA, OLLAMA_GENERATE
from .wire_openai_chat import OPENAI_CHAT
from .wire_openai_responses import OPENAI_RESPONSES, response_object

__all__ = ["SCENARIO_HEADER", "create_app"]

SCENARIO_HEADER = "Unbroken-Mock"
RESPONSES_PATH = "/v1/responses"


class BadRequest(Exception):
    """A request the mock refuses with 400 (bad scenario, bad body, bad Last-Event-ID)."""


def _json(dialect: Dialect, status: int, body: Any, headers: dict[str, str] | None = None
          ) -> Response:
    return Response(dialect.dumps(body), status_code=status, headers=headers,
                    media_type="application/json")


def _error(dialect: Dialect, status: int, message: str,
           headers: dict[str, str] | None = None) -> Response:
    return _json(dialect, status, dialect.error_body(status, message), headers)


def _wire_frames(
    frames: tuple[PlannedFrame, ...], dialect: Dialect, sse_ids: bool
) -> tuple[bytes, ...]:
    return tuple(
        encode(frame, dialect.framing, number if sse_ids else None)
        for number, frame in enumerate(frames, start=1)
    )


def _delivery(frames: tuple[PlannedFrame, ...], dialect: Dialect, scenario: Scenario, *,
              start_after: int, first_connection: bool) -> Delivery:
    # A resume is never dropped or stalled again, so that it can finish.
    return Delivery(
        frames=_wire_frames(frames, dialect, scenario.sse_ids),
        start_after=start_after,
        keepalive=dialect.keepalive,
        drop_after=scenario.drop_after if first_connection else None,
        drop_mid=scenario.drop_mid,
        stall_after=scenario.stall_after if first_connection else None,
        stall_s=scenario.stall_s,
        pings=scenario.pings,
        ping_ms=scenario.ping_ms,
        delay_ms=scenario.delay_ms,
        split_utf8=scenario.split_utf8,
    )


def _stream(delivery: Delivery, dialect: Dialect) -> Response:
    headers = {"cache-control": "no-cache", "x-accel-buffering": "no"}
    return FrameStreamResponse(delivery, media_type=dialect.media_type, headers=headers)


def _check_dialect(scenario: Scenario, dialect: Dialect) -> None:
    if scenario.finish not in dialect.finishes:
        raise ScenarioError("finish", f"{dialect.name} cannot express {scenario.finish}")
    if scenario.sse_ids and dialect.framing in (Framing.NDJSON, Framing.EVENT_STREAM):
        raise ScenarioError("sse_ids", f"{dialect.name} is not an SSE stream")
    if scenario.partial_args and not dialect.partial_args:
        raise ScenarioError("partial_args", f"{dialect.name} streams no arguments by JSON path")


def _check_connection_faults(scenario: Scenario, total: int) -> None:
    for key in ("drop_after", "stall_after"):
        number = getattr(scenario, key)
        if number is not None and number > total:
            raise ScenarioError(key, f"frame {number} is past the last frame ({total})")
    if scenario.drop_mid and scenario.drop_after == total:
        raise ScenarioError("drop_mid", f"there is no frame after frame {total} to cut")


def _status_fault(state: MockState, dialect: Dialect, path: str, text: str,
                  scenario: Scenario) -> Response | None:
    if scenario.status is None:
        return None
    state.status_attempts[path, text] += 1
    attempts = state.status_attempts[path, text]
    if scenario.status_times is not None and attempts > scenario.status_times:
        return None
    headers = {}
    retry_after = scenario.retry_after
    if retry_after is None and scenario.status == 429:
        retry_after = 1.0
    if retry_after is not None:
        headers["retry-after"] = str(math.ceil(retry_after))
        headers["retry-after-ms"] = str(round(retry_after * 1000))
    return _error(dialect, scenario.status, f"mock status {scenario.status}", headers)


async def _read_body(request: Request) -> tuple[bytes, dict[str, Any]]:
    raw = await request.body()
    try:
        body = json.loads(raw) if raw else {}
    except ValueError:
        raise BadRequest("request body is not JSON") from None
    if not isinstance(body, dict):
        raise BadRequest("request body is not a JSON object")
    return raw, body


def _last_event_id(request: Request) -> int | None:
    value = request.headers.get("last-event-id")
    if value is None:
        return None
    if not value.isascii() or not value.isdigit():
        raise BadRequest(f"Last-Event-ID {value!r} is not a frame number")
    return int(value)


class MockApp:
    """Holds the state and serves every provider endpoint."""

    def __init__(self) -> None:
        self.state = MockState()

    async def generate(self, request: Request, dialect: Dialect, *, model: str | None = None,
                       stream: bool | None = None) -> Response:
        path = request.url.path
        text = request.headers.get(SCENARIO_HEADER) or request.query_params.get("mock") or ""
        try:
            scenario = parse_scenario(text)
            _check_dialect(scenario, dialect)
            raw, body = await _read_body(request)
            stream = body.get("stream") is True if stream is None else stream
            background = dialect.background and body.get("background") is True
            # Ids follow the request and the reply, not the faults: a faulty stream and a clean
            # one of the same request differ only where the faults are.
            reply = f"{path}\n{scenario.seed}\n{scenario.tokens}\n{scenario.finish}\n"
            ident = hashlib.sha256(reply.encode() + raw).hexdigest()[:24]
            if background:
                ident = f"bg{len(self.state.background) + 1}{ident}"[:24]
            options = body.get("stream_options")
            plan = Plan(
                model=model or str(body.get("model") or "mock-model"),
                ident=ident,
                deltas=tuple(reply_deltas(scenario.seed, scenario.tokens)),
                finish=scenario.finish,
                include_usage=isinstance(options, dict) and options.get("include_usage") is True,
                background=background,
                partial_args=scenario.partial_args,
            )
            frames = tuple(apply_data_faults(dialect.stream_frames(plan), dialect, scenario))
            _check_connection_faults(scenario, len(frames))
            resume_after = _last_event_id(request) if scenario.sse_ids and stream else None
        except (ScenarioError, BadRequest) as error:
            return _error(dialect, 400, str(error))
        refused = _status_fault(self.state, dialect, path, text, scenario)
        if refused is not None:
            return refused
        if resume_after is not None:
            self.state.resumes[path] += 1
            return _stream(_delivery(frames, dialect, scenario, start_after=resume_after,
                                     first_connection=False), dialect)
        self.state.generations[path] += 1
        if background:
            stored = StoredResponse(plan=plan, scenario=scenario, frames=frames)
            self.state.background[f"resp_{ident}"] = stored
        if not stream:
            if background:
                return _json(dialect, 200, response_object(plan, "queued", final=False))
            status, whole = dialect.whole_body(plan)
            return _json(dialect, status, whole)
        if dialect.array_body is not None and request.query_params.get("alt") != "sse":
            return Response(dialect.array_body(plan), media_type="application/json")
        return _stream(_delivery(frames, dialect, scenario, start_after=0,
                                 first_connection=True), dialect)

    async def chat_completions(self, request: Request) -> Response:
        return await self.generate(request, OPENAI_CHAT)

    async def responses(self, request: Request) -> Response:
        return await self.generate(request, OPENAI_RESPONSES)

    async def messages(self, request: Request) -> Response:
        return await self.generate(request, ANTHROPIC)

    async def ollama_chat(self, request: Request) -> Response:
        return await self._ollama(request, OLLAMA)

    async def ollama_generate(self, request: Request) -> Response:
        return await self._ollama(request, OLLAMA_GENERATE)

    async def _ollama(self, request: Request, dialect: Dialect) -> Response:
        # Ollama streams unless the body says "stream": false.
        raw = await request.body()
        try:
            wants_stream = json.loads(raw).get("stream", True) is not False
        except (ValueError, AttributeError):
            wants_stream = True
        return await self.generate(request, dialect, stream=wants_stream)

    async def gemini(self, request: Request) -> Response:
        model, _, action = request.path_params["target"].rpartition(":")
        if action not in ("streamGenerateContent", "generateContent") or not model:
            return _error(GEMINI, 404, f"unknown Gemini method {action!r}")
        return await self.generate(request, GEMINI, model=model,
                                   stream=action == "streamGenerateContent")

    async def bedrock(self, request: Request) -> Response:
        # The path says the operation and whether it streams: /model/{id}/converse-stream or
        # /converse, /model/{id}/invoke-with-response-stream or /invoke.
        model, action = request.path_params["model"], request.path_params["action"]
        operation = _BEDROCK_OPERATIONS.get(action)
        if operation is None:
            return _error(BEDROCK_CONVERSE, 404, f"unknown Bedrock operation {action!r}")
        wire, stream = operation
        return await self.generate(request, wire, model=model, stream=stream)

    async def retrieve_response(self, request: Request) -> Response:
        response_id = request.path_params["response_id"]
        stored = self.state.background.get(response_id)
        if stored is None:
            return _error(OPENAI_RESPONSES, 404, f"No response found with id '{response_id}'.")
        if request.query_params.get("stream") != "true":
            status, whole = OPENAI_RESPONSES.whole_body(stored.plan)
            return _json(OPENAI_RESPONSES, status, whole)
        after = request.query_params.get("starting_after", "-1")
        try:
            starting_after = int(after)
        except ValueError:
            return _error(OPENAI_RESPONSES, 400, f"starting_after {after!r} is not an integer")
        # Frames are in sequence order (a duplicate repeats a number), so this counts a prefix.
        skipped = sum(1 for frame in stored.frames
                      if frame.sequence_number is not None
                      and frame.sequence_number <= starting_after)
        self.state.resumes[RESPONSES_PATH] += 1
        delivery = _delivery(stored.frames, OPENAI_RESPONSES, stored.scenario,
                             start_after=skipped, first_connection=False)
        return _stream(delivery, OPENAI_RESPONSES)

    async def requests(self, request: Request) -> Response:
        return JSONResponse(self.state.counts())

    async def reset(self, request: Request) -> Response:
        self.state.reset()
        return JSONResponse(self.state.counts())


_BEDROCK_OPERATIONS = {
    "converse": (BEDROCK_CONVERSE, False),
    "converse-stream": (BEDROCK_CONVERSE, True),
    "invoke": (BEDROCK_INVOKE, False),
    "invoke-with-response-stream": (BEDROCK_INVOKE, True),
}


def create_app() -> Starlette:
    """A new mock upstream (an ASGI app) with its own counters."""
    quiet_intentional_drops()
    mock = MockApp()
    routes = [
        Route("/v1/chat/completions", mock.chat_completions, methods=["POST"]),
        Route(RESPONSES_PATH, mock.responses, methods=["POST"]),
        Route(RESPONSES_PATH + "/{response_id}", mock.retrieve_response, methods=["GET"]),
        Route("/v1/messages", mock.messages, methods=["POST"]),
        Route("/v1beta/models/{target}", mock.gemini, methods=["POST"]),
        # google-genai 1.x+ defaults to the v1 API; both versions speak the same format.
        Route("/v1/models/{target}", mock.gemini, methods=["POST"]),
        Route("/api/chat", mock.ollama_chat, methods=["POST"]),
        Route("/api/generate", mock.ollama_generate, methods=["POST"]),
        Route("/model/{model}/{action}", mock.bedrock, methods=["POST"]),
        Route("/_mock/requests", mock.requests, methods=["GET"]),
        Route("/_mock/reset", mock.reset, methods=["POST"]),
    ]
    app = Starlette(routes=routes)
    app.state.mock = mock
    return app
