"""``unbroken demo``: the whole idea, live, in one process and a few seconds.

A mock upstream and the resumable proxy (SQLite journal in a temporary directory) start on free
loopback ports. Two streams run through them with faults:

1. an OpenAI chat stream of Chinese + emoji whose frames the upstream writes in pieces cut inside
   UTF-8 characters, and whose client connection is cut mid-sentence (inside a character) and
   resumed by ``Last-Event-ID``;
2. an OpenAI Responses stream whose upstream sends one frame twice.

Then it checks, for each: the text equals the reference exactly, zero duplicated characters, one
upstream generation. Exit 0 only if every check holds.

``--web`` instead serves the chat page of ``unbroken.web`` on the proxy's origin (mock upstream
behind it, a fault picker for every end state) until Ctrl-C.
"""

from __future__ import annotations

import argparse
import difflib
import json
import tempfile
import time
from collections.abc import Iterator
from dataclasses import asdict, dataclass
from typing import Any

import httpx2
from rich.console import Group
from rich.live import Live
from rich.panel import Panel
from rich.text import Text

from ..dialects.openai_chat import OpenAIChatDialect
from ..dialects.openai_responses import OpenAIResponsesDialect
from .errors import EXIT_CHECK_FAILED, EXIT_OK, EXIT_USAGE
from .output import console
from .serving import serve_in_thread

__all__ = ["CutOnceTransport", "SceneResult", "add_parser", "duplicated_characters", "run"]

API_KEY = "sk-demo-not-a-real-key"


def add_parser(commands: Any) -> None:
    parser = commands.add_parser(
        "demo", help="see a stream survive split characters, a dropped connection and a repeat"
    )
    parser.add_argument("--json", action="store_true", help="print the checks as JSON only")
    parser.add_argument("--delay-ms", type=int, default=25,
                        help="pause between upstream frames, to watch the text grow (default 25)")
    parser.add_argument("--web", action="store_true",
                        help="serve a chat page on the proxy (every end state, a fault picker) "
                             "and keep running until Ctrl-C")
    parser.add_argument("--port", type=int, default=0,
                        help="with --web: the proxy's port on 127.0.0.1 (default: a free one)")
    parser.add_argument("--cors-origin", action="append", default=[], dest="cors_origins",
                        metavar="ORIGIN", help="with --web: a page origin that may call the "
                                               "proxy (repeatable); the page takes ?proxy=URL")
    parser.set_defaults(handler=run)


@dataclass(slots=True)
class SceneResult:
    name: str
    status: str
    finish_reason: str | None
    connections: int
    generations: int
    text_equal: bool
    duplicated_characters: int
    missing_characters: int

    @property
    def ok(self) -> bool:
        return (self.text_equal and self.duplicated_characters == 0 and self.generations == 1
                and self.status == "completed")


def duplicated_characters(reference: str, text: str) -> tuple[int, int]:
    """(characters in ``text`` beyond the reference, characters of the reference missing)."""
    extra = missing = 0
    matcher = difflib.SequenceMatcher(None, reference, text, autojunk=False)
    for op, a0, a1, b0, b1 in matcher.get_opcodes():
        if op in ("insert", "replace"):
            extra += b1 - b0
        if op in ("delete", "replace"):
            missing += a1 - a0
    return extra, missing


class CutOnceTransport(httpx2.BaseTransport):
    """Cuts the first streamed response after ``after`` bytes, as a flaky network would."""

    def __init__(self, after: int, log: list[str]) -> None:
        self._inner = httpx2.HTTPTransport()
        self._after = after
        self._log = log
        self._cut = False

    def handle_request(self, request: httpx2.Request) -> httpx2.Response:
        last_id = request.headers.get("last-event-id")
        if last_id:
            self._log.append(f"resume: the same POST again with Last-Event-ID: {last_id}")
        response = self._inner.handle_request(request)
        if self._cut:
            return response
        self._cut = True
        return httpx2.Response(
            response.status_code,
            headers=response.headers,
            stream=_CuttingStream(response, self._after, self._log),
            extensions=response.extensions,
        )

    def close(self) -> None:
        self._inner.close()


class _CuttingStream(httpx2.SyncByteStream):
    def __init__(self, response: httpx2.Response, after: int, log: list[str]) -> None:
        self._response = response
        self._after = after
        self._log = log

    def __iter__(self) -> Iterator[bytes]:
        sent = 0
        for chunk in self._response.stream:  # type: ignore[union-attr]
            start = max(0, self._after - sent)
            # Cut just after the first lead byte of a multi-byte character past the mark.
            lead = next((i for i in range(start, len(chunk)) if chunk[i] >= 0xC0), None)
            if lead is None:
                sent += len(chunk)
                yield chunk
                continue
            part = chunk[: lead + 1]
            yield part
            self._log.append(
                f"network cut after {sent + len(part)} bytes, inside the character that "
                f"starts with byte {part[-1]:#04x}"
            )
            raise httpx2.RemoteProtocolError("demo: connection cut by the network")

    def close(self) -> None:
        self._response.close()


def _view(title: str, text: str, log: list[str], status: str) -> Panel:
    body = Group(Text(text or "…"), Text(""), *(Text(f"• {line}", style="cyan") for line in log),
                 Text(status, style="bold"))
    return Panel(body, title=title, title_align="left")


def _scene(
    name: str,
    title: str,
    *,
    proxy: str,
    upstream: str,
    path: str,
    dialect: str,
    body: dict[str, Any],
    scenario: str,
    reference: str,
    cut_after: int | None,
    live: Live | None,
) -> SceneResult:
    from ..client import Retry, stream
    from ..client.graphemes import GraphemeBuffer
    from ..events import TextDelta

    log: list[str] = []
    transport: httpx2.BaseTransport = (
        CutOnceTransport(cut_after, log) if cut_after is not None else httpx2.HTTPTransport()
    )
    text = ""
    shown = GraphemeBuffer()  # the live view never shows 🧑 before 🧑🏿‍💻, or half a flag
    with (
        httpx2.Client(transport=transport) as http,
        stream("POST", proxy + path, dialect=dialect, json=body, client=http,
               headers={"Authorization": f"Bearer {API_KEY}", "Unbroken-Mock": scenario},
               retry=Retry(attempts=3, backoff=0.05), idle_timeout=10) as s,
    ):
        for event in s:
            if isinstance(event, TextDelta):
                text += shown.push(event.text)
            if live is not None:
                live.update(_view(title, text, log, f"streaming… connection {s.connections}"))
        message = s.message
        finish = message.finish_reason.value if message.finish_reason else None
        log.append(f"final status {message.status.value}, finish reason {finish} "
                   f"(raw {message.raw_finish_reason!r}); {len(message.text)} characters")
        if live is not None:
            live.update(_view(title, message.text, log, "done"))
    counts = httpx2.get(upstream + "/_mock/requests").json()
    extra, missing = duplicated_characters(reference, message.text)
    return SceneResult(
        name=name,
        status=message.status.value,
        finish_reason=finish,
        connections=s.connections,
        generations=int(counts["generations"].get(path, 0)),
        text_equal=message.text == reference,
        duplicated_characters=extra,
        missing_characters=missing,
    )


def run_web(arguments: argparse.Namespace) -> int:
    """The demo page on the proxy, in front of the mock, until Ctrl-C."""
    from ..mock import create_app as create_mock
    from ..proxy import ProxyConfig
    from ..proxy import create_app as create_proxy
    from ..proxy.config import PROVIDERS, cors_origin
    from ..web import with_demo_page

    out = console()
    try:
        origins = tuple(cors_origin(origin) for origin in arguments.cors_origins)
    except ValueError as exc:
        out.print(f"[red]{exc}[/]")
        return EXIT_USAGE
    with tempfile.TemporaryDirectory(prefix="unbroken-demo-") as tmp:
        with serve_in_thread(create_mock()) as upstream:
            config = ProxyConfig(origins=dict.fromkeys(PROVIDERS, upstream),
                                 store=f"sqlite:///{tmp}/journal.db", cors_origins=origins)
            with serve_in_thread(with_demo_page(create_proxy(config)),
                                 port=arguments.port) as proxy:
                out.print(f"open [bold]{proxy}/[/] (mock upstream {upstream}); Ctrl-C stops")
                try:
                    while True:
                        time.sleep(3600)
                except KeyboardInterrupt:
                    pass
    return EXIT_OK


def run(arguments: argparse.Namespace) -> int:
    if arguments.web:
        return run_web(arguments)
    from ..mock import create_app as create_mock
    from ..mock import reply_text
    from ..proxy import ProxyConfig
    from ..proxy import create_app as create_proxy
    from ..proxy.config import PROVIDERS

    out = console()
    started = time.monotonic()
    delay = max(0, arguments.delay_ms)
    results: list[SceneResult] = []
    with tempfile.TemporaryDirectory(prefix="unbroken-demo-") as tmp:
        with serve_in_thread(create_mock()) as upstream:
            config = ProxyConfig(origins=dict.fromkeys(PROVIDERS, upstream),
                                 store=f"sqlite:///{tmp}/journal.db")
            with serve_in_thread(create_proxy(config)) as proxy:
                if not arguments.json:
                    out.print(f"mock upstream {upstream}  ·  unbroken proxy {proxy}  ·  "
                              f"journal {tmp}/journal.db")
                scenes: list[dict[str, Any]] = [
                    dict(
                        name="chat: split characters, dropped connection, resume",
                        title="1 · OpenAI chat through the proxy — frames cut inside characters",
                        path=OpenAIChatDialect.route.paths[0], dialect=OpenAIChatDialect.name,
                        body={"model": "demo", "stream": True,
                              "messages": [{"role": "user", "content": "你好"}]},
                        scenario=f"seed=7; tokens=48; split_utf8=1; delay_ms={delay}",
                        reference=reply_text(7, 48), cut_after=2900,
                    ),
                    dict(
                        name="responses: upstream repeats a frame",
                        title="2 · OpenAI Responses — the upstream sends frame 12 twice",
                        path=OpenAIResponsesDialect.route.paths[0],
                        dialect=OpenAIResponsesDialect.name,
                        body={"model": "demo", "stream": True, "input": "你好"},
                        scenario=f"seed=8; tokens=32; duplicate=12; delay_ms={delay}",
                        reference=reply_text(8, 32), cut_after=None,
                    ),
                ]
                for scene in scenes:
                    httpx2.post(upstream + "/_mock/reset")
                    if arguments.json:
                        results.append(_scene(**scene, proxy=proxy, upstream=upstream,
                                              live=None))
                        continue
                    with Live(console=out, refresh_per_second=12) as live:
                        results.append(_scene(**scene, proxy=proxy, upstream=upstream,
                                              live=live))
                    out.print()
    ok = all(r.ok for r in results)
    elapsed = time.monotonic() - started
    if arguments.json:
        print(json.dumps({"ok": ok, "seconds": round(elapsed, 2),
                          "scenes": [asdict(r) | {"ok": r.ok} for r in results]},
                         ensure_ascii=False))
    else:
        for r in results:
            mark = "[bold green]✓[/]" if r.ok else "[bold red]✗[/]"
            out.print(f"{mark} {r.name}: text equals the reference: {r.text_equal}; "
                      f"duplicated characters: {r.duplicated_characters}; missing: "
                      f"{r.missing_characters}; upstream generations: {r.generations}; "
                      f"connections: {r.connections}; status {r.status} ({r.finish_reason})")
        out.print(f"[bold]{'all checks hold' if ok else 'CHECK FAILED'}[/] in {elapsed:.1f}s")
    return EXIT_OK if ok else EXIT_CHECK_FAILED
