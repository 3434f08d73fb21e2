"""Tool calls are routed by id first, index second; a provider reusing an index for a new call
(Ollama's OpenAI-compatible API gives every parallel call index 0) gets two calls and a warning."""

from __future__ import annotations

from pathlib import Path

from unbroken import parse
from unbroken._tool_calls import ToolCall, ToolCalls
from unbroken.events import ToolCallDelta

BODY = (Path(__file__).parents[1] / "conformance" / "dialects" / "openai-chat"
        / "ollama_parallel_calls_same_index.sse").read_bytes()


def test_reused_index_is_two_calls_and_a_warning() -> None:
    message = parse([BODY], dialect="openai-chat")
    assert [(call.id, call.value) for call in message.tool_calls] == [
        ("call_7mj0ah3s", {"city": "Paris"}), ("call_x2kq9v1e", {"city": "東京"})
    ]
    [warning] = [w for w in message.trace.warnings if w.code == "tool_index_reused"]
    assert warning.seq == 2
    assert warning.detail == ("tool call 'call_x2kq9v1e' reuses index 0 of call 'call_7mj0ah3s': "
                              "kept as a call of its own")


def test_deltas_without_ids_follow_the_index_and_with_ids_follow_the_id() -> None:
    calls = ToolCalls()
    deltas = [
        ToolCallDelta(seq=1, index=0, id="a", name="f", arguments='{"x":'),
        ToolCallDelta(seq=1, index=1, id="b", name="g", arguments="{"),
        ToolCallDelta(seq=2, index=0, arguments="1}"),  # no id: the call at index 0
        ToolCallDelta(seq=3, index=7, id="b", arguments="}"),  # the id wins over the index
    ]
    assert [calls.add(delta) for delta in deltas] == [None, None, None, None]
    calls.complete()
    assert calls.calls() == [ToolCall("a", "f", '{"x":1}', {"x": 1}),
                             ToolCall("b", "g", "{}", {})]
