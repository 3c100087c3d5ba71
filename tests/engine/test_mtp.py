"""The MTP drafter on a synthetic GLM-4.5 GGUF with one nextn layer.

The model's own multi-token-prediction head drafts from the target's hidden states
(:mod:`app.engine.drafter_kinds.mtp`). Here: the output equals plain decoding at every
k, greedy exactly and seeded up to draws within float error of an interval edge (as on
the hybrid model); the head drafts one pass per token and is accepted often but not
always; follow-up turns and a switch between drafters keep it exact; a rollback that
keeps rejected tokens is called suspect; where the model has no MTP layers or the
build lacks llama.cpp's staging functions the drafter is not offered and says why in
one sentence; the probe child runs the head, ``models inspect`` shows it, and the API
drafts with it per request.
"""

from __future__ import annotations

import json
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

import app.engine.llama as llama
from app.catalog.gguf_meta import inspect_gguf
from app.catalog.loadcheck import check_loads
from app.engine.divergence import SamplingTrace, compare_traces
from app.engine.drafter_kinds import kind_for
from app.engine.rounds import Verifier
from tests.faults import FAULTS
from app.engine.session import Session, SessionConfig
from app.options import DrafterNeeds, SamplingParams, SpecMode, SpeculationConfig
from tests.engine.test_hybrid_rollback import DRAW_NEAR_TIE
from tests.engine.test_lossless_synthetic import SAMPLINGS, prompts
from tests.engine.util import Run, check_invariants, run
from tests.synthetic import write_tiny_glm4moe_mtp

MAX_TOKENS = 40
MTP = SpecMode("mtp")


@pytest.fixture(scope="module")
def mtp(tiny_mtp: Path) -> Iterator[Session]:
    s = Session.open(SessionConfig(target_path=tiny_mtp, n_ctx=256, n_threads=1))
    yield s
    s.close()


def test_the_drafter_is_declared_through_the_registry() -> None:
    kind = kind_for("mtp")
    assert kind is not None and kind.info.needs is DrafterNeeds.MTP_HEAD
    assert kind.info.label == "MTP (built into the model)" and kind.info.cli_flag == "--mtp"
    assert SpeculationConfig.model_validate({"mode": "mtp"}).draft_max == kind.info.default_k


def mtp_against_plain(session: Session, prompt: list[int], sampling: SamplingParams,
                      k: int, max_tokens: int) -> Run:
    """``prompt`` decoded plainly and with MTP at fixed k on ``session``: the MTP reply
    equals the plain one, or parts from it only at a seeded draw's near-tie; it carries
    no note (MTP ran), and the stats invariants hold. Returns the MTP run."""
    off, on = SamplingTrace(), SamplingTrace()
    plain = run(session, prompt, sampling, SpeculationConfig(mode="off"), trace=off)
    spec = run(session, prompt, sampling, SpeculationConfig(mode="mtp", draft_max=k,
                                                             adaptive=False), trace=on)
    if spec.ids != plain.ids:
        d = compare_traces(off, on)
        assert sampling.temperature > 0 and d.draw_consistent, d
        assert d.draw_boundary is not None and d.draw_boundary < DRAW_NEAR_TIE, d
    assert spec.finished.note is None and spec.stats.mode is MTP
    check_invariants(spec, max_tokens)
    return spec


@pytest.mark.parametrize("sampling", SAMPLINGS[:2], ids=["greedy", "t0.8"])
@pytest.mark.parametrize("k", [1, 2, 3, 4, 8])
def test_mtp_equals_plain_decoding_at_every_k(mtp: Session, sampling: SamplingParams,
                                              k: int) -> None:
    verified = accepted = 0
    for prompt in prompts()[::2]:
        spec = mtp_against_plain(mtp, prompt, sampling, k, MAX_TOKENS)
        # one pass of the head per draft token (mirroring the accepted positions rides
        # along with the first); a draft cut at the end of the reply was still drafted,
        # and a last pass that only sampled the end is no round
        assert spec.stats.proposed <= spec.stats.draft_steps
        assert spec.stats.draft_steps <= (spec.stats.rounds + 1) * k
        verified += spec.stats.verified
        accepted += spec.stats.accepted
    assert 0 < accepted < verified  # the head is right often, not always: rollbacks ran


def test_follow_up_turns_and_drafter_switches_stay_exact(mtp: Session) -> None:
    """The head's cache follows the target's across turns that re-use the cached prefix,
    after replies decoded plainly or by another drafter (its gaps stay gaps)."""
    greedy = SAMPLINGS[0]
    for prompt in prompts()[:4]:
        mtp.reset_cache()
        first = run(mtp, prompt, greedy, SpeculationConfig(mode="mtp"))
        longer = [*prompt, *first.ids[:5]]
        between = run(mtp, longer, greedy, SpeculationConfig(mode="prompt-lookup"))
        again = [*longer, *between.ids[:3]]
        after = run(mtp, again, greedy, SpeculationConfig(mode="mtp"))
        assert mtp.ctx.decode_listener is not None
        run(mtp, again, greedy, SpeculationConfig(mode="off"))
        assert mtp.ctx.decode_listener is None  # a plain reply does not pay for the states
        mtp.reset_cache()
        assert first.ids == run(mtp, prompt, greedy, SpeculationConfig(mode="off")).ids
        assert after.ids == run(mtp, again, greedy, SpeculationConfig(mode="off")).ids
        # drafts were accepted, or the policy declined drafting here (verifying at most
        # its one-token explorations)
        st = after.stats
        assert st.accepted > 0 or st.proposed == st.draft_rounds, st


def test_a_reply_regenerated_from_inside_the_cache_drafts_without_errors(
        mtp: Session, caplog: pytest.LogCaptureFixture) -> None:
    """The same prompt twice: the target keeps its cache, the head rolls back into its
    own and evaluates every position again (llama.cpp wants them consecutive)."""
    greedy = SAMPLINGS[0]
    prompt = prompts()[1]
    mtp.reset_cache()
    with caplog.at_level("WARNING"):
        spec = SpeculationConfig(mode="mtp", adaptive=False)
        first = run(mtp, prompt, greedy, spec)
        second = run(mtp, prompt, greedy, spec)
    assert not [r for r in caplog.records if "MTP" in r.getMessage()], caplog.text
    assert second.ids == first.ids and second.stats.prefill_tokens == 0
    assert second.stats.verified > 0


def test_a_head_that_copies_the_trunk_drafts_what_the_target_says(
        tmp_path_factory: pytest.TempPathFactory) -> None:
    """Unperturbed, the synthetic head computes what the trunk computes (same layer
    inputs at the same positions in its cache), so every draft token is accepted: the
    positions, the pairing of tokens with hidden states and the cache's rollbacks are
    exactly llama.cpp's protocol, or α would fall below 1."""
    path = write_tiny_glm4moe_mtp(tmp_path_factory.mktemp("mtp") / "copy.gguf", mtp_perturb=0.0)
    with Session.open(SessionConfig(target_path=path, n_ctx=256, n_threads=1)) as s:
        for prompt in prompts()[:4]:
            plain = run(s, prompt, SAMPLINGS[0], SpeculationConfig(mode="off"))
            r = run(s, prompt, SAMPLINGS[0], SpeculationConfig(mode="mtp", draft_max=4,
                                                               adaptive=False))
            assert r.ids == plain.ids
            assert r.stats.verified > 0 and r.stats.accepted == r.stats.verified
        # long drafts accepted whole leave as many rows to mirror: a draft step's work,
        # no catch-up (that is for rounds that drafted nothing)
        long = run(s, prompts()[0], SAMPLINGS[0], SpeculationConfig(mode="mtp", draft_max=16,
                                                                    adaptive=False))
        assert long.stats.accepted == long.stats.verified >= 16
        assert long.stats.draft_catch_up_time == 0.0


def test_a_rollback_that_keeps_rejected_tokens_is_called_suspect(
        tmp_path_factory: pytest.TempPathFactory) -> None:
    """On a head that is often wrong and a trunk whose attention moves the logits by
    several units (so a stale KV entry shows beyond the near-tie threshold), the fault
    that keeps rejected tokens in the target's cache is called suspect."""
    path = write_tiny_glm4moe_mtp(tmp_path_factory.mktemp("mtp") / "sensitive.gguf",
                                  weight_scale=1.5)
    greedy = SAMPLINGS[0]
    verdicts = []
    mtp = Session.open(SessionConfig(target_path=path, n_ctx=256, n_threads=1))
    try:
        for prompt in prompts()[:8]:
            off, on = SamplingTrace(), SamplingTrace()
            mtp.verifier = Verifier()
            mtp.reset_cache()
            run(mtp, prompt, greedy, SpeculationConfig(mode="off"), trace=off)
            mtp.verifier = FAULTS["keep-rejected-kv"]()
            mtp.reset_cache()
            run(mtp, prompt, greedy, SpeculationConfig(mode="mtp", draft_max=3,
                                                       adaptive=False), trace=on)
            verdicts.append(compare_traces(off, on).verdict)
    finally:
        mtp.close()
    assert "suspect" in verdicts and "near-tie" not in verdicts, verdicts


def test_a_model_without_mtp_layers_is_refused_in_one_sentence(tiny_target: Path) -> None:
    with Session.open(SessionConfig(target_path=tiny_target, n_ctx=128, n_threads=1)) as s:
        assert s.target.n_layer_nextn == 0
        r = run(s, prompts()[0], SAMPLINGS[0], SpeculationConfig(mode="mtp"))
        assert r.stats.verified == 0 and r.finished.note is not None
        assert "no MTP (nextn) layers" in r.finished.note and "\n" not in r.finished.note


def test_a_build_without_the_staging_functions_is_refused_in_one_sentence(
        tiny_mtp: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """As on a llama-cpp-python whose library lacks the C++ staging symbols: importing
    ``llama_cpp.llama_cpp_ext`` fails, and the reply decodes plainly and says so."""
    monkeypatch.setitem(sys.modules, "llama_cpp.llama_cpp_ext", None)  # import fails
    monkeypatch.setattr(llama, "_mtp_missing", [])
    try:
        missing = llama.mtp_staging_missing()
        assert missing is not None and "llama_cpp.llama_cpp_ext" in missing
        with Session.open(SessionConfig(target_path=tiny_mtp, n_ctx=128, n_threads=1)) as s:
            r = run(s, prompts()[0], SAMPLINGS[0], SpeculationConfig(mode="mtp"))
            assert r.stats.verified == 0 and r.finished.note is not None
            assert r.finished.note.startswith("This llama-cpp-python build lacks")
            assert "\n" not in r.finished.note
            assert run(s, prompts()[0], SAMPLINGS[0]).ids == r.ids
    finally:
        llama._mtp_missing.clear()


def test_the_probe_child_runs_the_head_and_inspect_shows_it(tiny_mtp: Path,
                                                            tiny_target: Path) -> None:
    assert check_loads(tiny_mtp, use_cache=False).mtp == "ok"
    assert check_loads(tiny_target, use_cache=False).mtp is None
    assert inspect_gguf(tiny_mtp, use_cache=False).nextn_layers == 1
    assert inspect_gguf(tiny_target, use_cache=False).nextn_layers == 0


def test_models_inspect_prints_the_mtp_layers(tiny_mtp: Path,
                                              capsys: pytest.CaptureFixture[str]) -> None:
    from app.cli.main import main

    assert main(["models", "inspect", str(tiny_mtp), "--json", "--no-load-check"]) == 0
    assert json.loads(capsys.readouterr().out)["nextn_layers"] == 1


def test_the_api_drafts_with_mtp_per_request(tiny_mtp: Path,
                                             tmp_path_factory: pytest.TempPathFactory) -> None:
    """``"speculation": {"mode": "mtp"}`` through the real ``openai`` client: the head
    drafts (llama-server's timings count its tokens) and the text is the plain reply's."""
    import os
    import subprocess

    import openai

    repo = Path(__file__).resolve().parents[2]
    proc = subprocess.Popen(
        [sys.executable, "-m", "app", "serve", "--model", str(tiny_mtp), "--port", "0",
         "--n-ctx", "512", "--threads", "1"],
        cwd=repo, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
        env={**os.environ, "TANDEM_HOME": str(tmp_path_factory.mktemp("serve-mtp"))})
    try:
        assert proc.stdout is not None
        base = proc.stdout.readline().strip()
        assert base.startswith("http://"), proc.stderr.read() if proc.stderr else ""
        client = openai.OpenAI(base_url=base, api_key="unused", max_retries=0)
        texts = {}
        for mode in ("mtp", "off"):
            r = client.chat.completions.create(
                model="tiny-mtp", messages=[{"role": "user", "content": "hello there"}],
                max_tokens=40, temperature=0,
                extra_body={"speculation": {"mode": mode, "draft_max": 3, "adaptive": False}})
            extra = r.model_extra or {}
            assert extra["tandem"]["mode"] == mode
            if mode == "mtp":
                assert 0 < extra["timings"]["draft_n_accepted"] < extra["timings"]["draft_n"]
            texts[mode] = r.choices[0].message.content
        assert texts["mtp"] == texts["off"]
    finally:
        proc.terminate()
        proc.wait(60)


def test_the_load_note_says_what_the_mtp_layers_cost(mtp: Session, tiny_mtp: Path,
                                                     tiny_target: Path) -> None:
    """The nextn layers load with the model whichever drafter runs: the note gives their
    tensors' bytes (what resident memory grows by, docs/benchmarks.md)."""
    info = inspect_gguf(tiny_mtp)
    assert info.nextn_bytes is not None and 0 < info.nextn_bytes < info.file_size
    # the one MoE block after the trunk: every tensor named blk.1.*
    assert mtp.mtp_bytes == info.nextn_bytes
    note = next(n for n in mtp.notes if "MTP (nextn) layer" in n)
    assert note.startswith("This model's 1 MTP (nextn) layer stays loaded for the MTP "
                           f"drafter: {info.nextn_bytes / 1024:.1f} KiB")
    assert inspect_gguf(tiny_target).nextn_bytes == 0
    with Session.open(SessionConfig(target_path=tiny_target, n_ctx=128, n_threads=1)) as s:
        assert s.mtp_bytes == 0 and not any("MTP" in n for n in s.notes)


def test_a_restored_prefix_never_drafts_from_an_older_contexts_row(
        tmp_path_factory: pytest.TempPathFactory) -> None:
    """A reply whose prefill puts back a saved state (the prefix cache) decodes nothing:
    the row the head kept at the last position may hold the same token there in another
    context. The first round is then plain; drafting resumes from the target's next
    decode."""
    from app.engine.drafter_kinds.mtp import MTPDrafter

    path = write_tiny_glm4moe_mtp(tmp_path_factory.mktemp("mtp") / "restore.gguf",
                                  mtp_perturb=0.0)
    with llama.LlamaModel(path, load_mtp=True) as t:
        tctx = llama.LlamaContext(t, n_ctx=256, n_threads=1)
        hctx = llama.LlamaContext(t, n_ctx=256, n_batch=tctx.n_batch, n_threads=1,
                                  n_outputs_max=1, context_type=llama.CONTEXT_TYPE_MTP)
        drafter = MTPDrafter(tctx, hctx)
        older = [1, *range(30, 49), 29]  # the same token at the same last position
        newer = [1, *range(60, 79), 29]
        drafter.listen()
        tctx.decode(newer, 0)
        saved = tctx.state_bytes()
        x = int(tctx.logits(-1).argmax())
        tctx.clear()
        tctx.decode(older, 0)  # the previous reply: the head keeps its last row
        token = int(tctx.logits(-1).argmax())
        assert drafter.draft([*older, token], 3)  # a live row: it drafts
        assert drafter.listen()  # the next reply starts; its prefill puts `newer` back
        assert tctx.load_state(saved)
        assert drafter.draft([*newer, x], 3) == []
        tctx.decode([x], len(newer))
        after_x = int(tctx.logits(-1).argmax())
        assert len(drafter.draft([*newer, x, after_x], 2)) == 2
        drafter.close()
        tctx.close()


@pytest.mark.parametrize("heads", [1, 2], ids=["one-head", "chained"])
def test_rows_missed_over_undrafted_rounds_are_a_catch_up_not_draft_steps(
        tmp_path_factory: pytest.TempPathFactory, heads: int) -> None:
    """After rounds that drafted nothing the head mirrors what it missed in a pass of its
    own (timed as catch_up_time), so a draft step's time stays one pass's; the draft is
    the one the head proposes when it mirrors everything in its first draft pass."""
    from app.engine.drafter_kinds.mtp import MTPDrafter
    from tests.synthetic import write_tiny_hyv3_mtp

    folder = tmp_path_factory.mktemp("catch-up")
    path = (write_tiny_glm4moe_mtp(folder / "one.gguf", mtp_perturb=0.0) if heads == 1
            else write_tiny_hyv3_mtp(folder / "two.gguf", n_heads=2))
    with llama.LlamaModel(path, load_mtp=True) as t:
        tctx = llama.LlamaContext(t, n_ctx=256, n_threads=1)

        def drafted(catch_up_min: int) -> tuple[list[int], int, float]:
            hctx = llama.LlamaContext(t, n_ctx=256, n_batch=tctx.n_batch, n_threads=1,
                                      n_outputs_max=1, context_type=llama.CONTEXT_TYPE_MTP)
            drafter = MTPDrafter(tctx, hctx)
            drafter.listen()
            tctx.clear()
            prompt = [1, *range(30, 40)]
            tctx.decode(prompt, 0)
            drafter.begin(prompt)
            context = [*prompt, int(tctx.logits(-1).argmax())]
            for _ in range(12):  # twelve plain rounds: the head drafts nothing
                tctx.decode(context[-1:], len(context) - 1)
                context.append(int(tctx.logits(-1).argmax()))
            passes = drafter.forward_passes
            with pytest.MonkeyPatch.context() as mp:
                mp.setattr("app.engine.drafters.DraftModelDrafter.CATCH_UP_MIN", catch_up_min)
                out = drafter.draft(context, 3)
            steps, caught_up = drafter.forward_passes - passes, drafter.catch_up_time
            drafter.close()
            return out, steps, caught_up

        split, steps, caught_up = drafted(8)
        whole, whole_steps, none = drafted(10**6)
        tctx.close()
    assert split and split == whole
    assert caught_up > 0 and none == 0.0
    assert steps == whole_steps == (len(split) if heads == 1 else heads)
