"""The seq of a run of whole SSE blocks as an unbroken proxy writes them, by byte searches alone.

``ResumingTransport`` must hand an SDK whole frames and know the last one's seq; decoding each
frame into an event for that costs about what a plain client spends per frame in all. The proxy's
numbered form is narrow (``proxy/wire.py``): LF line ends only, each frame one block with one
``id: <stream_id>:<seq>`` line (after ``retry:``/``event:``/comment lines, before its ``data:``
lines), seqs 1, 2, 3 ... without gaps. A run of such blocks is read here with a few searches at
its two ends, whatever its length, and no object per frame: the bytes between are never
touched (a scan of every byte read costs more than the rest together, the bytes being cold).

An LF LF ends a block under the full CR/LF rule too (the second LF is a blank line whatever
ended the line before it), so a run cut there is whole blocks even if a CR hides in it. A CR
changes which id is read only before the first id line and in the last block, where the seq
comes from: there it gets ``None``, as does anything else not in that form (a first or last
block without the stream's id, a first id that is not the next seq). The caller then reads the
bytes with ``SSEDecoder``, the one home of the full rule.
"""

from __future__ import annotations

from ..resumption import event_id_prefix, seq_of

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

        ``run`` is whole blocks: it ends at an LF LF and starts at a block start, where its
        first line begins at offset 0. Checked: the first block has an id of the stream naming
        ``after + 1``; the last block has one naming a later seq, and no CR (a CR in an earlier
        block can only split it into a block without an id among numbered ones, below). The
        ids between are the proxy's to number (1, 2, 3 ... without gaps, its invariant):
        counting them would cost more than everything else here together, and the seq a
        resume needs is the last one handed on, read from the last block itself. A block
        without an id between two numbered ones is handed on as the decoder would hand it on;
        one at the end (the proxy's own notice, which it never numbers) fails the last check.
        """
        line = self._line
        end = len(run) - len(BLOCK_END)
        if run.startswith(self._head + b"%d\n" % (after + 1)):  # the proxy's own form
            # One frame, as reads at a model's pace bring them (else read on, below).
            if run.find(BLOCK_END) == end and run.find(b"\r") < 0 and run.find(line) < 0:
                return after + 1
        elif not self._first(run, after):
            return None
        at = run.rfind(line, 0, end)
        if at >= 0:
            last = at + len(line)
        elif run.startswith(self._head):
            last = len(self._head)
        else:
            return None
        if run.find(BLOCK_END, last) != end or run.find(b"\r", last) >= 0:
            return None  # a block without an id ends the run, or the last block has a CR
        seq = seq_of(run[last : run.find(b"\n", last)])
        return seq if seq is not None and seq > after else None

    def _first(self, run: bytes, after: int) -> bool:
        """Whether the first block of ``run`` is the frame ``after + 1``, its id line after
        others (``retry:``, ``event:``, a comment) without a CR before it."""
        first_end = run.find(BLOCK_END)
        if run.startswith(self._head):
            first = len(self._head)  # where the first id's seq begins
        else:
            at = run.find(self._line, 0, first_end)
            if at < 0:
                return False  # the first block has no id of this stream
            first = at + len(self._line)
        return (run.find(b"\r", 0, first) < 0
                and run[first : run.find(b"\n", first)] == b"%d" % (after + 1))
