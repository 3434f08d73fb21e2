"""Run any ASGI app under a real uvicorn server in a thread, on a free port of 127.0.0.1.

    with serve_in_thread(app) as base_url:
        httpx2.get(base_url + "/path")

The tests use the same helper as ``unbroken demo`` (modelled on httpx's ``tests/conftest.py``
``serve_in_thread``): the socket is bound before the server starts, so the port cannot be taken
in between, and the server stops when the block ends.
"""

from unbroken.cli.serving import serve_in_thread

__all__ = ["serve_in_thread"]
