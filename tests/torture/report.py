"""Print the torture results (JSON Lines from ``tally.py``) as RELIABILITY.md's Markdown table.

    python -m tests.torture.report results.jsonl
"""

from __future__ import annotations

import json
import sys

from tests.torture.tally import COLUMNS


def table(rows: list[dict[str, object]]) -> str:
    head = ["test", *COLUMNS]
    lines = ["| " + " | ".join(name.replace("_", " ") for name in head) + " |",
             "|" + "---|" * len(head)]
    for row in rows:
        lines.append("| " + " | ".join(str(row.get(name, "")) for name in head) + " |")
    totals = ["**total**", *(str(sum(int(str(row.get(name, 0))) for row in rows))
                             for name in COLUMNS)]
    lines.append("| " + " | ".join(totals) + " |")
    notes = [f"- {row['test']}: {json.dumps(row['notes'], ensure_ascii=False)}"
             for row in rows if row.get("notes")]
    return "\n".join(lines + (["", *notes] if notes else []))


def main(argv: list[str]) -> int:
    if len(argv) != 1:
        print("usage: python -m tests.torture.report RESULTS.jsonl", file=sys.stderr)
        return 2
    with open(argv[0], encoding="utf-8") as source:
        rows = [json.loads(line) for line in source if line.strip()]
    print(table(rows))
    return 0


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))
