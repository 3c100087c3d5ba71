"""Turning sampled tokens into streamed text: UTF-8 hold-back and stop strings.

Tokens carry bytes, not characters: an emoji or a CJK character is often split across two
or three byte-fallback tokens, and a stop string ("\\nUser:") usually spans several
tokens. :class:`TextStream` takes token pieces as they are accepted and releases text
only when it is final: incomplete UTF-8 sequences are held back (never U+FFFD; a
character still incomplete when the reply ends is dropped), and text that could be the
start of a stop string is held until it either completes the stop string (then it is cut
there and never emitted) or stops matching (then it is emitted in full). Every released chunk carries whether it came from an
accepted draft, so the chat view can tint it.
"""

from __future__ import annotations

import codecs
from collections.abc import Callable, Sequence
from dataclasses import dataclass


@dataclass(frozen=True, slots=True)
class TextChunk:
    """A run of final text. ``from_draft``: every character came from accepted drafts."""

    text: str
    from_draft: bool


class TextStream:
    """Incremental bytes → text with stop-string matching across token boundaries.

    Args:
        stop: stop strings; the reply ends *before* the first occurrence of any of them.

    Use :meth:`push` for each accepted token piece, then :meth:`flush` once at the end.
    The concatenation of all released chunks equals the final text.
    """

    def __init__(self, stop: Sequence[str] = ()) -> None:
        self._decoder = codecs.getincrementaldecoder("utf-8")(errors="replace")
        self._stop = [s for s in stop if s]
        self._max_stop = max((len(s) for s in self._stop), default=0)
        # Decoded text not yet released, with per-character draft provenance as runs.
        self._pending = ""
        self._runs: list[tuple[int, bool]] = []  # (n_chars, from_draft)
        self.stopped = False
        self._released: list[str] = []  # everything released so far, in pieces

    def push(self, piece: bytes, from_draft: bool) -> list[TextChunk]:
        """Add one token's bytes; return the text that became final (maybe none).

        After a stop string matched (``stopped`` is True) further pushes release nothing.
        """
        if self.stopped:
            return []
        decoded = self._decoder.decode(piece)
        if decoded:
            self._append(decoded, from_draft)
        return self._release(final=False)

    def flush(self, *, cut: bool = False) -> list[TextChunk]:
        """End of generation: release everything still held.

        Bytes of a character that never completed (a reply cut by ``max_tokens`` or a
        stop inside a multi-byte character) are dropped, not turned into U+FFFD: they are
        not text, and the next reply's prompt must not carry a replacement character.

        Args:
            cut: the reply was cut before it ended by itself (Stop, or ``max_tokens``).
                Text held back as the possible start of a stop string (``"\nUser"`` of
                ``"\nUser:"``) is then dropped as well: the model was most likely writing
                the stop string, and a saved reply ending in it would feed it into the
                next prompt. (A reply that ended by itself releases it: it was text.)
        """
        if self.stopped:
            return []
        self._decoder.reset()  # discards the incomplete sequence it holds
        if cut and self._stop:
            keep = len(self._pending) - self._partial_stop_len(self._pending)
            self.stopped = True  # nothing after this
            chunks = self._take(keep) if keep > 0 else []
            self._pending, self._runs = "", []
            return chunks
        return self._release(final=True)

    @property
    def has_stop_strings(self) -> bool:
        return bool(self._stop)

    def stop_within(self, pieces: Sequence[bytes]) -> int | None:
        """How many of ``pieces``, pushed next, would end the reply at a stop string.

        Returns the 1-based index of the piece that completes a stop string, or None
        when none does (or there are none, or the stream has stopped). Nothing is pushed
        (:func:`draft_length_before_end` uses it to cut drafts).
        """
        if not self._stop or self.stopped:
            return None
        decoder = codecs.getincrementaldecoder("utf-8")(errors="replace")
        decoder.setstate(self._decoder.getstate())
        text = self._pending
        for j, piece in enumerate(pieces):
            start = max(0, len(text) - self._max_stop + 1)  # matches may span the seam
            text += decoder.decode(piece)
            if self._find_stop(text, start) >= 0:
                return j + 1
        return None

    def _find_stop(self, text: str, start: int = 0) -> int:
        """Where the first stop string in ``text[start:]`` begins, or −1."""
        return min((i for i in (text.find(s, start) for s in self._stop) if i >= 0), default=-1)

    def _append(self, text: str, from_draft: bool) -> None:
        self._pending += text
        if self._runs and self._runs[-1][1] == from_draft:
            n, f = self._runs[-1]
            self._runs[-1] = (n + len(text), f)
        else:
            self._runs.append((len(text), from_draft))

    def _release(self, *, final: bool) -> list[TextChunk]:
        pending = self._pending
        cut = len(pending)
        if self._stop:
            hit = self._find_stop(pending)
            if hit >= 0:
                self.stopped = True
                cut = hit
            elif not final:
                cut = len(pending) - self._partial_stop_len(pending)
        if cut <= 0 and not self.stopped:
            return []
        chunks = self._take(cut)
        if self.stopped:
            self._pending = ""
            self._runs = []
        return chunks

    def _partial_stop_len(self, text: str) -> int:
        """Length of the longest suffix of ``text`` that is a proper prefix of a stop string."""
        best = 0
        upto = min(len(text), self._max_stop - 1)
        for n in range(1, upto + 1):
            suffix = text[-n:]
            if any(s.startswith(suffix) for s in self._stop):
                best = n
        return best

    def _take(self, n: int) -> list[TextChunk]:
        out: list[TextChunk] = []
        left = n
        while left > 0 and self._runs:
            run_len, from_draft = self._runs[0]
            k = min(run_len, left)
            out.append(TextChunk(self._pending[:k], from_draft))
            self._pending = self._pending[k:]
            left -= k
            if k == run_len:
                self._runs.pop(0)
            else:
                self._runs[0] = (run_len - k, from_draft)
        self._released.extend(c.text for c in out)
        return out

    @property
    def text(self) -> str:
        """Everything released so far (the reply's final text once flushed)."""
        return "".join(self._released)


def draft_length_before_end(
    drafts: Sequence[int],
    stream: TextStream,
    piece: Callable[[int], bytes],
    is_eog: Callable[[int], bool],
) -> int:
    """How many leading draft tokens are worth verifying, pushed after ``stream``: those
    before the first token that would end the reply (an end-of-generation token, or the
    token that completes a stop string); ``len(drafts)`` when none would.

    A pass samples one position more than it has draft tokens, so the token that ends
    the reply, where the target agrees, is that pass's own sample either way; verifying
    it as a draft token, or anything after it, costs batch positions whose samples are
    never used.

    Args:
        piece: a token's bytes (``LlamaModel.token_to_piece``).
        is_eog: whether a token ends generation (``LlamaModel.is_eog``).
    """
    n = len(drafts)
    for i, t in enumerate(drafts):
        if is_eog(t):
            n = i
            break
    if n and stream.has_stop_strings:
        end = stream.stop_within([piece(t) for t in drafts[:n]])
        if end is not None:
            n = end - 1
    return n
