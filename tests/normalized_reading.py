"""Reading the normalized format back in tests: every event, checked, folded into one outcome."""

from __future__ import annotations

import json
from typing import Any

from unbroken import SSEDecoder
from unbroken.normalized_sse import KINDS


def fold_normalized(body: bytes, stream_id: str) -> dict[str, Any]:
    """Text, reasoning, tool calls (keyed by arrival: a delta belongs to the call its id names,
    else to the latest call at its index), the seqs sent, and the ``end`` data."""
    decoder = SSEDecoder()
    events = decoder.receive_data(body) + decoder.receive_eof()
    out: dict[str, Any] = {"text": "", "reasoning": "", "calls": {}, "seqs": [], "end": None,
                           "statuses": []}
    by_id: dict[str, dict[str, Any]] = {}
    at_index: dict[int, dict[str, Any]] = {}
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
            entry = by_id.get(call.get("id")) or at_index.get(call["index"])
            if entry is None or call.get("id") not in (None, entry.get("id")):
                entry = out["calls"][len(out["calls"])] = {"arguments": ""}
                at_index[call["index"]] = entry
            if "id" in call:
                by_id.setdefault(call["id"], entry)
            for key in ("id", "name"):
                if key in call:
                    entry[key] = call[key]
            entry["arguments"] += call["arguments"]
    return out
