"""The stream engine that the proxy and ``unbroken.server`` share, knowing nothing of providers'
HTTP endpoints: the journal (``journal/``: memory, SQLite, Redis Streams, with live tails),
access (``access.py``: stream ids, tokens, credential hashes), idempotent creates
(``idempotency.py``), live-stream slots (``limits.py``), a producer's outcome as journaled
values (``stream_outcome.py``) and structured logs without secrets (``logs.py``).
"""
