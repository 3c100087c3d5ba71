"""TextStream: UTF-8 hold-back, stop strings across token boundaries, draft provenance."""

from __future__ import annotations

from app.engine.text import TextChunk, TextStream


def _run(stream: TextStream, pieces: list[tuple[bytes, bool]]) -> list[list[TextChunk]]:
    out = [stream.push(p, d) for p, d in pieces]
    out.append(stream.flush())
    return out


def test_multibyte_characters_split_across_tokens_are_held_back() -> None:
    smile = "😀".encode()  # 4 bytes
    zhong = "中".encode()  # 3 bytes
    pieces = [(smile[:1], False), (smile[1:3], False), (smile[3:], False),
              (zhong[:2], True), (zhong[2:] + b"!", True)]
    s = TextStream()
    steps = _run(s, pieces)
    assert [c.text for c in steps[0] + steps[1]] == []  # nothing while incomplete
    assert "".join(c.text for c in steps[2]) == "😀"
    assert steps[3] == []
    assert "".join(c.text for c in steps[4]) == "中!"
    assert s.text == "😀中!"
    assert "\ufffd" not in s.text


def test_stop_string_spanning_tokens_is_never_partially_emitted() -> None:
    s = TextStream(stop=("\nUser:",))
    released = []
    for piece in [b"Hello", b" there", b"\nU", b"se", b"r:", b" more"]:
        released += [c.text for c in s.push(piece, False)]
        assert "\nU" not in "".join(released)
    released += [c.text for c in s.flush()]
    assert "".join(released) == "Hello there"
    assert s.stopped
    assert s.text == "Hello there"


def test_text_that_only_starts_like_a_stop_string_is_emitted_in_full() -> None:
    s = TextStream(stop=("\nUser:",))
    released = []
    for piece in [b"a", b"\nUs", b"ually", b" yes"]:
        released += [c.text for c in s.push(piece, False)]
    # "\nUs" was held while it could still become "\nUser:", then released whole.
    assert "".join(released) == "a\nUsually yes"
    released += [c.text for c in s.flush()]
    assert "".join(released) == "a\nUsually yes"
    assert not s.stopped


def test_partial_stop_at_the_very_end_is_released_by_flush() -> None:
    s = TextStream(stop=("STOP",))
    got = [c.text for c in s.push(b"abcST", False)]
    assert "".join(got) == "abc"
    got += [c.text for c in s.flush()]
    assert "".join(got) == "abcST"


def test_stop_string_inside_one_token() -> None:
    s = TextStream(stop=("</s>",))
    got = [c.text for c in s.push(b"ok</s>tail", False)]
    assert "".join(got) == "ok"
    assert s.stopped
    assert s.push(b"later", False) == []
    assert s.flush() == []


def test_draft_provenance_is_kept_per_character_run() -> None:
    s = TextStream()
    chunks = s.push(b"ab", True) + s.push(b"c", False) + s.push(b"de", True) + s.flush()
    assert [(c.text, c.from_draft) for c in chunks] == [("ab", True), ("c", False), ("de", True)]


def test_a_character_cut_at_the_end_is_dropped_not_replaced() -> None:
    """A reply cut by max_tokens inside a multi-byte character: the
    incomplete bytes are not text; neither the stream nor the final text shows U+FFFD."""
    for cut in ("中".encode(), "😀".encode()):
        for n in range(1, len(cut)):
            s = TextStream()
            got = [c.text for c in s.push(b"x" + cut[:n], False)] + [c.text for c in s.flush()]
            assert "".join(got) == s.text == "x"
    s = TextStream()  # bytes that can never be UTF-8 in the middle still show as U+FFFD
    got = [c.text for c in s.push(b"a\xffb", False)] + [c.text for c in s.flush()]
    assert "".join(got) == "a\ufffdb"


def test_a_cut_reply_drops_a_held_back_start_of_a_stop_string() -> None:
    # Stop (or max_tokens) while "\nUser" of "\nUser:" is held back: it is not released,
    # so it is neither saved nor fed into the next prompt. A reply that ended by itself
    # releases it (above): it was text.
    for pieces in ([b" I want to eat bread.", b"\n", b"User"], [b" I want", b" to eat bread.\nUs", b"er"]):
        ts = TextStream(stop=["\nUser:"])
        out = [c.text for p in pieces for c in ts.push(p, False)]
        out += [c.text for c in ts.flush(cut=True)]
        assert "".join(out) == ts.text == " I want to eat bread."
        assert ts.push(b"more", False) == []  # nothing after the cut
    ts = TextStream(stop=["<end_of_turn>"])
    ts.push("ok ".encode(), True)
    ts.push(b"<end_of", False)
    assert [c.text for c in ts.flush(cut=True)] == [] and ts.text == "ok "
    ts = TextStream()  # without stop strings a cut drops nothing but an incomplete character
    ts.push("done \xe2\x9c".encode("latin-1"), False)
    assert "".join(c.text for c in ts.flush(cut=True)) == "" and ts.text == "done "


def test_a_draft_is_cut_before_the_token_that_would_end_the_reply() -> None:
    from app.engine.text import draft_length_before_end

    pieces = {1: b"}}", 2: b"\n", 3: b"Result", 4: b": ", 5: b"\nUs", 6: b"er:", 7: "中".encode()[:2],
              8: "中".encode()[2:], 9: b"<eot>"}
    piece, is_eog = pieces.__getitem__, (lambda t: t == 9)
    s = TextStream(stop=("\n",))
    s.push(b'{"a": 1', False)
    assert s.stop_within([b"}}", b"\n", b"x"]) == 2  # nothing pushed: asking twice agrees
    assert s.stop_within([b"}}", b"\n", b"x"]) == 2 and s.text == '{"a": 1' and not s.stopped
    # the token that completes the stop string is the pass's own sample: not verified
    assert draft_length_before_end([1, 2, 3, 4], s, piece, is_eog) == 1
    assert draft_length_before_end([1, 9, 2, 3], s, piece, is_eog) == 1  # EOG first
    assert draft_length_before_end([1, 3, 4], s, piece, is_eog) == 3  # no end: all of it
    assert draft_length_before_end([2], s, piece, is_eog) == 0
    assert draft_length_before_end([], s, piece, is_eog) == 0
    # a stop string across the seam of held text and draft, and across draft tokens
    u = TextStream(stop=("\nUser:",))
    u.push(b"done\nUs", False)
    assert u.stop_within([b"er:", b"x"]) == 1
    v = TextStream(stop=("\nUser:",))
    v.push(b"done", False)
    assert draft_length_before_end([3, 5, 6, 3], v, piece, is_eog) == 2
    # an incomplete UTF-8 character held by the stream completes inside the draft
    w = TextStream(stop=("中",))
    w.push("中".encode()[:1], False)
    assert w.stop_within(["中".encode()[1:], b"x"]) == 1
    assert draft_length_before_end([7, 8, 3], TextStream(stop=("中",)), piece, is_eog) == 1
    # without stop strings only the end-of-generation token cuts
    assert draft_length_before_end([2, 2, 9, 2], TextStream(), piece, is_eog) == 2
