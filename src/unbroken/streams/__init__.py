"""The stream engine that the proxy and ``unbroken.server`` share, knowing nothing of providers'
HTTP endpoints: the journal (``journal/``: memory, SQLite, Redis Streams, with live tails),
access (``access.py``: stream ids, tokens, credential hashes) and structured logs without
secrets (``logs.py``).
"""
