"""Idempotency-Key: one per call, the same across that call's retries, never shared otherwise."""

from __future__ import annotations

import contextvars
import os
import threading

import anyio
import httpx2
import pytest

from unbroken.client.idempotency_keys import keyed

URL = "http://127.0.0.1:9/v1/chat/completions"
BODY = b'{"model":"m","stream":true,"messages":[]}'


def attempt(retry: int | None, body: bytes = BODY, url: str = URL, **headers: str) -> str | None:
    sent = dict(headers)
    if retry is not None:
        sent["x-stainless-retry-count"] = str(retry)
    request = httpx2.Request("POST", url, content=body, headers=sent)
    keyed(request)
    return request.headers.get("idempotency-key")


def in_fresh_context(retries: list[int | None]) -> list[str | None]:
    return contextvars.Context().run(lambda: [attempt(n) for n in retries])


def test_a_call_and_its_retries_share_one_key() -> None:
    first, second, third = in_fresh_context([0, 1, 2])
    assert first is not None and first.startswith("ub-") and len(first) == 35
    assert first == second == third


def test_a_second_call_with_the_same_body_gets_its_own_key() -> None:
    first, again, retry_of_again = in_fresh_context([0, 0, 1])
    assert first != again
    assert retry_of_again == again


def test_without_a_retry_marker_every_request_is_a_new_call() -> None:
    one, two = in_fresh_context([None, None])
    assert one is not None and two is not None and one != two


def test_a_retry_of_another_body_or_url_is_not_attached() -> None:
    def run() -> list[str | None]:
        return [attempt(0), attempt(1, body=b'{"other":1}'), attempt(1, url=URL + "x")]

    first, other_body, other_url = contextvars.Context().run(run)
    assert len({first, other_body, other_url}) == 3


def test_a_key_the_caller_set_is_kept() -> None:
    assert contextvars.Context().run(attempt, 0, BODY, URL, **{"Idempotency-Key": "mine"}) \
        == "mine"


@pytest.mark.parametrize("request_", [
    httpx2.Request("GET", URL),
    httpx2.Request("POST", URL, content=b"plain text"),
    httpx2.Request("POST", URL, files={"file": ("a.txt", b"x")}),
    httpx2.Request("POST", URL, content=iter([b"{}"])),  # a streamed upload: never read
])
def test_other_requests_get_no_key(request_: httpx2.Request) -> None:
    assert keyed(request_) is False
    assert "idempotency-key" not in request_.headers


def test_a_retry_in_another_thread_is_not_attached() -> None:
    def call() -> None:
        seen.append(attempt(0))

    seen: list[str | None] = []
    first = contextvars.Context().run(lambda: attempt(0))
    worker = threading.Thread(target=call)
    worker.start()
    worker.join(timeout=10)
    assert len(seen) == 1 and seen[0] != first
    assert attempt(1) not in {first, seen[0]}


@pytest.mark.anyio
async def test_sibling_tasks_keep_their_own_calls() -> None:
    keys: dict[str, list[str | None]] = {}

    async def call(name: str) -> None:
        keys[name] = [attempt(0)]
        await anyio.sleep(0.01)  # the sibling's first attempt happens in between
        keys[name].append(attempt(1))

    async with anyio.create_task_group() as tasks:
        tasks.start_soon(call, "a")
        tasks.start_soon(call, "b")
    assert keys["a"][0] == keys["a"][1] and keys["b"][0] == keys["b"][1]
    assert keys["a"][0] != keys["b"][0]


@pytest.mark.skipif(not hasattr(os, "fork"), reason="fork")
def test_a_forked_child_draws_keys_of_its_own() -> None:
    read, write = os.pipe()
    pid = os.fork()
    if pid == 0:  # the child: its next key, to the parent
        try:
            os.write(write, (contextvars.Context().run(attempt, 0) or "").encode())
        finally:
            os._exit(0)
    os.close(write)
    with os.fdopen(read, "rb") as pipe:
        child = pipe.read().decode()
    os.waitpid(pid, 0)
    parent = contextvars.Context().run(attempt, 0)
    assert parent is not None and len(child) == len(parent) == 35
    assert child[:19] != parent[:19]  # another random prefix, so never the parent's next keys
