"""Edge cases of the speculative loop, each on its own (synthetic F32 models).

EOG accepted mid-draft, max_tokens, a tiny n_ctx, multi-byte characters split across
tokens, stop strings across tokens, cancel, prefix reuse across turns, exactly one BOS,
the fallback when the KV cache cannot roll back, and malformed GGUFs.
"""

from __future__ import annotations

import logging
import struct
import threading
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path

import pytest

from app.engine.chat import ChatMessage
from app.engine.events import TextDelta
from app.engine.llama import DecodeAborted, LlamaContext, LlamaModel, _take_native_errors
from app.engine.reply import ReplyRecord
from app.engine.session import Session, SessionConfig
from app.errors import ContextOverflowError, ModelLoadError, TandemError
from app.options import SamplingParams, SpeculationConfig
from tests.engine.util import ReplayDrafter, check_invariants, install_drafter, run
from tests.synthetic import BOS, write_tiny_llama

GREEDY = SamplingParams(temperature=0.0, max_tokens=24)
PROMPT = [BOS, 300, 301, 302, 303, 304]


def open_session(path: Path, n_ctx: int = 256) -> Session:
    return Session.open(SessionConfig(target_path=path, n_ctx=n_ctx, n_threads=2))


@pytest.fixture(scope="module")
def session(tiny_target: Path) -> Iterator[Session]:
    s = open_session(tiny_target)
    yield s
    s.close()


@pytest.fixture(scope="module")
def plain_ids(session: Session) -> tuple[int, ...]:
    r = run(session, PROMPT, GREEDY)
    assert r.finished.reason == "length" and len(r.ids) == GREEDY.max_tokens
    return r.ids


def first_fresh_index(ids: tuple[int, ...], start: int) -> int:
    """First index ≥ start whose token does not occur earlier in ids."""
    for i in range(start, len(ids)):
        if ids[i] not in ids[:i]:
            return i
    raise AssertionError("no fresh token")


def test_eog_accepted_mid_draft_ends_the_reply_there(
    tiny_model_dir: Path, plain_ids: tuple[int, ...]
) -> None:
    # Same weights, but the vocabulary calls the third generated token EOS.
    j = first_fresh_index(plain_ids, 2)
    eog = plain_ids[j]
    path = write_tiny_llama(tiny_model_dir / f"tiny-eos{eog}.gguf", seed=0, eos_id=eog)
    with open_session(path) as s:
        drafter = ReplayDrafter(PROMPT, plain_ids)
        install_drafter(s, drafter)
        k = j + 3  # the draft goes past the EOG token
        r = run(s, PROMPT, GREEDY, SpeculationConfig(adaptive=False, mode="draft-model", draft_max=k))
    assert r.finished.reason == "stop"
    assert r.ids == plain_ids[:j]  # nothing at or after the EOG token is emitted
    st = r.stats
    assert st.rounds == 1
    # The drafts before the EOG were verified and accepted; the accepted EOG itself is
    # not a reply token and is not counted as an accepted draft token.
    assert st.verified == j and st.accepted == j
    assert st.acceptance_rate == 1.0 and st.mean_acceptance_length == j
    assert st.verified_at[j:] == (0,) * (k - j)  # nothing at or after the EOG counted
    assert st.emitted == j
    assert st.emitted == st.accepted + st.rounds - 1  # the round lost only its own token
    check_invariants(r, GREEDY.max_tokens)


def test_eog_accepted_as_the_only_draft_is_not_counted(
    tiny_model_dir: Path, plain_ids: tuple[int, ...]
) -> None:
    # α 100 % (1/1) next to τ 1.00 was an accepted end-of-turn token: a reply whose
    # only verified draft is the EOG has drafted nothing that counts.
    j = first_fresh_index(plain_ids, 2)
    eog = plain_ids[j]
    path = write_tiny_llama(tiny_model_dir / f"tiny-eos{eog}.gguf", seed=0, eos_id=eog)

    class EogOnlyDrafter(ReplayDrafter):
        def draft(self, context, n_max):  # type: ignore[no-untyped-def]
            done = len(context) - len(self.prompt)
            self.calls.append(n_max)
            self.forward_passes += 1
            return [eog] if done == j else []  # proposes only the EOG, at its position

    with open_session(path) as s:
        install_drafter(s, EogOnlyDrafter(PROMPT, plain_ids))
        r = run(s, PROMPT, GREEDY, SpeculationConfig(adaptive=False, mode="draft-model", draft_max=4))
    st = r.stats
    assert r.finished.reason == "stop" and r.ids == plain_ids[:j]
    # it is cut before verification (the pass's own sample is the EOG anyway) …
    assert st.proposed == 0
    assert st.verified == 0 and st.accepted == 0  # … and is not a reply token
    assert st.acceptance_rate is None
    # … and the pass that only sampled it emitted nothing: no round, no drafting round,
    # so τ is j tokens over j plain rounds, not below 1.
    assert st.draft_rounds == 0 and st.rounds == j
    assert st.mean_acceptance_length == 1.0
    check_invariants(r, GREEDY.max_tokens)


def test_max_tokens_is_never_exceeded(session: Session, plain_ids: tuple[int, ...]) -> None:
    drafter = ReplayDrafter(PROMPT, plain_ids)
    install_drafter(session, drafter)
    try:
        for max_tokens in (1, 2, 3, 5, 9):
            sp = GREEDY.model_copy(update={"max_tokens": max_tokens})
            r = run(session, PROMPT, sp, SpeculationConfig(adaptive=False, mode="draft-model", draft_max=4))
            assert r.ids == plain_ids[:max_tokens]
            assert r.stats.emitted == len(r.ids) == max_tokens
            assert r.finished.reason == "length"
            assert all(n <= max_tokens - 1 for n in drafter.calls[-r.stats.rounds :])
            check_invariants(r, max_tokens)
        # a 4-token draft with max_tokens 1: the one round drafts nothing
        r = run(session, PROMPT, GREEDY.model_copy(update={"max_tokens": 1}),
                SpeculationConfig(adaptive=False, mode="draft-model", draft_max=4))
        assert r.stats.verified == 0 and len(r.ids) == 1
    finally:
        del session._make_drafter


@pytest.mark.parametrize("mode", ["off", "prompt-lookup", "draft-model"])
def test_tiny_context_ends_with_length_not_a_crash(tiny_target: Path, mode: str) -> None:
    prompt = [BOS] + [300 + (i % 7) for i in range(40)]
    cfg = SessionConfig(
        target_path=tiny_target,
        draft_path=tiny_target if mode == "draft-model" else None,
        n_ctx=64,
        n_threads=2,
    )
    with Session.open(cfg) as s:
        sp = SamplingParams(temperature=0.0, max_tokens=500)
        r = run(s, prompt, sp, SpeculationConfig(adaptive=False, mode=mode, draft_max=8, ngram_min=1))  # type: ignore[arg-type]
        assert r.finished.reason == "length"
        assert r.finished.note and "context window" in r.finished.note
        # every position 0..63 is used at most once: prompt + reply - 1 ≤ n_ctx
        assert len(prompt) + len(r.ids) - 1 <= 64
        assert len(r.ids) == 64 - len(prompt) + 1
        check_invariants(r, 500)
        with pytest.raises(ContextOverflowError, match="context window"):
            list(s.generate([BOS] + [300] * 70, sp))


def test_a_full_context_after_a_drafters_fallback_keeps_both_notes(tiny_target: Path) -> None:
    """A reply that fell back to plain decoding (no draft model loaded) and then filled
    the context says both, the ending last, where the window reads it."""
    from app.engine.reply import ended_at_full_context

    prompt = [BOS] + [300 + (i % 7) for i in range(40)]
    with Session.open(SessionConfig(target_path=tiny_target, n_ctx=64, n_threads=2)) as s:
        r = run(s, prompt, SamplingParams(temperature=0.0, max_tokens=500),
                SpeculationConfig(adaptive=False, mode="draft-model", draft_max=8))
    assert r.finished.reason == "length" and r.finished.note is not None
    first, last = r.finished.note.split("\n")
    assert "draft" in first.lower() and "context window" in last
    assert ended_at_full_context(r.finished.note)
    # so it is not offered Continue (going on would only drop the conversation), while
    # a reply cut by its token limit, a stop or quitting the app is
    from app.engine.reply import can_continue

    assert not can_continue(r.finished.reason, r.finished.text, r.finished.note)
    assert all(can_continue(reason, "some text", "a drafter's note")
               for reason in ("length", "cancelled", "interrupted"))
    assert not can_continue("stop", "some text", None) and not can_continue("length", "", None)


def test_multibyte_characters_split_across_tokens_stream_whole(
    tiny_model_dir: Path, session: Session
) -> None:
    """Byte-fallback tokens spelling 😀中é, split across 9 tokens, stream as whole characters."""
    from gguf import TokenType

    text = "😀中é"
    raw = list(text.encode())  # 4 + 3 + 2 bytes, all distinct values
    ids = run(session, PROMPT, SamplingParams(temperature=0.0, max_tokens=64)).ids
    # a run of 9 distinct tokens, none of them seen before the run
    o = next(o for o in range(len(ids) - 9)
             if len(set(ids[o : o + 9])) == 9 and not set(ids[o : o + 9]) & set(ids[:o]))
    run_ids = list(ids[o : o + 9])
    used = set(ids[: o + 9])
    assert not used & {0, 1, 2}
    # A vocabulary permutation: the run's ids become the byte tokens of our text, every
    # other generated id a plain word, the remaining byte tokens go to unused ids.
    texts = [b"<unk>", b"<s>", b"</s>"] + [f"\u2581w{i}".encode() for i in range(3, 512)]
    types = [int(TokenType.UNKNOWN), int(TokenType.CONTROL), int(TokenType.CONTROL)] + [
        int(TokenType.NORMAL)] * 509
    free = iter(i for i in range(3, 512) if i not in used)
    for b in range(256):
        tid = run_ids[raw.index(b)] if b in raw else next(free)
        texts[tid] = f"<0x{b:02X}>".encode()
        types[tid] = int(TokenType.BYTE)
    path = write_tiny_llama(tiny_model_dir / "tiny-utf8.gguf", seed=0, tokens=texts,
                            token_types=types)
    expected = "".join(f" w{t}" for t in ids[:o]) + text
    with open_session(path) as s:
        for mode in ("off", "draft-model"):
            if mode == "draft-model":
                install_drafter(s, ReplayDrafter(PROMPT, ids))
            r = run(s, PROMPT, GREEDY.model_copy(update={"max_tokens": o + 9}),
                    SpeculationConfig(adaptive=False, mode=mode, draft_max=3))  # type: ignore[arg-type]
            assert r.ids == ids[: o + 9]
            assert r.finished.text == expected
            assert r.streamed == expected  # nothing dropped, nothing replaced
            assert "\ufffd" not in r.streamed
            # no streamed piece ends inside the emoji: 😀 arrives in one delta
            assert any("😀" in d.text for d in r.deltas)


def test_stop_string_across_tokens(session: Session, plain_ids: tuple[int, ...]) -> None:
    full = run(session, PROMPT, GREEDY)
    text = full.finished.text
    pieces = [session.target.token_to_piece(t).decode("utf-8", "replace") for t in plain_ids]
    # a stop string that starts inside token 3's piece and ends inside token 5's
    start = len("".join(pieces[:3])) + max(0, len(pieces[3]) - 2)
    end = len("".join(pieces[:5])) + 1
    stop = text[start:end]
    assert len(stop) >= 3
    first = text.find(stop)
    for mode in ("off", "prompt-lookup"):
        sp = GREEDY.model_copy(update={"stop": (stop,)})
        r = run(session, PROMPT, sp, SpeculationConfig(adaptive=False, mode=mode, ngram_min=1))  # type: ignore[arg-type]
        assert r.finished.reason == "stop"
        assert r.finished.text == text[:first]
        assert r.streamed == text[:first]
        check_invariants(r, GREEDY.max_tokens)
        # text that only starts like a stop string is released in full once it fails
        sp2 = GREEDY.model_copy(update={"stop": (stop + "\x07never",)})
        r2 = run(session, PROMPT, sp2, SpeculationConfig(adaptive=False, mode=mode, ngram_min=1))  # type: ignore[arg-type]
        assert r2.finished.text == text and r2.streamed == text
        assert r2.finished.reason == "length"


def test_no_draft_token_from_the_one_that_ends_the_reply_on_is_verified(
    session: Session, plain_ids: tuple[int, ...], monkeypatch: pytest.MonkeyPatch
) -> None:
    from app.engine import rounds as session_module

    pieces = [session.target.token_to_piece(t).decode("utf-8", "replace") for t in plain_ids]
    j = next(i for i in range(3, len(pieces)) if pieces[i].strip()
             and pieces[i] not in "".join(pieces[:i]) + pieces[i][:-1])
    sp = GREEDY.model_copy(update={"stop": (pieces[j],)})  # the reply ends at token j
    off = run(session, PROMPT, sp)
    assert off.finished.reason == "stop" and off.ids == plain_ids[: j + 1]
    spec = SpeculationConfig(adaptive=False, mode="draft-model", draft_max=8)

    def drafted() -> tuple[tuple[int, ...], str, int, list[int]]:
        drafter = ReplayDrafter(PROMPT, plain_ids)  # knows the reply and what follows it
        install_drafter(session, drafter)
        try:
            r = run(session, PROMPT, sp, spec)
        finally:
            del session._make_drafter  # back to the class's own
        check_invariants(r, sp.max_tokens)
        return r.ids, r.finished.text, r.stats.proposed, drafter.calls

    ids, text, proposed, _ = drafted()
    monkeypatch.setattr(session_module, "draft_length_before_end", lambda d, *a: len(d))
    ids_uncut, text_uncut, proposed_uncut, _ = drafted()
    # the same reply either way; with the cut, the token that completes the stop string
    # (the pass's own sample) and everything after it are not verified
    assert ids == ids_uncut == off.ids and text == text_uncut == off.finished.text
    assert proposed_uncut >= j + 1 and proposed == j


def test_cancel_takes_effect_within_one_round(session: Session) -> None:
    cancel = threading.Event()
    sp = SamplingParams(temperature=0.0, max_tokens=200)
    n_at_cancel = None
    finished = None
    for ev in session.generate(PROMPT, sp, SpeculationConfig(mode="off"), cancel):
        if isinstance(ev, TextDelta) and not cancel.is_set() and ev.n_tokens >= 3:
            cancel.set()
            n_at_cancel = ev.n_tokens
        elif isinstance(ev, ReplyRecord):
            finished = ev
    assert finished is not None and n_at_cancel is not None
    assert finished.reason == "cancelled"
    assert len(finished.token_ids) == n_at_cancel  # no round ran after the cancel
    assert finished.text == session.target.detokenize(finished.token_ids)


def test_cancel_from_another_thread(tiny_target: Path) -> None:
    cancel = threading.Event()
    started = threading.Event()

    def canceller() -> None:
        started.wait(30)
        cancel.set()

    t = threading.Thread(target=canceller)
    t.start()
    with open_session(tiny_target, n_ctx=8192) as s:
        deltas = []
        finished = None
        for ev in s.generate(PROMPT, SamplingParams(temperature=0.0, max_tokens=100_000),
                             None, cancel):
            if isinstance(ev, TextDelta):
                deltas.append(ev.text)
                started.set()
            elif isinstance(ev, ReplyRecord):
                finished = ev
    t.join()
    assert finished is not None and finished.reason == "cancelled"
    assert len(finished.token_ids) < 8000  # stopped long before the context filled
    assert "".join(deltas) == finished.text


def test_prefix_is_reused_across_turns(tiny_target: Path) -> None:
    with open_session(tiny_target) as s:
        first = run(s, PROMPT, GREEDY)
        assert first.stats.prefill_tokens == len(PROMPT) - 1
        follow = [*PROMPT, *first.ids, 310, 311, 312]
        second = run(s, follow, GREEDY)
        # only the tokens after the cached prefix were evaluated (the cache holds
        # the prompt and all but the last reply token)
        assert second.stats.prefill_tokens == len(follow) - 1 - (len(PROMPT) + len(first.ids) - 1)
        assert second.stats.prefill_tokens <= 4
    with open_session(tiny_target) as fresh:
        cold = run(fresh, follow, GREEDY)
    assert cold.ids == second.ids
    assert cold.stats.prefill_tokens == len(follow) - 1


def test_regenerate_after_editing_an_earlier_turn(tiny_target: Path) -> None:
    with open_session(tiny_target) as s:
        run(s, PROMPT, GREEDY)
        edited = [BOS, 300, 301, 399, 398]
        warm = run(s, edited, GREEDY)
    with open_session(tiny_target) as fresh:
        cold = run(fresh, edited, GREEDY)
    assert warm.ids == cold.ids


@pytest.mark.parametrize(
    "template",
    [
        "{{ bos_token }}{% for m in messages %}<{{ m.role }}>{{ m.content }}{% endfor %}<assistant>",
        "{% for m in messages %}<{{ m.role }}>{{ m.content }}{% endfor %}<assistant>",
        "{{ bos_token }}{{ bos_token }}{% for m in messages %}{{ m.content }}{% endfor %}",
    ],
    ids=["template-adds-bos", "template-without-bos", "template-adds-two"],
)
def test_prompt_starts_with_exactly_one_bos(tiny_model_dir: Path, template: str) -> None:
    path = write_tiny_llama(tiny_model_dir / f"tiny-tmpl-{abs(hash(template))}.gguf", seed=0,
                            chat_template=template)
    with open_session(path) as s:
        toks = s.chat_prompt([ChatMessage("user", "hello world")])
        assert toks[0] == BOS
        assert toks.count(BOS) == 1


def test_a_hostile_template_falls_back_at_load_with_a_note(tiny_model_dir: Path) -> None:
    """Sandbox escapes and blow-ups are found when the model loads (compile + a sample
    render under limits): the plain transcript is used and the note says why."""
    evil = "{{ ''.__class__.__mro__[1].__subclasses__() }}{{ 'x'|center(5000000000) }}"
    path = write_tiny_llama(tiny_model_dir / "tiny-evil.gguf", seed=0, chat_template=evil)
    with open_session(path) as s:
        assert s.chat_format.uses_fallback
        assert any("chat template cannot be used" in n for n in s.notes), s.notes
        assert s.chat_format.render([ChatMessage("user", "hi")]) == "User: hi\nAssistant:"


def test_base_model_without_template_uses_the_plain_transcript(tiny_target: Path) -> None:
    with open_session(tiny_target) as s:
        assert s.chat_format.uses_fallback
        text = s.chat_format.render(
            [ChatMessage("system", "Be brief."), ChatMessage("user", "hi")]
        )
        assert text == "Be brief.\n\nUser: hi\nAssistant:"
        assert s.chat_format.stop == ("\nUser:", "\nAssistant:")


def test_no_rollback_falls_back_to_plain_and_says_so(session: Session) -> None:
    session.rollback_supported = False
    try:
        r = run(session, PROMPT, GREEDY, SpeculationConfig(adaptive=False, mode="prompt-lookup"))
        assert r.stats.mode == "off" and r.stats.verified == 0
        assert r.finished.note and "roll back" in r.finished.note
        assert r.stats.fallback_reason == r.finished.note
        plain = run(session, PROMPT, GREEDY)
        assert r.ids == plain.ids
    finally:
        session.rollback_supported = True


def test_close_is_idempotent_and_generation_after_close_fails(tiny_target: Path) -> None:
    from app.errors import TandemError

    s = open_session(tiny_target)
    s.close()
    s.close()
    with pytest.raises(TandemError, match="unloaded"):
        list(s.generate(PROMPT, GREEDY))


_CHANGED_ON_DISK = """
import os, shutil, sys
from pathlib import Path
from app.engine.session import Session, SessionConfig
from app.errors import TandemError
from app.options import SamplingParams, SpeculationConfig
from tests.synthetic import BOS
src, tmp = Path(sys.argv[1]), Path(sys.argv[2])
greedy, prompt = SamplingParams(temperature=0.0, max_tokens=4), [BOS, 5, 6, 7]
for case in ("replaced", "deleted", "touched", "truncated"):
    path = tmp / f"{case}.gguf"
    shutil.copyfile(src, path)
    s = Session.open(SessionConfig(target_path=path, n_ctx=64, n_threads=1))
    list(s.generate(prompt, greedy))
    if case == "replaced":  # a download's rename: the mapping keeps the old file
        shutil.copyfile(src, tmp / "new.gguf")
        os.replace(tmp / "new.gguf", path)
    elif case == "deleted":
        path.unlink()
    elif case == "touched":  # a new time alone: the same bytes
        os.utime(path, (1, 1))
    else:
        with open(path, "r+b") as fh:
            fh.truncate(path.stat().st_size // 2)
    try:
        list(s.generate([BOS, 9, 8], greedy))
        print(case, "generated")
    except TandemError as exc:
        print(case, "refused:", exc)
    s.close()
# a draft model's file truncated: plain replies go on, and the draft can be unloaded
shutil.copyfile(src, tmp / "draft.gguf")
s = Session.open(SessionConfig(target_path=src, draft_path=tmp / "draft.gguf", n_ctx=64,
                               n_threads=1))
with open(tmp / "draft.gguf", "r+b") as fh:
    fh.truncate(1000)
list(s.generate(prompt, greedy, SpeculationConfig(mode="off")))
s.set_draft_model(None)
list(s.generate(prompt, greedy, SpeculationConfig(mode="prompt-lookup")))
print("draft truncated: plain replies and an unload went on")
s.close()
"""


def test_a_model_file_truncated_while_loaded_is_refused_not_read(
        tiny_target: Path, tmp_path: Path) -> None:
    """The weights are mapped from the file: reading a page past its new end after an
    in-place truncation kills the process (SIGBUS). The next reply is refused in words
    instead; a file replaced by a rename or deleted still generates (the mapping keeps
    the file it was made from), as does one whose time alone changed. In a child
    process: a regression crashes only it."""
    import subprocess
    import sys

    out = subprocess.run([sys.executable, "-c", _CHANGED_ON_DISK, str(tiny_target),
                          str(tmp_path)], capture_output=True, text=True, timeout=120,
                         cwd=Path(__file__).resolve().parents[2])
    assert out.returncode == 0, out.stderr[-2000:]
    lines = out.stdout.splitlines()
    assert lines[:3] == ["replaced generated", "deleted generated", "touched generated"], out.stdout
    assert lines[3].startswith("truncated refused: truncated.gguf was changed on disk after "
                               "it was loaded"), out.stdout
    assert "Load the model again" in lines[3]
    assert lines[4] == "draft truncated: plain replies and an unload went on", out.stdout


def _malformed(tmp: Path, good: Path) -> dict[str, Path]:
    data = good.read_bytes()
    out: dict[str, bytes] = {
        "truncated": data[: len(data) // 2],
        "header-only": data[:100],
        "wrong-magic": b"GGML" + data[4:],
        "empty": b"",
    }
    b = bytearray(data)
    b[8:16] = struct.pack("<Q", 2**60)
    out["absurd-tensor-count"] = bytes(b)
    b = bytearray(data)
    b[24:32] = struct.pack("<Q", 2**62)
    out["absurd-string-length"] = bytes(b)
    from gguf import GGUFReader

    field = GGUFReader(str(good)).tensors[-1].field
    pos = field.offset + sum(int(p.nbytes) for p in field.parts[:5])
    b = bytearray(data)
    b[pos : pos + 8] = struct.pack("<Q", 10**12)
    out["wrong-tensor-offset"] = bytes(b)
    paths = {}
    for name, blob in out.items():
        p = tmp / f"{name}.gguf"
        p.write_bytes(blob)
        paths[name] = p
    return paths


def test_malformed_ggufs_are_refused_with_a_clear_error(tiny_target: Path, tmp_path: Path) -> None:
    for name, path in _malformed(tmp_path, tiny_target).items():
        with pytest.raises(ModelLoadError) as info:
            Session.open(SessionConfig(target_path=path, n_ctx=64))
        msg = str(info.value)
        assert path.name in msg, name
        assert "\n" not in msg
    with pytest.raises(ModelLoadError, match="not found"):
        Session.open(SessionConfig(target_path=tmp_path / "missing.gguf"))


def _on_first_abort_check(session: Session, action: Callable[[], None]) -> None:
    """Run ``action`` the first time llama.cpp asks the abort callback, i.e. while the
    prefill's one ``llama_decode`` is running; the callback then answers as usual."""
    ctx = session.ctx
    original = ctx.abortable

    @contextmanager
    def abortable(should_stop: Callable[[], bool] | None) -> Iterator[None]:
        fired = False

        def check() -> bool:
            nonlocal fired
            if not fired and should_stop is not None:
                fired = True
                action()
            return should_stop() if should_stop is not None else False

        with original(check if should_stop is not None else None):
            yield

    ctx.abortable = abortable  # type: ignore[method-assign]


def test_cancel_during_a_long_prefill_aborts_inside_the_batch(tiny_model_dir: Path) -> None:
    # A wider model, and the whole prompt in one decode call: only the abort callback can
    # stop it before it ends.
    path = write_tiny_llama(tiny_model_dir / "tiny-wide.gguf", seed=3, n_embd=256, n_ff=1024,
                            n_layer=4, n_ctx_train=8192)
    prompt = [BOS] + [300 + (i % 150) for i in range(6000)]
    cfg = SessionConfig(target_path=path, n_ctx=8192, n_batch=8192, n_threads=2)
    with Session.open(cfg) as s:
        full = run(s, prompt, SamplingParams(temperature=0.0, max_tokens=1))
        assert full.stats.prefill_tokens == len(prompt) - 1  # one batch, all of it
        s.reset_cache()
        cancel = threading.Event()
        _on_first_abort_check(s, cancel.set)  # cancel while that one batch is computed
        r = run(s, prompt, SamplingParams(temperature=0.0, max_tokens=1), None, cancel=cancel)
        assert r.finished.reason == "cancelled" and r.ids == ()
        assert r.stats.prefill_tokens == 0  # stopped inside the batch, not after it
        assert s.cached_tokens == 0  # a partly evaluated batch is not trusted
        # the session is fine afterwards
        again = run(s, prompt[:50], GREEDY)
        assert again.finished.reason == "length"


def test_close_from_another_thread_interrupts_a_long_prefill(tiny_model_dir: Path) -> None:
    path = write_tiny_llama(tiny_model_dir / "tiny-wide-close.gguf", seed=3, n_embd=256, n_ff=1024,
                            n_layer=4, n_ctx_train=8192)
    prompt = [BOS] + [300 + (i % 150) for i in range(6000)]
    s = Session.open(SessionConfig(target_path=path, n_ctx=8192, n_batch=8192, n_threads=2))
    closer = threading.Thread(target=s.close)

    def close_now() -> None:
        # close() from another thread while the prefill's one decode runs; wait until it
        # has announced itself (it sets the flag first, then waits for the round's lock)
        closer.start()
        while not s._closing and closer.is_alive():
            closer.join(0.001)

    _on_first_abort_check(s, close_now)
    result = run(s, prompt, SamplingParams(temperature=0.0, max_tokens=5))
    closer.join(60)
    assert not closer.is_alive() and s.closed
    assert result.finished.reason == "cancelled" and result.ids == ()
    assert result.stats.prefill_tokens == 0  # the batch was interrupted, not finished


def test_ggufs_that_make_llama_cpp_abort_are_refused_not_fatal(tiny_model_dir: Path) -> None:
    """Values llama.cpp asserts on (GGML_ASSERT → SIGABRT) are caught by the probe."""
    cases = {
        "no-layers": write_tiny_llama(tiny_model_dir / "tiny-l0.gguf", n_layer=0),
        "too-many-layers": write_tiny_llama(tiny_model_dir / "tiny-l600.gguf", n_layer=0),
    }
    # block_count is what llama.cpp reads: rewrite it in place for the second case
    import struct

    data = bytearray(cases["too-many-layers"].read_bytes())
    key = b"llama.block_count"
    i = data.index(key) + len(key) + 4  # skip the value type (u32)
    data[i : i + 4] = struct.pack("<I", 600)
    cases["too-many-layers"].write_bytes(bytes(data))
    for name, path in cases.items():
        with pytest.raises(ModelLoadError, match="cannot use this file") as info:
            Session.open(SessionConfig(target_path=path, n_ctx=64))
        assert "n_layer" in str(info.value), name


def test_context_beyond_training_is_capped_and_an_oversized_kv_cache_refused(
    tiny_target: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from app.engine import session as session_mod

    with Session.open(SessionConfig(target_path=tiny_target, n_ctx=10**6, n_gpu_layers=0)) as s:
        assert s.n_ctx == 2048  # the tiny model's training context
        assert any("lowered from 1000000 to 2048" in n for n in s.notes)
        expected = 2 * 2048 * 4 * (16 + 16) * 2  # layers × ctx × kv heads × (k+v dims) × F16
        assert s.target.kv_cache_bytes(2048) == expected
    monkeypatch.setattr(session_mod, "physical_memory_bytes", lambda: 1_000_000)
    with pytest.raises(ModelLoadError, match="KV cache"):
        Session.open(SessionConfig(target_path=tiny_target, n_ctx=2048, n_gpu_layers=0))


def test_a_later_split_part_opens_part_1_or_says_to(tmp_path: Path) -> None:
    """generate --model …-00002-of-00002.gguf opens part 1 or says to, rather than
    calling the file corrupt."""
    first = write_tiny_llama(tmp_path / "split.gguf", split_max_tensors=12)
    second = first.with_name("split-00002-of-00002.gguf")
    with Session.open(SessionConfig(target_path=second, n_ctx=64, n_threads=2)) as s:
        assert s.target.path == first
        assert f"{second.name} is part 2 of 2 of a split model; part 1 ({first.name}) was opened." in s.notes
    first.unlink()
    with pytest.raises(ModelLoadError, match=r"is part 2 of 2 of a split model; open part 1 \(split-00001"):
        Session.open(SessionConfig(target_path=second, n_ctx=64))


def test_an_abort_tandem_asked_for_is_not_reported_as_an_error(
        tiny_target: Path, caplog: pytest.LogCaptureFixture) -> None:
    """A decode stopped through the abort callback (Stop during a prefill): llama.cpp's
    own lines about it ("llama_decode: failed to decode, ret = 2") are no warning or
    error in the log, and are not kept to be blamed in a later error's message; an
    error after the abort is reported again."""
    model = LlamaModel(tiny_target, n_gpu_layers=0)
    try:
        ctx = LlamaContext(model, n_ctx=256, n_batch=64)
        try:
            _take_native_errors()
            with caplog.at_level(logging.DEBUG, logger="app.engine.llama"):
                with pytest.raises(DecodeAborted), ctx.abortable(lambda: True):
                    ctx.decode([BOS, *range(300, 340)], 0, logits="none")
                assert ctx.decode_count == 0
                loud = [r.getMessage() for r in caplog.records if r.levelno >= logging.WARNING]
                assert loud == []
                assert any("ret = 2" in r.getMessage() for r in caplog.records)
                assert _take_native_errors() == ""
                ctx.clear()
                assert ctx.decode([BOS, 300, 301], 0, logits="last")  # usable again
                with pytest.raises(TandemError, match="invalid token"):
                    ctx.decode([10**6], 3, logits="last")  # a real error is loud again
            assert any(r.levelno >= logging.ERROR and "invalid token" in r.getMessage()
                       for r in caplog.records)
        finally:
            ctx.close()
    finally:
        model.close()


def test_load_progress_keeps_its_end_for_the_context_and_the_pass_timing(
        tiny_target: Path) -> None:
    """The weights fill 0–85 % of the bar, the context 90 %, and 100 % comes only once
    the pass sizes are timed (the bar stood at 100 % for those seconds); a cancel at
    90 % stops the load."""
    from app.errors import LoadCancelledError

    seen: list[float] = []

    def progress(p: float) -> bool:
        seen.append(p)
        return True

    Session.open(SessionConfig(target_path=tiny_target, n_ctx=512), progress=progress).close()
    weights = [p for p in seen if 0.0 < p < 0.9]
    assert weights and max(weights) == pytest.approx(0.85)
    assert seen == sorted(seen) and seen[-1] == 1.0 and 0.9 in seen

    def stop_at_context(p: float) -> bool:
        return p < 0.9

    with pytest.raises(LoadCancelledError):
        Session.open(SessionConfig(target_path=tiny_target, n_ctx=512), progress=stop_at_context)


def test_draft_tokens_the_policy_declines_are_counted(session: Session,
                                                      monkeypatch: pytest.MonkeyPatch) -> None:
    """The drafts of which the cost-aware policy verifies nothing are counted as
    declined (the gauge then says why nothing was checked), and never as proposed."""
    from app.engine.policy import DraftLengthPolicy

    prompt = [BOS, *([300, 301, 302, 303] * 6)]
    fixed = run(session, prompt, GREEDY, SpeculationConfig(adaptive=False, mode="prompt-lookup"))
    assert fixed.stats.proposed > 0 and fixed.stats.declined == 0
    monkeypatch.setattr(DraftLengthPolicy, "trim", lambda self, keys, draft_min=0: 0)
    r = run(session, prompt, GREEDY, SpeculationConfig(adaptive=True, mode="prompt-lookup"))
    assert r.stats.declined > 0 and r.stats.proposed == r.stats.verified == 0
    assert r.ids == fixed.ids  # what is verified never changes what is written


class _CatchingUpDrafter(ReplayDrafter):
    """Spends a timed catch-up (a sleep) in each call before drafting."""

    def __init__(self, prompt: list[int], continuation: tuple[int, ...]) -> None:
        super().__init__(prompt, continuation)
        self.catch_up_time = 0.0

    def draft(self, context: list[int], n_max: int) -> list[int]:  # type: ignore[override]
        t0 = time.perf_counter()
        time.sleep(0.02)
        self.catch_up_time += time.perf_counter() - t0
        return super().draft(context, n_max)


def test_a_draft_models_catch_up_is_counted_apart_from_its_draft_steps(
        session: Session, plain_ids: tuple[int, ...]) -> None:
    # c is a draft step's time over the target's: a catch-up over rounds that drafted
    # nothing is decode time, but no draft step (else c would count many tokens as one)
    drafter = _CatchingUpDrafter(PROMPT, plain_ids)
    install_drafter(session, drafter)
    try:
        r = run(session, PROMPT, GREEDY, SpeculationConfig(adaptive=False, mode="draft-model",
                                                           draft_max=4))
    finally:
        del session._make_drafter
    st = r.stats
    assert r.ids == plain_ids and st.draft_steps == len(drafter.calls) > 0
    assert st.draft_catch_up_time == pytest.approx(drafter.catch_up_time)
    assert st.draft_time < 0.5 * st.draft_catch_up_time  # the steps themselves: no sleep
    assert st.decode_time > st.draft_catch_up_time  # still the reply's time


def test_every_part_of_a_split_model_is_watched(tmp_path: Path) -> None:
    # llama.cpp maps every part: a later part truncated is as fatal as part 1
    from app.engine.llama import _file_stats

    for i in (1, 2):
        (tmp_path / f"m-0000{i}-of-00002.gguf").write_bytes(b"GGUF" * i)
    watched = _file_stats(tmp_path / "m-00001-of-00002.gguf")
    assert [(p.name, st.st_size) for p, st in watched] == [
        ("m-00001-of-00002.gguf", 4), ("m-00002-of-00002.gguf", 8)]
    assert [p.name for p, _ in _file_stats(tmp_path / "m-00002-of-00002.gguf")] == [
        "m-00002-of-00002.gguf"]


def test_an_incompatible_draft_is_refused_from_its_header_before_it_loads(
        smollm_path: Path, gemma_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Gemma 3 (an SPM vocabulary) cannot draft for SmolLM2 (BPE): the pairing rules on
    the two files' metadata refuse it before it is probed or loaded, and the draft loaded
    before (SmolLM2 itself, compatible) stays loaded."""
    from app.engine import session as session_module
    from app.errors import IncompatibleDraftError

    with Session.open(SessionConfig(target_path=smollm_path, draft_path=smollm_path,
                                    n_ctx=256, n_threads=2)) as s:
        assert s.draft_model is not None
        loaded: list[Path] = []
        real = session_module.LlamaModel
        monkeypatch.setattr(session_module, "probe_model",
                            lambda path, **_kw: loaded.append(Path(path)))
        monkeypatch.setattr(session_module, "LlamaModel",
                            lambda path, **kw: loaded.append(Path(path)) or real(path, **kw))
        with pytest.raises(IncompatibleDraftError, match="vocab_type: target BPE, draft SPM"):
            s.set_draft_model(gemma_path)
        assert loaded == []  # neither probed nor loaded
        assert s.draft_model is not None and s.draft_model.path == smollm_path
