"""50 concurrent streams over every dialect, each cut by its client at a random frame and
resumed: every one ends with exactly its text, no duplicate, one generation each."""

from __future__ import annotations

import asyncio
import random
from collections import Counter
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import httpx2
import pytest
from tests.integration.test_proxy_support import (
    CALLS,
    DIALECTS,
    KEY,
    frames_of,
    message_of,
    mock_counts,
    running_proxy,
)

from unbroken.framing import NDJSONDecoder, SSEDecoder
from unbroken.mock import reply_text
from unbroken.proxy import ProxyApp

pytestmark = pytest.mark.integration

STREAMS = 50
TOKENS = 20


@pytest.fixture
def anyio_backend() -> str:
    return "asyncio"


@dataclass(frozen=True, slots=True)
class Plan:
    index: int
    dialect: str
    seed: int
    cut: int
    delay_ms: int
    via_events: bool


def plans() -> list[Plan]:
    rng = random.Random(2024)
    out = []
    for index in range(STREAMS):
        dialect = DIALECTS[index % len(DIALECTS)]
        total = CALLS[dialect].total(TOKENS)
        # Gemini and Ollama POSTs carry no ids: resume those on the events endpoint.
        via_events = dialect in ("gemini", "ollama") or rng.random() < 0.5
        out.append(Plan(index, dialect, 1000 + index, rng.randint(1, total - 1),
                        rng.choice([0, 1, 3]), via_events))
    return out


@pytest.fixture
def served(mock_server: str, tmp_path: Path) -> Iterator[tuple[str, ProxyApp]]:
    with running_proxy(mock_server, store=f"sqlite:///{tmp_path / 'many.db'}") as served:
        yield served


async def cut_and_resume(client: httpx2.AsyncClient, plan: Plan) -> tuple[str, int, int]:
    call = CALLS[plan.dialect]
    scenario = f"seed={plan.seed}; tokens={TOKENS}; delay_ms={plan.delay_ms}"
    headers = call.headers(scenario)
    decoder: SSEDecoder | NDJSONDecoder = (
        NDJSONDecoder() if plan.dialect == "ollama" else SSEDecoder()
    )
    head: list[object] = []
    async with client.stream("POST", call.path, json=call.body, headers=headers) as response:
        assert response.status_code == 200
        stream_id = response.headers["unbroken-stream-id"]
        async for chunk in response.aiter_raw():
            head += decoder.receive_data(chunk)
            if len(head) >= plan.cut:
                break
    # The client went away after `cut` frames (the rest of that read is dropped with it).
    head_bytes = b"".join(frame.raw for frame in head[: plan.cut])  # type: ignore[attr-defined]
    if plan.via_events:
        rest = await client.get(f"/v1/streams/{stream_id}/events?after={plan.cut}",
                                headers={"authorization": f"Bearer {KEY}"})
        resumed = message_of(plan.dialect, rest.content)
        frames = len(frames_of("openai-chat", rest.content))
    else:
        rest = await client.post(call.path, json=call.body,
                                 headers=headers | {"Last-Event-ID": f"{stream_id}:{plan.cut}"})
        whole = message_of(plan.dialect, head_bytes, rest.content)
        assert whole.text == reply_text(plan.seed, TOKENS)
        assert whole.duplicates == 0
        resumed = message_of(plan.dialect, rest.content)
        frames = len(frames_of(plan.dialect, rest.content))
    assert rest.status_code == 200
    assert resumed.duplicates == 0
    status = (await client.get(f"/v1/streams/{stream_id}",
                               headers={"authorization": f"Bearer {KEY}"})).json()
    assert (status["status"], status["last_seq"]) == ("completed", call.total(TOKENS))
    text = call.text_after(plan.seed, TOKENS, plan.cut) + resumed.text
    return text, frames, plan.cut


@pytest.mark.anyio
async def test_fifty_concurrent_streams_with_random_disconnects(
    served: tuple[str, ProxyApp], mock_server: str
) -> None:
    proxy, app = served
    all_plans = plans()
    limits = httpx2.Limits(max_connections=2 * STREAMS)
    async with httpx2.AsyncClient(base_url=proxy, timeout=30, limits=limits) as client:
        results = await asyncio.wait_for(
            asyncio.gather(*(cut_and_resume(client, plan) for plan in all_plans)), 60
        )
    for plan, (text, frames, cut) in zip(all_plans, results, strict=True):
        assert text == reply_text(plan.seed, TOKENS), plan
        assert cut + frames == CALLS[plan.dialect].total(TOKENS), plan
    expected = Counter(CALLS[plan.dialect].path.split("?")[0] for plan in all_plans)
    assert mock_counts(mock_server) == {"generations": dict(expected), "resumes": {}}
    assert app.producers == {}
