"""Values as design.md spells them: events built from the contract's fields equal decoded ones,
a ``ToolCall(id, name, arguments, value)`` equals an assembled one, and an interrupted stream's
exception is ``Interrupted`` whatever ended it."""

from __future__ import annotations

import pickle

import pytest

from unbroken import ServerSentEvent, SSEDecoder, ToolCall
from unbroken.errors import (
    ContentTypeError,
    IdleTimeout,
    Interrupted,
    StreamError,
    StreamTimeout,
    TransportError,
    UpstreamStatusError,
    interrupted_by,
)
from unbroken.framing import JSONLine, NDJSONDecoder


def test_a_decoded_event_equals_one_built_from_the_six_contract_fields() -> None:
    (decoded,) = SSEDecoder().receive_data(b"event: ping\nid: 7\ndata: a\n\n")
    assert decoded.raw == b"event: ping\nid: 7\ndata: a\n\n"
    built = ServerSentEvent(event="ping", data="a", id="7", block_id="7", retry=None, nbytes=27)
    assert decoded == built
    assert not decoded != built
    assert decoded == ServerSentEvent("ping", "a", "7", "7", None, 27)
    assert hash(decoded) == hash(built)
    assert {decoded: 1}[built] == 1
    assert decoded == ("ping", "a", "7", "7", None, 27)


def test_events_differing_in_a_contract_field_differ() -> None:
    (decoded,) = SSEDecoder().receive_data(b"data: a\n\n")
    assert decoded == ServerSentEvent(data="a", nbytes=9)
    assert decoded != ServerSentEvent(data="a", nbytes=10)
    assert decoded != ServerSentEvent(data="b", nbytes=9)
    assert decoded != ServerSentEvent(data="a", nbytes=9, retry=5)
    assert (decoded == "data: a") is False


def test_a_decoded_json_line_equals_one_built_from_value_line_nbytes() -> None:
    first, second = NDJSONDecoder().receive_data(b'{"a":1}\n[2]\n')
    assert (first.raw, second.raw) == (b'{"a":1}\n', b"[2]\n")
    assert first == JSONLine(value={"a": 1}, line=1, nbytes=8)
    assert second == JSONLine([2], 2, 4)
    assert second != JSONLine([2], 2, 5)
    assert first != JSONLine({"a": 2}, 1, 8)


def test_a_tool_call_is_its_id_name_arguments_and_value() -> None:
    positional = ToolCall("call_1", "f", '{"a":1}', {"a": 1})
    assert positional == ToolCall(id="call_1", name="f", arguments='{"a":1}', value={"a": 1})
    # The provider's index orders the calls; it is not part of the value.
    assert ToolCall("call_1", "f", '{"a":1}', {"a": 1}, index=2) == positional
    assert ToolCall("call_1", "f", '{"a":2}', {"a": 2}) != positional
    assert positional.index == 0


@pytest.mark.parametrize(
    "cause",
    [IdleTimeout("upstream sent nothing for 30 s", seconds=30.0),
     UpstreamStatusError(503, "overloaded", retry_after=2.0),
     ContentTypeError("text/html", "text/event-stream")],
)
def test_an_interrupted_stream_raises_interrupted_of_its_causes_type(cause: StreamError) -> None:
    error = interrupted_by(cause, "ended early", message="partial")
    assert isinstance(error, Interrupted)
    assert isinstance(error, type(cause))
    assert type(error).__name__ == f"Interrupted[{type(cause).__name__}]"
    assert (str(error), error.message) == ("ended early", "partial")
    for name, value in vars(cause).items():
        if name not in ("detail", "message"):
            assert getattr(error, name) == value
    # One class per cause type, and it survives a round trip through pickle.
    assert type(interrupted_by(cause, "again", message=None)) is type(error)
    copy = pickle.loads(pickle.dumps(error))
    assert type(copy) is type(error)
    assert (str(copy), copy.message) == ("ended early", "partial")


def test_other_causes_give_a_plain_interrupted() -> None:
    for cause in (TransportError("connection reset"), None):
        error = interrupted_by(cause, "ended early", message=None)
        assert type(error) is Interrupted
    assert not isinstance(interrupted_by(None, "x", message=None), StreamTimeout)


def test_except_the_cause_catches_the_interrupted_it_made() -> None:
    class SlowUpstream(IdleTimeout):
        pass

    cause = SlowUpstream("nothing for 5 s", seconds=5.0)
    with pytest.raises(IdleTimeout) as caught:
        raise interrupted_by(cause, "ended early", message="partial")
    error = caught.value
    # A subclass of a cause made elsewhere gets its nearest listed base's class.
    assert type(error).__name__ == "Interrupted[IdleTimeout]"
    assert isinstance(error, Interrupted)
    assert (error.seconds, error.message) == (5.0, "partial")
