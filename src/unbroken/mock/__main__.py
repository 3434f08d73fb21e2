"""``python -m unbroken.mock --host 127.0.0.1 --port 8100``: run the mock under uvicorn."""

from __future__ import annotations

import argparse
import sys
from collections.abc import Sequence

from .server import serve

__all__ = ["main"]


def main(argv: Sequence[str] | None = None, *, prog: str = "python -m unbroken.mock") -> int:
    parser = argparse.ArgumentParser(
        prog=prog,
        description="A fake LLM upstream (OpenAI, Anthropic, Gemini, Ollama) with faults.",
    )
    parser.add_argument("--host", default="127.0.0.1", help="address to bind (default 127.0.0.1)")
    parser.add_argument("--port", type=int, default=8100, help="port to bind (default 8100)")
    arguments = parser.parse_args(argv)
    print(f"unbroken mock upstream on http://{arguments.host}:{arguments.port}", file=sys.stderr)
    serve(arguments.host, arguments.port)
    return 0


if __name__ == "__main__":
    sys.exit(main())
