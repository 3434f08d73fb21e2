"""Reading the normalized format back in tests: every event, checked, folded into one outcome."""

from __future__ import annotations

import json
from typing import Any

from unbroken import SSEDecoder
from unbroken.normalized_sse import KINDS


def fold_normalized(body: bytes, stream_id: str) -> dict[str, Any]:
    """Text, reasoning, tool-call arguments by index, the seqs sent, and the ``end`` data."""
    decoder = SSEDecoder()
    events = decoder.receive_data(body) + decoder.receive_eof()
    out: dict[str, Any] = {"text": "", "reasoning": "", "calls": {}, "seqs": [], "end": None,
                           "statuses": []}
    for event in events:
        assert event.event in KINDS, event
        assert event.block_id is not None, "every event carries its id"
        named, _, seq = event.block_id.rpartition(":")
        assert named == stream_id
        assert out["end"] is None, "nothing may follow the end"
        data = json.loads(event.data)
        if event.event == "end":
            out["end"] = data
            continue
        out["seqs"].append(int(seq))
        out["text"] += data.get("text", "")
        out["reasoning"] += data.get("reasoning", "")
        if "status" in data:
            out["statuses"].append(data["status"])
        for call in data.get("tool_calls", ()):
            entry = out["calls"].setdefault(call["index"], {"arguments": ""})
            for key in ("id", "name"):
                if key in call:
                    entry[key] = call[key]
            entry["arguments"] += call["arguments"]
    return out
