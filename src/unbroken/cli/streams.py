"""``unbroken streams --store URL``: which streams did the proxy serve, and how did they end?

Reads the proxy's journal directly (the operator has the SQLite file or the Redis): newest
first, ``--status interrupted,failed``, ``--since 2h`` or ``--since 2026-12-03T08:00`` (local
time unless it names an offset), ``--until``, ``--limit``; a table, or ``--json`` (one object
per line). ``--capture ID -o cap.jsonl`` writes one stream's capture (the proxy's own export,
``evidence.capture_lines``) for ``unbroken inspect`` / ``unbroken replay``, offline.

A SQLite file is opened read-only: nothing is created, upgraded or written, so it is safe on
the file of a running proxy. Credentials are never shown (the journal keeps only hashes, and
this command shows none of them).
"""

from __future__ import annotations

import argparse
import asyncio
import json
import re
import sys
import time
from datetime import datetime
from pathlib import Path
from typing import IO, Any, Final

from rich import box
from rich.table import Table
from rich.text import Text

from ..finish import Status
from ..proxy.evidence import capture_lines
from ..streams.journal import (
    MAX_PAGE,
    Journal,
    RedisJournal,
    SQLiteJournal,
    StreamRecord,
    journal_for,
    shown_store,
)
from ..streams.journal.listing import parse_statuses
from .errors import EXIT_INPUT, EXIT_NETWORK, EXIT_OK, EXIT_USAGE, CLIError
from .output import console

__all__ = ["add_parser", "parse_time", "row_of", "run"]

ERROR_WIDTH: Final = 60  # characters of "type: message" in the table
_DURATION = re.compile(r"(\d+(?:\.\d+)?)([smhd])")
_UNIT_SECONDS: Final = {"s": 1, "m": 60, "h": 3600, "d": 86400}


def add_parser(commands: Any) -> None:
    parser = commands.add_parser(
        "streams", help="list the streams a proxy journaled, or export one's capture")
    parser.add_argument("--store", required=True,
                        help="the proxy's store: sqlite:///path.db or redis://host:6379/0")
    parser.add_argument("--status", help="only these statuses, comma-separated "
                        "(e.g. interrupted,failed)")
    parser.add_argument("--since", help="created at or after: a duration back from now (90s, "
                        "30m, 2h, 1d) or a time (2026-12-03T08:00, local unless it has an "
                        "offset)")
    parser.add_argument("--until", help="created before (same forms as --since)")
    parser.add_argument("--limit", type=int, default=50, help="streams to list (default 50)")
    parser.add_argument("--json", action="store_true", help="one JSON object per line")
    parser.add_argument("--capture", metavar="ID",
                        help="write this stream's capture (for unbroken inspect) instead")
    parser.add_argument("-o", "--output", help="the capture file (default: stdout)")
    parser.set_defaults(handler=run)


def parse_time(text: str, now: float, option: str = "--since") -> float:
    """Epoch seconds from a duration back from ``now`` or an ISO 8601 time."""
    duration = _DURATION.fullmatch(text.strip())
    if duration is not None:
        return now - float(duration[1]) * _UNIT_SECONDS[duration[2]]
    try:
        return datetime.fromisoformat(text.strip()).timestamp()  # naive: local time
    except ValueError:
        raise CLIError(f"{option}: expected a duration (90s, 30m, 2h, 1d) or a time "
                       f"(2026-12-03T08:00), got {text!r}", EXIT_USAGE) from None


def _statuses(text: str | None) -> list[Status] | None:
    if text is None:
        return None
    try:
        statuses = parse_statuses([text.lower()])
        if not statuses:
            raise ValueError(f"unknown status {text!r}; expected some of "
                             f"{', '.join(status.value for status in Status)}")
    except ValueError as error:
        raise CLIError(f"--status: {error}", EXIT_USAGE) from error
    return statuses


def _journal(store: str) -> Journal:
    """The store, to read: a SQLite file read-only; ``memory://`` has nothing to read."""
    if store == "memory://":
        raise CLIError("memory:// lives inside a proxy process: give its sqlite:///path.db "
                       "or redis:// store", EXIT_USAGE)
    try:
        journal = journal_for(store)
    except ValueError as err:
        raise CLIError(str(err), EXIT_USAGE) from err
    if isinstance(journal, SQLiteJournal):
        return SQLiteJournal(journal.path, read_only=True)
    return journal


def row_of(record: StreamRecord) -> dict[str, Any]:
    """One stream as a JSON line: meta and state, never a credential or token hash."""
    meta, state = record.meta, record.state
    return {
        "id": meta.stream_id, "created": meta.created, "updated": state.updated,
        "dialect": meta.dialect, "request_path": meta.request_path,
        "status": state.status.value, "finish_reason": state.finish_reason,
        "raw_finish_reason": state.raw_finish_reason, "last_seq": state.last_seq,
        "upstream_requests": state.upstream_requests, "error": state.error,
        "usage": state.usage, "usage_missing": state.usage_missing,
        "provider_id": state.provider_id, "background": meta.background,
    }


def _shown_error(error: dict[str, Any] | None) -> str:
    if not error:
        return ""
    text = f"{error.get('type') or 'error'}: {error.get('message') or ''}".rstrip(": ")
    return text if len(text) <= ERROR_WIDTH else text[: ERROR_WIDTH - 1] + "…"


def _shown_usage(usage: dict[str, Any] | None) -> str:
    """``in/out`` tokens; ``none`` when the stream has no usage (never 0: unknown is not 0)."""
    if usage is None:
        return "none"
    return "/".join("?" if usage.get(name) is None else str(usage[name])
                    for name in ("input_tokens", "output_tokens"))


def _local(seconds: float) -> str:
    return datetime.fromtimestamp(seconds).strftime("%Y-%m-%d %H:%M:%S")


async def _listed(journal: Journal, arguments: argparse.Namespace) -> tuple[
        list[StreamRecord], bool]:
    """Up to ``--limit`` streams, a journal page at a time; and whether more are stored."""
    now = time.time()
    since = None if arguments.since is None else parse_time(arguments.since, now)
    until = None if arguments.until is None else parse_time(arguments.until, now, "--until")
    statuses = _statuses(arguments.status)
    found: list[StreamRecord] = []
    cursor: str | None = None
    while len(found) < arguments.limit:
        page = await journal.list_streams(status=statuses, since=since, until=until,
                                          limit=min(MAX_PAGE, arguments.limit - len(found)),
                                          cursor=cursor)
        found += page.streams
        cursor = page.next_cursor
        if cursor is None:
            break
    return found, cursor is not None


def _print_table(records: list[StreamRecord], more: bool) -> None:
    out = console()
    if not records:
        out.print("no streams")
        return
    table = Table(box=box.SIMPLE, pad_edge=False)
    # tokens: input/output, as the upstream last reported them
    for heading in ("id", "created", "dialect", "status", "finish", "seq", "requests",
                    "tokens"):
        table.add_column(heading, no_wrap=True, justify="right" if heading in (
            "seq", "requests", "tokens") else "left")
    table.add_column("error", overflow="fold")
    for record in records:
        meta, state = record.meta, record.state
        style = "" if state.status in (Status.COMPLETED, Status.STREAMING, Status.PENDING) \
            else "yellow"
        table.add_row(meta.stream_id, _local(meta.created), meta.dialect, state.status.value,
                      state.finish_reason or "", str(state.last_seq),
                      str(state.upstream_requests), _shown_usage(state.usage),
                      Text(_shown_error(state.error)),
                      style=style)
    out.print(table)
    out.print(f"{len(records)} stream(s), newest first" + (", more stored (--limit)"
                                                           if more else ""))


async def _export(journal: Journal, stream_id: str, output: str | None, store: str) -> None:
    record = await journal.get(stream_id, with_text=False)
    if record is None:
        raise CLIError(f"no stream {stream_id} in {shown_store(store)} (unknown or purged)",
                       EXIT_INPUT)
    try:
        sink: IO[bytes] = sys.stdout.buffer if output in (None, "-") else Path(
            str(output)).open("wb")
    except OSError as err:
        raise CLIError(f"cannot write {output}: {err.strerror}", EXIT_INPUT) from err
    try:
        async for chunk in capture_lines(journal, record):
            sink.write(chunk)
        sink.flush()
    finally:
        if sink is not sys.stdout.buffer:
            sink.close()


async def _run(arguments: argparse.Namespace) -> int:
    journal = _journal(arguments.store)
    shown = shown_store(arguments.store)
    try:
        try:
            await journal.open()
            if arguments.capture is not None:
                await _export(journal, arguments.capture, arguments.output, arguments.store)
                return EXIT_OK
            records, more = await _listed(journal, arguments)
        except CLIError:
            raise
        except Exception as err:  # a missing file, a foreign schema, an unreachable Redis
            raise CLIError(f"cannot read store {shown}: {type(err).__name__}: {err}",
                           EXIT_NETWORK) from err
    finally:
        if journal.is_open or isinstance(journal, RedisJournal):
            await journal.close()
    if arguments.json:
        for record in records:
            print(json.dumps(row_of(record), ensure_ascii=False))
    else:
        _print_table(records, more)
    return EXIT_OK


def run(arguments: argparse.Namespace) -> int:
    if arguments.limit < 1:
        raise CLIError(f"--limit must be at least 1, not {arguments.limit}", EXIT_USAGE)
    if arguments.output is not None and arguments.capture is None:
        raise CLIError("-o/--output goes with --capture ID", EXIT_USAGE)
    # Checked before the store is opened: bad arguments are exit 2, whatever the store.
    now = time.time()
    for option in ("since", "until"):
        value = getattr(arguments, option)
        if value is not None:
            parse_time(value, now, f"--{option}")
    _statuses(arguments.status)
    return asyncio.run(_run(arguments))
