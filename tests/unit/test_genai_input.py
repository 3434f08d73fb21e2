"""Each dialect reads its provider's request into the GenAI conventions' input messages and
system instructions (``Dialect.genai_input``), for a span that captures content: every role, a
tool call and its answer, reasoning, and media by their type only. Bodies are the providers'
documented request shapes; a field of the wrong type is left out, never raised on."""

from __future__ import annotations

from typing import Any

import pytest

from unbroken.dialects import DIALECTS, dialect_class


def text(content: str) -> dict[str, Any]:
    return {"type": "text", "content": content}


def call(id_: str | None, name: str, arguments: Any) -> dict[str, Any]:
    return {"type": "tool_call", "id": id_, "name": name, "arguments": arguments}


def answer(id_: str | None, response: Any) -> dict[str, Any]:
    return {"type": "tool_call_response", "id": id_, "response": response}


def user(*parts: dict[str, Any]) -> dict[str, Any]:
    return {"role": "user", "parts": list(parts)}


def assistant(*parts: dict[str, Any]) -> dict[str, Any]:
    return {"role": "assistant", "parts": list(parts)}


CASES: dict[str, tuple[dict[str, Any], list[dict[str, Any]], list[dict[str, Any]]]] = {
    "openai-chat": (
        {"model": "m", "messages": [
            {"role": "developer", "content": "Be brief."},
            {"role": "user", "content": [{"type": "text", "text": "Weather?"},
                                         {"type": "image_url", "image_url": {"url": "data:x"}}]},
            {"role": "assistant", "content": None, "tool_calls": [
                {"id": "c1", "type": "function",
                 "function": {"name": "weather", "arguments": '{"city":"Oslo"}'}}]},
            {"role": "tool", "tool_call_id": "c1", "content": "rain"},
        ]},
        [user(text("Weather?"), {"type": "image_url"}),
         assistant(call("c1", "weather", '{"city":"Oslo"}')),
         {"role": "tool", "parts": [answer("c1", "rain")]}],
        [text("Be brief.")]),
    "openai-responses": (
        {"model": "m", "instructions": "Be brief.", "input": [
            {"role": "user", "content": [{"type": "input_text", "text": "Weather?"},
                                         {"type": "input_image", "image_url": "data:x"}]},
            {"type": "function_call", "call_id": "c1", "name": "weather",
             "arguments": '{"city":"Oslo"}'},
            {"type": "function_call_output", "call_id": "c1", "output": "rain"},
            {"type": "item_reference", "id": "msg_1"},
            {"role": "system", "content": "No jokes."},
        ]},
        [user(text("Weather?"), {"type": "input_image"}),
         assistant(call("c1", "weather", '{"city":"Oslo"}')),
         {"role": "tool", "parts": [answer("c1", "rain")]},
         user({"type": "item_reference"})],
        [text("Be brief."), text("No jokes.")]),
    "anthropic": (
        {"model": "m", "system": [{"type": "text", "text": "Be brief."}], "messages": [
            {"role": "user", "content": "Weather?"},
            {"role": "assistant", "content": [
                {"type": "thinking", "thinking": "Look it up.", "signature": "s"},
                {"type": "tool_use", "id": "t1", "name": "weather", "input": {"city": "Oslo"}}]},
            {"role": "user", "content": [
                {"type": "tool_result", "tool_use_id": "t1", "content": "rain"},
                {"type": "image", "source": {"type": "base64", "data": "AAAA"}}]},
        ]},
        [user(text("Weather?")),
         assistant({"type": "reasoning", "content": "Look it up."},
                   call("t1", "weather", {"city": "Oslo"})),
         user(answer("t1", "rain"), {"type": "image"})],
        [text("Be brief.")]),
    "gemini": (
        {"systemInstruction": {"parts": [{"text": "Be brief."}]}, "contents": [
            {"role": "user", "parts": [{"text": "Weather?"},
                                       {"inlineData": {"mimeType": "image/png", "data": "AA"}}]},
            {"role": "model", "parts": [
                {"text": "Look it up.", "thought": True},
                {"functionCall": {"name": "weather", "args": {"city": "Oslo"}}}]},
            {"role": "user", "parts": [
                {"functionResponse": {"name": "weather", "response": {"sky": "rain"}}}]},
        ]},
        [user(text("Weather?"), {"type": "inlineData"}),
         assistant({"type": "reasoning", "content": "Look it up."},
                   call(None, "weather", {"city": "Oslo"})),
         user(answer(None, {"sky": "rain"}))],
        [text("Be brief.")]),
    "ollama": (
        {"model": "m", "messages": [
            {"role": "system", "content": "Be brief."},
            {"role": "user", "content": "Weather?", "images": ["AAAA"]},
            {"role": "assistant", "content": "", "thinking": "Look it up.", "tool_calls": [
                {"function": {"name": "weather", "arguments": {"city": "Oslo"}}}]},
            {"role": "tool", "content": "rain"},
        ]},
        [user(text("Weather?"), {"type": "image"}),
         assistant({"type": "reasoning", "content": "Look it up."},
                   call(None, "weather", {"city": "Oslo"})),
         {"role": "tool", "parts": [answer(None, "rain")]}],
        [text("Be brief.")]),
    "bedrock-converse": (
        {"system": [{"text": "Be brief."}], "messages": [
            {"role": "user", "content": [{"text": "Weather?"},
                                         {"image": {"format": "png", "source": {"bytes": "AA"}}}]},
            {"role": "assistant", "content": [
                {"reasoningContent": {"reasoningText": {"text": "Look it up."}}},
                {"toolUse": {"toolUseId": "t1", "name": "weather",
                             "input": {"city": "Oslo"}}}]},
            {"role": "user", "content": [
                {"toolResult": {"toolUseId": "t1", "content": [{"text": "rain"}]}}]},
        ]},
        [user(text("Weather?"), {"type": "image"}),
         assistant({"type": "reasoning", "content": "Look it up."},
                   call("t1", "weather", {"city": "Oslo"})),
         user(answer("t1", [{"text": "rain"}]))],
        [text("Be brief.")]),
    "bedrock-invoke": (
        {"anthropic_version": "bedrock-2023-05-31", "max_tokens": 9, "system": "Be brief.",
         "messages": [{"role": "user", "content": "Weather?"}]},
        [user(text("Weather?"))],
        [text("Be brief.")]),
}


def test_every_dialect_is_covered() -> None:
    assert set(CASES) == {cls.name for cls in DIALECTS}


@pytest.mark.parametrize("name", list(CASES))
def test_a_request_reads_as_the_conventions_messages(name: str) -> None:
    body, messages, system = CASES[name]
    assert dialect_class(name).genai_input(body) == (messages, system)


def test_ollama_generate_is_its_prompt_and_system() -> None:
    assert dialect_class("ollama").genai_input(
        {"model": "m", "prompt": "Weather?", "system": "Be brief."}) \
        == ([user(text("Weather?"))], [text("Be brief.")])


def test_openai_responses_input_as_one_string() -> None:
    assert dialect_class("openai-responses").genai_input({"input": "Weather?"}) \
        == ([user(text("Weather?"))], [])


@pytest.mark.parametrize("name", list(CASES))
@pytest.mark.parametrize("body", [
    {},
    {"messages": "hi", "contents": 3, "input": None, "system": 7, "systemInstruction": []},
    {"messages": [None, 1, {"role": 5, "content": 9}], "contents": [{"parts": "x"}],
     "input": [1, {"role": "user", "content": 2}]},
])
def test_fields_of_the_wrong_type_are_left_out(name: str, body: dict[str, Any]) -> None:
    messages, system = dialect_class(name).genai_input(body)
    assert system == []
    assert all(set(m) == {"role", "parts"} and isinstance(m["role"], str) for m in messages)
    assert all(part["type"] != "text" for m in messages for part in m["parts"])
