"""Faults: damage to the frames themselves, and the ASGI body writer that delivers them badly.

Data faults (``apply_data_faults``) change the frame list, so a resume replays them too.
Connection faults (``Delivery``) change how one connection writes the frames: delays, pings,
stalls, writes cut inside characters, and an abrupt close without the terminating chunk.
"""

from __future__ import annotations

import logging
from contextvars import ContextVar
from dataclasses import dataclass, replace

import anyio
from starlette.responses import Response
from starlette.types import Receive, Scope, Send

from .scenario import Scenario, ScenarioError
from .wire import Dialect, PlannedFrame

__all__ = [
    "Delivery",
    "FrameStreamResponse",
    "apply_data_faults",
    "character_cuts",
    "first_cut",
    "quiet_intentional_drops",
]

# Pause between the pieces of a split frame, so that they usually cross the socket as
# separate reads instead of being coalesced again by the kernel.
SPLIT_PAUSE_S = 0.001

# uvicorn logs an error when an app returns without finishing its response. For the mock that is
# the point of drop_after, so the message is filtered out for the request that dropped on purpose
# (the flag lives in that request's context; uvicorn logs from the same task).
UNFINISHED_RESPONSE_LOG = "ASGI callable returned without completing response."
_dropped_on_purpose: ContextVar[bool] = ContextVar("unbroken_mock_dropped", default=False)


class _IntentionalDropFilter(logging.Filter):
    def filter(self, record: logging.LogRecord) -> bool:
        return not (_dropped_on_purpose.get() and record.msg == UNFINISHED_RESPONSE_LOG)


def quiet_intentional_drops() -> None:
    """Keep uvicorn from logging the mock's own drops as application errors (idempotent)."""
    logger = logging.getLogger("uvicorn.error")
    if not any(isinstance(existing, _IntentionalDropFilter) for existing in logger.filters):
        logger.addFilter(_IntentionalDropFilter())


def _check_frame(key: str, number: int | None, total: int) -> None:
    if number is not None and number > total:
        raise ScenarioError(key, f"frame {number} is past the last frame ({total})")


def apply_data_faults(
    frames: list[PlannedFrame], dialect: Dialect, scenario: Scenario
) -> list[PlannedFrame]:
    """Apply error_at, malformed_json_at, invalid_utf8_at and duplicate (in that order).

    All four count frames of the undamaged layout. ``error_at=N`` replaces frame N with the
    provider's error event and ends the stream there; ``duplicate=N`` inserts a copy of frame N
    right after it.
    """
    total = len(frames)
    for key in ("error_at", "malformed_json_at", "invalid_utf8_at", "duplicate"):
        _check_frame(key, getattr(scenario, key), total)
    frames = list(frames)
    if scenario.error_at is not None:
        frames = [*frames[: scenario.error_at - 1], dialect.error_frame(scenario.error_at)]
    for key, damage in (("malformed_json_at", _malformed), ("invalid_utf8_at", _invalid_utf8)):
        number = getattr(scenario, key)
        if number is not None:
            _check_frame(key, number, len(frames))
            frames[number - 1] = replace(frames[number - 1], data=damage(frames[number - 1].data))
    if scenario.duplicate is not None:
        if not dialect.numbered:
            raise ScenarioError("duplicate", "only openai-responses frames carry sequence numbers")
        _check_frame("duplicate", scenario.duplicate, len(frames))
        frames.insert(scenario.duplicate, frames[scenario.duplicate - 1])
    return frames


def _malformed(data: bytes) -> bytes:
    # Dropping the last byte removes the closing brace: the payload is no longer JSON.
    return data[:-1]


def _invalid_utf8(data: bytes) -> bytes:
    # The first multi-byte character becomes a lone 0xFF byte, which UTF-8 never contains.
    for start, length in _characters(data):
        if length > 1:
            return data[:start] + b"\xff" + data[start + length :]
    return data[:-1] + b"\xff" + data[-1:]


def _characters(data: bytes) -> list[tuple[int, int]]:
    """(offset, byte length) of each UTF-8 character; an invalid byte counts as length 1."""
    found = []
    index = 0
    while index < len(data):
        lead = data[index]
        length = next((size for size, top in ((2, 0xE0), (3, 0xF0), (4, 0xF5))
                       if 0xC2 <= lead < top), 1)
        tail = data[index + 1 : index + length]
        if len(tail) != length - 1 or any(not 0x80 <= byte < 0xC0 for byte in tail):
            length = 1
        found.append((index, length))
        index += length
    return found


def character_cuts(data: bytes) -> list[int]:
    """Offsets that cut ``data`` inside each of its multi-byte characters (varying position).

    A frame without a multi-byte character is cut once, in its middle.
    """
    cuts = []
    for number, (start, length) in enumerate(
        (start, length) for start, length in _characters(data) if length > 1
    ):
        cuts.append(start + 1 + number % (length - 1))
    if not cuts and len(data) > 1:
        cuts.append(len(data) // 2)
    return cuts


def first_cut(data: bytes) -> int:
    """Where ``drop_mid`` cuts: after the first byte of the first multi-byte character, or in
    the middle of a frame that has none."""
    return character_cuts(data)[0] if len(data) > 1 else 0


@dataclass(frozen=True, slots=True, kw_only=True)
class Delivery:
    """How one connection writes ``frames`` (wire bytes, numbered from 1)."""

    frames: tuple[bytes, ...]
    start_after: int = 0
    keepalive: bytes = b""
    drop_after: int | None = None
    drop_mid: bool = False
    stall_after: int | None = None
    stall_s: float = 0.0
    pings: bool = False
    ping_ms: int = 100
    delay_ms: int = 0
    split_utf8: bool = False


class FrameStreamResponse(Response):
    """A streaming response written message by message, able to end without its last chunk."""

    def __init__(self, delivery: Delivery, *, media_type: str, headers: dict[str, str]) -> None:
        self.delivery = delivery
        self.status_code = 200
        self.background = None
        # Given as a header so that Starlette does not append a charset the provider never sent.
        self.init_headers({**headers, "content-type": media_type})

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        await send({"type": "http.response.start", "status": 200, "headers": self.raw_headers})
        completed = False
        async with anyio.create_task_group() as group:

            async def watch_disconnect() -> None:
                while (await receive())["type"] != "http.disconnect":
                    pass
                group.cancel_scope.cancel()

            group.start_soon(watch_disconnect)
            completed = await _write(self.delivery, send)
            group.cancel_scope.cancel()
        if completed:
            await send({"type": "http.response.body", "body": b"", "more_body": False})
        else:
            _dropped_on_purpose.set(True)
        # Otherwise return without the final message: uvicorn then closes the connection
        # without the terminating zero-length chunk, as a broken upstream does.


async def _body(send: Send, data: bytes) -> None:
    await send({"type": "http.response.body", "body": data, "more_body": True})


async def _stall(delivery: Delivery, send: Send) -> None:
    remaining_ms = round(delivery.stall_s * 1000)
    if not (delivery.pings and delivery.keepalive):
        await anyio.sleep(remaining_ms / 1000)
        return
    # Whole milliseconds keep the number of keep-alives exact: ceil(stall / ping) - 1.
    while remaining_ms > 0:
        step_ms = min(delivery.ping_ms, remaining_ms)
        await anyio.sleep(step_ms / 1000)
        remaining_ms -= step_ms
        if remaining_ms > 0:
            await _body(send, delivery.keepalive)


async def _write(delivery: Delivery, send: Send) -> bool:
    """Write the frames after ``start_after``; False when the connection is to be dropped."""
    if delivery.stall_after == 0:
        await _stall(delivery, send)
    if delivery.drop_after == 0:
        return await _drop(delivery, send, 0)
    first = delivery.start_after + 1
    for number in range(first, len(delivery.frames) + 1):
        data = delivery.frames[number - 1]
        if number > first:
            if delivery.delay_ms:
                await anyio.sleep(delivery.delay_ms / 1000)
            if delivery.pings and delivery.keepalive:
                await _body(send, delivery.keepalive)
        if delivery.split_utf8:
            start = 0
            for cut in [*character_cuts(data), len(data)]:
                if start:
                    await anyio.sleep(SPLIT_PAUSE_S)
                await _body(send, data[start:cut])
                start = cut
        else:
            await _body(send, data)
        if number == delivery.stall_after:
            await _stall(delivery, send)
        if number == delivery.drop_after:
            return await _drop(delivery, send, number)
    return True


async def _drop(delivery: Delivery, send: Send, number: int) -> bool:
    if delivery.drop_mid:
        data = delivery.frames[number]
        await _body(send, data[: first_cut(data)])
    return False
