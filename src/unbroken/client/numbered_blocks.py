"""The seq of a run of whole SSE blocks as an unbroken proxy writes them, by byte searches alone.

``ResumingTransport`` must hand an SDK whole frames and know the last one's seq; decoding each
frame into an event for that costs about what a plain client spends per frame in all. The proxy's
numbered form is narrow (``proxy/wire.py``): LF line ends only, each frame one block with one
``id: <stream_id>:<seq>`` line (after ``retry:``/``event:``/comment lines, before its ``data:``
lines), seqs 1, 2, 3 ... without gaps. A run of such blocks is read here with a few searches at
its two ends, whatever its length, and no object per frame.

What is not that form (a first or last block without the stream's id, a first id that is not
the next seq; a CR anywhere, which the caller rules out first) gets ``None``: the caller reads
it with ``SSEDecoder``, the one home of the full CR/LF rule. In LF-only text that rule reduces
to "an LF LF ends a block", which is all that is used here.
"""

from __future__ import annotations

from ..resumption import event_id_prefix, valid_seq

__all__ = ["BLOCK_END", "NumberedBlocks"]

BLOCK_END = b"\n\n"
"""Where a block ends in the proxy's form (LF line ends, then a blank line)."""


class NumberedBlocks:
    """Reads runs of whole blocks of one stream (``stream_id``) for their last seq."""

    __slots__ = ("_head", "_line")

    def __init__(self, stream_id: str) -> None:
        # An id line with the LF before it: the same bytes inside a ``data:`` line are data.
        self._line = b"\nid: " + event_id_prefix(stream_id).encode()
        self._head = self._line[1:]  # an id line that opens a run

    def last_seq(self, run: bytes, after: int) -> int | None:
        """The seq of the last frame in ``run``, or ``None`` if ``run`` is not numbered frames
        from ``after + 1`` on in the proxy's form.

        ``run`` is whole blocks (it ends at a block end and starts at a block start, where its
        first line begins at offset 0) with no CR in it. Checked: the first block has an id of
        the stream naming ``after + 1``; the last block has one naming a later seq. The ids
        between are the proxy's to number (1, 2, 3 ... without gaps, its invariant): counting
        them would cost more than everything else here together, and the seq a resume needs is
        the last one handed on, read from the last block itself. A block without an id between
        two numbered ones is handed on as the decoder would hand it on; one at the end (the
        proxy's own notice, which it never numbers) fails the last check.
        """
        line = self._line
        if run.startswith(self._head):
            first = len(self._head)  # where the first id's seq begins
        else:
            at = run.find(line)
            if at < 0:
                return None  # no frame of this stream
            first = at + len(line)
        if first > run.find(BLOCK_END):
            return None  # the first block has no id of this stream
        if run[first : run.find(b"\n", first)] != b"%d" % (after + 1):
            return None
        at = run.rfind(line)
        last = at + len(line) if at >= 0 else first
        if run.find(BLOCK_END, last) != len(run) - len(BLOCK_END):
            return None  # a block without an id ends the run
        digits = run[last : run.find(b"\n", last)].decode("latin-1")
        if not valid_seq(digits):
            return None
        seq = int(digits)
        return seq if seq > after else None
