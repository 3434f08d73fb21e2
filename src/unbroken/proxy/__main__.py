"""``python -m unbroken.proxy --host 127.0.0.1 --port 8000 --upstream ORIGIN --store URL``.

``main(argv)`` parses the flags and serves the proxy under uvicorn until interrupted; the
``unbroken proxy`` command calls the same function.
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Sequence

import uvicorn

from .app import create_app
from .config import DEFAULT_ORIGINS, PROVIDERS, ProxyConfig, parse_duration

__all__ = ["build_parser", "config_from_args", "main"]


def _duration(text: str) -> float:
    try:
        return parse_duration(text)
    except ValueError as error:
        raise argparse.ArgumentTypeError(str(error)) from None


def build_parser(prog: str = "unbroken proxy") -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog=prog,
        description="A resumable streaming proxy for OpenAI, Anthropic, Gemini and Ollama.",
    )
    parser.add_argument("--host", default="127.0.0.1")
    parser.add_argument("--port", type=int, default=8000)
    parser.add_argument("--upstream", metavar="ORIGIN",
                        help="origin for every provider (scheme://host[:port])")
    for provider in PROVIDERS:
        parser.add_argument(f"--{provider}", metavar="ORIGIN",
                            help=f"origin for {provider} (default {DEFAULT_ORIGINS[provider]})")
    parser.add_argument("--store", default="sqlite:///unbroken.db",
                        help="journal: sqlite:///path.db (default unbroken.db) or memory://")
    parser.add_argument("--on-disconnect", choices=("keep", "cancel"), default="keep",
                        help="when the last reader leaves: keep generating (default) or cancel")
    parser.add_argument("--cancel-after", type=_duration, metavar="SECONDS",
                        help="cancel a generation after this long with no reader attached")
    parser.add_argument("--retention", type=_duration, default=24 * 3600.0,
                        metavar="DURATION", help="how long ended streams are kept (default 24h)")
    parser.add_argument("--log-level", default="info",
                        choices=("critical", "error", "warning", "info", "debug"))
    return parser


def config_from_args(args: argparse.Namespace) -> ProxyConfig:
    origins = {}
    for provider in PROVIDERS:
        origin = getattr(args, provider) or args.upstream
        if origin:
            origins[provider] = origin
    return ProxyConfig(
        **origins,
        store=args.store,
        on_disconnect=args.on_disconnect,
        cancel_after=args.cancel_after,
        retention=args.retention,
    )


def main(argv: Sequence[str] | None = None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    try:
        config = config_from_args(args)
    except ValueError as error:
        parser.error(str(error))
    uvicorn.run(
        create_app(config),
        host=args.host,
        port=args.port,
        log_level=args.log_level,
        # Streams are long-lived: give live ones a moment to finish on shutdown.
        timeout_graceful_shutdown=5,
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
