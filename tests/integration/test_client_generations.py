"""A fresh attempt after the provider accepted the request is a second generation, counted.

Straight to the mock (no proxy, so no resume target): a body cut after the provider answered
2xx but before any content is retried by default, and ``Message.generations`` says 2, with the
first generation's response id and the reason in a ``regenerated`` warning, exactly as the mock
counts its generations; ``Retry(after_response=False)`` gives up instead (one generation). A
refused request (503) is retried without a second generation: the mock counts none for it.
"""

from __future__ import annotations

import pytest
from tests.integration.test_proxy_own_frames import FLAVOURS, LaterAttempts, read
from tests.integration.test_proxy_support import CALLS, DIALECTS, mock_counts

from unbroken.client import Retry
from unbroken.errors import Interrupted, ProviderError, TransportError
from unbroken.finish import Status
from unbroken.mock import reply_text

pytestmark = pytest.mark.integration

SEED, TOKENS = 13, 6
HEALTHY = f"seed={SEED}; tokens={TOKENS}"


@pytest.mark.parametrize("flavour", FLAVOURS)
@pytest.mark.parametrize("dialect", DIALECTS)
def test_a_cut_after_the_answer_starts_a_counted_second_generation(
    mock_server: str, dialect: str, flavour: str
) -> None:
    call = CALLS[dialect]
    answered = call.first_text - 1  # start frames only (none for Gemini and Ollama)
    got = read(flavour, mock_server, call, f"{HEALTHY}; drop_after={answered}",
               later=LaterAttempts(HEALTHY))
    message = got.message
    assert (got.error, message.status, message.text) == (
        None, Status.COMPLETED, reply_text(SEED, TOKENS))
    assert (got.connections, message.generations) == (2, 2)
    assert mock_counts(mock_server)["generations"] == {call.path.split("?")[0]: 2}
    assert message.earlier_response_ids == ([message.id] if answered else [None])
    [why] = [w.detail for w in message.warnings if w.code == "regenerated"]
    assert why.startswith(f"generation 2 started: generation 1 (response id "
                          f"{message.earlier_response_ids[0]}) was answered, then "
                          f"{TransportError.__name__}: ")
    assert why.endswith(", before any content")


@pytest.mark.parametrize("flavour", FLAVOURS)
@pytest.mark.parametrize("dialect", DIALECTS)
def test_after_response_false_keeps_one_generation(
    mock_server: str, dialect: str, flavour: str
) -> None:
    call = CALLS[dialect]
    got = read(flavour, mock_server, call, f"{HEALTHY}; drop_after={call.first_text - 1}",
               later=LaterAttempts(HEALTHY), retry=Retry(backoff=0.01, after_response=False))
    message = got.message
    assert isinstance(got.error, Interrupted)
    assert (message.status, message.text, got.connections, message.generations) == (
        Status.INTERRUPTED, "", 1, 1)
    assert mock_counts(mock_server)["generations"] == {call.path.split("?")[0]: 1}
    assert [w.code for w in message.warnings if w.code in ("regenerated", "no_regenerate")] == [
        "no_regenerate"]


@pytest.mark.parametrize("flavour", FLAVOURS)
def test_a_refused_request_is_retried_without_a_second_generation(
    mock_server: str, flavour: str
) -> None:
    call = CALLS["openai-chat"]
    got = read(flavour, mock_server, call, f"{HEALTHY}; status=503; status_times=1",
               retry=Retry(backoff=0.01, after_response=False))
    message = got.message
    assert (got.error, message.status, message.text) == (
        None, Status.COMPLETED, reply_text(SEED, TOKENS))
    assert (got.connections, message.generations, message.earlier_response_ids) == (2, 1, [])
    assert mock_counts(mock_server)["generations"] == {"/v1/chat/completions": 1}
    assert not [w for w in message.warnings if w.code == "regenerated"]


@pytest.mark.parametrize("flavour", FLAVOURS)
def test_a_retryable_provider_error_after_the_answer_is_a_second_generation(
    mock_server: str, flavour: str
) -> None:
    # Anthropic answers 200, then its first event is overloaded_error (retryable).
    call = CALLS["anthropic"]
    got = read(flavour, mock_server, call, f"{HEALTHY}; error_at=1",
               later=LaterAttempts(HEALTHY))
    message = got.message
    assert (got.error, message.status, message.text) == (
        None, Status.COMPLETED, reply_text(SEED, TOKENS))
    assert (got.connections, message.generations, message.earlier_response_ids) == (2, 2, [None])
    assert mock_counts(mock_server)["generations"] == {"/v1/messages": 2}
    [why] = [w.detail for w in message.warnings if w.code == "regenerated"]
    assert f"then {ProviderError.__name__}: " in why
    # Forbidden: the overloaded error ends it, failed, after one generation.
    refused = read(flavour, mock_server, call, f"{HEALTHY}; error_at=1",
                   later=LaterAttempts(HEALTHY), retry=Retry(backoff=0.01, after_response=False))
    assert (refused.message.status, refused.connections, refused.message.generations) == (
        Status.FAILED, 1, 1)
    assert isinstance(refused.error, ProviderError)
