"""``python -m unbroken.proxy --host 127.0.0.1 --port 8000 --upstream ORIGIN --store URL``.

``main(argv)`` parses the flags and serves the proxy under uvicorn until interrupted; the
``unbroken proxy`` command calls the same function. ``--cors-origin ORIGIN`` (repeatable) lets
pages of that web origin call the proxy from a browser; without it there are no CORS headers.
``--workers N`` serves with N processes on the port (``workers.py``).
"""

from __future__ import annotations

import argparse
import asyncio
import re
import socket
import sys
from collections.abc import Sequence
from importlib.util import find_spec

from ..streams.journal import journal_for, shown_store
from .app import create_app
from .config import DEFAULT_ORIGINS, PROVIDERS, ProxyConfig, cors_origin, parse_duration
from .shutdown import FLUSH_MARGIN_S, serve
from .workers import MEMORY_REFUSED, listening, supervise, watch_parent

EXIT_JOURNAL = 4  # as the CLI's network failures: the journal's store cannot be reached
EXIT_LISTEN = 4  # as the CLI's network failures: a port of --workers cannot be bound

__all__ = ["build_parser", "config_from_args", "main"]


def _duration(text: str) -> float:
    try:
        return parse_duration(text)
    except ValueError as error:
        raise argparse.ArgumentTypeError(str(error)) from None


_SIZE = re.compile(r"([0-9]+)\s*([kmg]?)(?:i?b)?", re.IGNORECASE)
_UNIT_BYTES = {"": 1, "k": 2**10, "m": 2**20, "g": 2**30}


def _size(text: str) -> int:
    """Bytes from ``1048576``, ``512k``, ``32m``, ``1GiB``."""
    match = _SIZE.fullmatch(text.strip())
    if match is None or int(match.group(1)) < 1:
        raise argparse.ArgumentTypeError(f"not a size: {text!r} (use e.g. 1048576, 512k, 32m)")
    return int(match.group(1)) * _UNIT_BYTES[match.group(2).lower()]


def _cors_origin(text: str) -> str:
    try:
        return cors_origin(text)
    except ValueError as error:
        raise argparse.ArgumentTypeError(str(error)) from None


def _count(text: str) -> int:
    if not text.isdigit() or int(text) < 1:
        raise argparse.ArgumentTypeError(f"not a positive integer: {text!r}")
    return int(text)


def build_parser(prog: str = "unbroken proxy") -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog=prog,
        description="A resumable streaming proxy for OpenAI, Anthropic, Gemini, Ollama and "
                    "Bedrock.",
    )
    parser.add_argument("--host", default="127.0.0.1")
    parser.add_argument("--port", type=int, default=8000)
    parser.add_argument("--upstream", metavar="ORIGIN",
                        help="origin for every provider (scheme://host[:port])")
    for provider in PROVIDERS:
        parser.add_argument(f"--{provider}", metavar="ORIGIN",
                            help=f"origin for {provider} (default {DEFAULT_ORIGINS[provider]})")
    parser.add_argument("--store", default="sqlite:///unbroken.db",
                        help="journal: sqlite:///path.db (default unbroken.db), memory://, or "
                             "redis://host:6379/0 shared by several proxy replicas")
    parser.add_argument("--on-disconnect", choices=("keep", "cancel"), default="keep",
                        help="when the last reader leaves: keep generating (default) or cancel")
    parser.add_argument("--cancel-after", type=_duration, metavar="SECONDS",
                        help="cancel a generation after this long with no reader attached")
    parser.add_argument("--retention", type=_duration, default=24 * 3600.0,
                        metavar="DURATION", help="how long ended streams are kept (default 24h)")
    parser.add_argument("--max-body", type=_size, default=32 * 2**20, metavar="BYTES",
                        help="largest streaming request body (default 32m); larger: 413")
    parser.add_argument("--max-streams-per-key", type=_count, metavar="N",
                        help="live streams per credential; more: 429 (default no limit)")
    parser.add_argument("--max-streams", type=_count, metavar="N",
                        help="live streams in all; more: 503 with Retry-After (default no limit)")
    parser.add_argument("--max-event-size", type=_size, metavar="BYTES",
                        help="largest upstream frame; larger ends the stream failed (16m)")
    parser.add_argument("--idle-close", type=_duration, default=75.0, metavar="SECONDS",
                        help="close idle downstream keep-alive connections after (default 75s)")
    parser.add_argument("--shutdown-grace", type=_duration, default=5.0, metavar="SECONDS",
                        help="on SIGTERM, time live streams get to finish (default 5s)")
    parser.add_argument("--keepalive", type=_duration, default=15.0, metavar="SECONDS",
                        help="a keep-alive this long after a stream's last frame (default 15s)")
    parser.add_argument("--lease-ttl", type=_duration, default=15.0, metavar="SECONDS",
                        help="a producer lease lasts this long unless renewed (default 15s)")
    parser.add_argument("--lease-renew", type=_duration, default=5.0, metavar="SECONDS",
                        help="renew this process's leases this often (default 5s)")
    parser.add_argument("--no-request-usage", action="store_false", dest="request_usage",
                        help="do not add stream_options.include_usage to OpenAI chat requests "
                             "that did not set it (then such streams journal no usage)")
    parser.add_argument("--cors-origin", type=_cors_origin, action="append", default=[],
                        metavar="ORIGIN", dest="cors_origins",
                        help="let browser pages of this origin (scheme://host[:port], or *) "
                             "call the proxy; repeatable (default: none, same origin only)")
    parser.add_argument("--otel", action="store_true",
                        help="record each stream as an OpenTelemetry GenAI span and metrics, "
                             "through the providers the OpenTelemetry SDK sets up (e.g. run "
                             "under opentelemetry-instrument); needs unbroken[otel]")
    parser.add_argument("--otel-chunk-intervals", choices=("mean", "each"), default=None,
                        help="with --otel: time per output chunk as one point per stream "
                             "(mean, the default) or one per output frame (each: as the GenAI "
                             "conventions define it, more CPU per frame)")
    parser.add_argument("--log-level", default="info",
                        choices=("critical", "error", "warning", "info", "debug"))
    parser.add_argument("--workers", type=_count, default=1, metavar="N",
                        help="serve with N processes on the port, sharing the journal "
                             "(sqlite or redis; default 1)")
    parser.add_argument("--worker-ports", type=_count, metavar="BASE",
                        help="with --workers: worker i also listens alone on port BASE+i "
                             "(its own /metrics and /healthz)")
    # A worker started by the parent: the listening sockets it inherits (not for users).
    parser.add_argument("--worker-socket", type=int, action="append", default=[],
                        dest="worker_sockets", help=argparse.SUPPRESS)
    return parser


def config_from_args(args: argparse.Namespace) -> ProxyConfig:
    origins = {}
    for provider in PROVIDERS:
        origin = getattr(args, provider) or args.upstream
        if origin:
            origins[provider] = origin
    return ProxyConfig(
        origins=origins,
        store=args.store,
        on_disconnect=args.on_disconnect,
        cancel_after=args.cancel_after,
        retention=args.retention,
        max_body=args.max_body,
        max_streams=args.max_streams,
        max_streams_per_key=args.max_streams_per_key,
        idle_close=args.idle_close,
        shutdown_grace=args.shutdown_grace,
        keepalive=args.keepalive,
        lease_ttl=args.lease_ttl,
        lease_renew=args.lease_renew,
        cors_origins=tuple(args.cors_origins),
        request_usage=args.request_usage,
        otel=args.otel,
        otel_chunk_intervals=args.otel_chunk_intervals or "mean",
        **({} if args.max_event_size is None else {"max_event_size": args.max_event_size}),
    )


def main(argv: Sequence[str] | None = None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    try:
        config = config_from_args(args)
    except ValueError as error:
        parser.error(str(error))
    if args.otel_chunk_intervals is not None and not config.otel:
        parser.error("--otel-chunk-intervals needs --otel")
    if config.otel and find_spec("opentelemetry") is None:
        parser.error("--otel needs opentelemetry-api: pip install 'unbroken[otel]'")
    if args.worker_sockets:  # a worker of ``--workers``: the parent checked the journal
        watch_parent()
        sockets = [socket.socket(fileno=fd) for fd in args.worker_sockets]
        serve(create_app(config), host=args.host, port=args.port, log_level=args.log_level,
              sockets=sockets)
        return 0
    if args.workers > 1 and config.store == "memory://":
        parser.error(MEMORY_REFUSED)
    failure = asyncio.run(journal_failure(config))
    if failure is not None:
        print(f"unbroken: {failure}", file=sys.stderr)
        return EXIT_JOURNAL
    if args.workers > 1:
        try:
            per_worker = listening(args.host, args.port, args.workers, args.worker_ports)
        except OSError as error:
            print(f"unbroken: cannot listen on {args.host}: {error.strerror or error}",
                  file=sys.stderr)
            return EXIT_LISTEN
        return supervise(per_worker, list(argv if argv is not None else sys.argv[1:]),
                         log_level=args.log_level,
                         stop_after=config.shutdown_grace + FLUSH_MARGIN_S)
    serve(create_app(config), host=args.host, port=args.port, log_level=args.log_level)
    return 0


async def journal_failure(config: ProxyConfig) -> str | None:
    """Open and close the journal once before serving: a store that cannot be opened (a Redis
    that does not answer, a SQLite path that cannot be written) is one line, not a traceback
    from the server's startup."""
    journal = journal_for(config.store)
    try:
        await journal.open()
    except Exception as error:  # any reason at all: it is reported, and nothing is served
        return f"cannot open the journal {shown_store(config.store)}: {error}"
    await journal.close()
    return None


if __name__ == "__main__":
    sys.exit(main())
