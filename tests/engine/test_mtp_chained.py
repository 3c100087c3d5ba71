"""Chained MTP heads on a synthetic Hunyuan V3 (``hy_v3``) GGUF with two nextn layers.

A model with several trained heads drafts token i with head i
(:mod:`app.engine.drafter_kinds.mtp`, llama.cpp's ``chain_heads`` mode). Here: the
output equals plain decoding at k = 1, 2 and at a k above the number of heads, which
is capped to it (greedy exactly, seeded up to draws within float error of an interval
edge); heads that copy the trunk are always accepted, so every head's layer holds the
rows the protocol says; a rollback that keeps rejected tokens is called suspect; a
build without ``llama_set_nextn_layer_offset`` refuses the model in one sentence; the
probe child runs every head under a stage line of its own (a crash in a later head
leaves the model loadable without MTP), the availability rule offers the drafter, and
neither its prediction nor Auto's pricing drafts more tokens than there are heads.
"""

from __future__ import annotations

import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

import app.engine.llama as llama
from app.catalog import loadcheck
from app.catalog.gguf_meta import inspect_gguf
from app.catalog.loadcheck import check_loads
from app.engine.auto import ReplyObservation, estimate_drafters
from app.engine.divergence import SamplingTrace, compare_traces
from app.engine.drafter_kinds import Unavailable, kind_for
from app.engine.drafter_kinds.mtp import MTP_K, MTP_PRIOR_ACCEPTANCE
from app.engine.drafters import DraftModelDrafter, PromptLookupDrafter
from app.engine.rounds import Verifier
from tests.faults import FAULTS
from app.engine.session import Session, SessionConfig
from app.engine.suffix import SuffixDrafter
from app.options import SamplingParams, SpecMode, SpeculationConfig, drafter_unusable
from tests.engine.test_mtp import mtp_against_plain
from tests.engine.test_lossless_synthetic import SAMPLINGS, prompts
from tests.engine.util import run
from tests.synthetic import write_tiny_hyv3_mtp

MAX_TOKENS = 40
HEADS = 2
REPO = Path(__file__).resolve().parents[2]
MTP = SpecMode("mtp")


@pytest.fixture(scope="module")
def chained_path(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return write_tiny_hyv3_mtp(tmp_path_factory.mktemp("chain") / "hyv3.gguf", n_heads=HEADS)


@pytest.fixture(scope="module")
def chained(chained_path: Path) -> Iterator[Session]:
    s = Session.open(SessionConfig(target_path=chained_path, n_ctx=256, n_threads=1))
    yield s
    s.close()


@pytest.mark.parametrize("sampling", SAMPLINGS[:2], ids=["greedy", "t0.8"])
@pytest.mark.parametrize("k", [1, 2, 5])
def test_chained_heads_equal_plain_decoding(chained: Session, sampling: SamplingParams,
                                            k: int) -> None:
    assert chained.target.n_layer_nextn == HEADS and chained.target.mtp_loaded
    verified = accepted = 0
    for prompt in prompts()[::2]:
        spec = mtp_against_plain(chained, prompt, sampling, k, MAX_TOKENS)
        # the draft is never longer than the heads are many, whatever k asks
        assert not any(spec.stats.verified_at[HEADS:])
        # one pass per head per round (the mirrored rows ride along with each)
        assert spec.stats.proposed <= spec.stats.draft_steps
        assert spec.stats.draft_steps <= (spec.stats.rounds + 1) * HEADS
        verified += spec.stats.verified
        accepted += spec.stats.accepted
    assert 0 < accepted < verified  # the heads are right often, not always: rollbacks ran


def test_heads_that_copy_the_trunk_draft_what_the_target_says(
        tmp_path_factory: pytest.TempPathFactory) -> None:
    """Unperturbed, each head computes what the trunk computes when its own layer's KV
    entries hold the trunk's layer inputs at the same positions: every draft token is
    accepted only if every head's layer was mirrored and the draft positions left it."""
    path = write_tiny_hyv3_mtp(tmp_path_factory.mktemp("chain") / "copy.gguf",
                               n_heads=HEADS, mtp_perturb=0.0)
    with Session.open(SessionConfig(target_path=path, n_ctx=256, n_threads=1)) as s:
        for prompt in prompts()[:4]:
            s.reset_cache()
            plain = run(s, prompt, SAMPLINGS[0], SpeculationConfig(mode="off"))
            s.reset_cache()
            # k = 1 first: the second head only mirrors the accepted rows, which the
            # follow-up turn at k = 4 (the same cached prefix) then drafts from
            one = run(s, prompt, SAMPLINGS[0], SpeculationConfig(mode="mtp", draft_max=1,
                                                                 adaptive=False))
            longer = [*prompt, *one.ids[:5]]
            r = run(s, longer, SAMPLINGS[0], SpeculationConfig(mode="mtp", draft_max=4,
                                                               adaptive=False))
            assert one.ids == plain.ids and r.stats.prefill_tokens <= 2
            for x in (one, r):
                assert x.stats.verified > 0 and x.stats.accepted == x.stats.verified
            assert r.stats.verified_at[1] > 0  # the second head drafted and was right


def test_a_rollback_that_keeps_rejected_tokens_is_called_suspect(
        tmp_path_factory: pytest.TempPathFactory) -> None:
    path = write_tiny_hyv3_mtp(tmp_path_factory.mktemp("chain") / "sensitive.gguf",
                               n_heads=HEADS, weight_scale=1.5)
    greedy = SAMPLINGS[0]
    verdicts = []
    with Session.open(SessionConfig(target_path=path, n_ctx=256, n_threads=1)) as s:
        for prompt in prompts()[:8]:
            off, on = SamplingTrace(), SamplingTrace()
            s.verifier = Verifier()
            s.reset_cache()
            run(s, prompt, greedy, SpeculationConfig(mode="off"), trace=off)
            s.verifier = FAULTS["keep-rejected-kv"]()
            s.reset_cache()
            run(s, prompt, greedy, SpeculationConfig(mode="mtp", draft_max=HEADS,
                                                     adaptive=False), trace=on)
            verdicts.append(compare_traces(off, on).verdict)
    assert "suspect" in verdicts and "near-tie" not in verdicts, verdicts


def test_a_build_without_the_head_offset_refuses_in_one_sentence(
        chained_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    import llama_cpp.llama_cpp_ext as ext

    monkeypatch.delattr(ext, llama.MTP_CHAIN_FUNCTION)
    assert llama.mtp_chain_missing() == "llama_set_nextn_layer_offset"
    with Session.open(SessionConfig(target_path=chained_path, n_ctx=128, n_threads=1)) as s:
        r = run(s, prompts()[0], SAMPLINGS[0], SpeculationConfig(mode="mtp"))
        assert r.stats.verified == 0 and r.finished.note is not None
        assert r.finished.note.startswith("This llama-cpp-python build lacks "
                                          "llama_set_nextn_layer_offset")
        assert f"{HEADS} chained MTP heads" in r.finished.note and "\n" not in r.finished.note
        assert run(s, prompts()[0], SAMPLINGS[0]).ids == r.ids


def _stage_lines(stdout: str) -> list[str]:
    return [line[len(loadcheck.MARK):].strip() for line in stdout.splitlines()
            if line.startswith(f"{loadcheck.MARK} stage ")]


def test_the_probe_runs_every_head_and_the_rule_offers_mtp(chained_path: Path) -> None:
    # the child names each head as it runs it, the first as the mtp stage's first step
    child = subprocess.run(loadcheck.probe_command(chained_path), capture_output=True,
                           text=True, timeout=300, cwd=REPO)
    assert child.returncode == 0, child.stderr[-2000:]
    stages = _stage_lines(child.stdout)
    assert stages[stages.index("stage mtp"):] == [
        "stage mtp", *(f"stage mtp head {i}" for i in range(HEADS))]
    verdict = check_loads(chained_path)
    assert verdict.mtp == "ok" and verdict.mtp_cost_ratio is not None
    info = inspect_gguf(chained_path, use_cache=False)
    assert info.nextn_layers == HEADS
    assert MTP.info is not None and drafter_unusable(MTP.info, info) is None
    kind = kind_for("mtp")
    assert kind is not None and kind.predict is not None
    prediction = kind.predict(chained_path, None)
    assert prediction is not None and prediction.k == HEADS  # MTP_K = 3, capped


def test_a_crash_in_a_further_head_leaves_the_model_loadable(
        chained_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """llama.cpp aborting while the child runs head 1 (its stage line last) takes only
    the MTP drafter away, as a crash in the first head does."""
    script = ("import os, signal\n"
              f"for s in ('load', 'context', 'decode', 'mtp', 'mtp head 0', 'mtp head 1'):\n"
              f"    print('{loadcheck.MARK} stage ' + s, flush=True)\n"
              "os.kill(os.getpid(), signal.SIGABRT)\n")
    monkeypatch.setattr(loadcheck, "probe_command",
                        lambda p, **kw: [sys.executable, "-c", script])
    verdict = check_loads(chained_path, use_cache=False)
    assert verdict.loads and verdict.mtp is not None
    assert verdict.mtp.startswith("llama.cpp crashed running it")


def test_auto_prices_chained_heads_no_longer_than_they_draft(chained: Session,
                                                             chained_path: Path) -> None:
    """The draft is at most as long as the heads are many: Auto prices no k beyond
    that, and the published α only at the drafter's default k (MTP_K, capped by the
    heads) — two heads chained to 8 tokens were never trained for that."""
    assert check_loads(chained_path).mtp_cost_ratio is not None
    spec = SpeculationConfig(mode=SpecMode.AUTO, draft_max=8)
    head = {e.mode: e for e in estimate_drafters(chained, [], [], spec)}[MTP]
    assert head.prior_acceptance == MTP_PRIOR_ACCEPTANCE
    assert set(head.predicted) == {min(MTP_K, HEADS)}
    seen = [ReplyObservation(MTP, 20, 0.5, 24, 18, 0.4)]
    head = {e.mode: e for e in estimate_drafters(chained, [], seen, spec)}[MTP]
    assert head.prior_acceptance is None and set(head.predicted) == {HEADS}


def test_every_drafter_declares_its_draft_limit(chained: Session) -> None:
    """The rounds read ``draft_limit`` from every drafter (no default looked up)."""
    for cls in (DraftModelDrafter, PromptLookupDrafter, SuffixDrafter):
        assert cls.draft_limit is None
    r = run(chained, prompts()[0], SAMPLINGS[0], SpeculationConfig(mode="mtp", draft_max=5,
                                                                   adaptive=False))
    drafter = chained.kept_drafter(MTP, lambda: pytest.fail("the MTP drafter was not kept"))
    assert not isinstance(drafter, Unavailable)
    assert drafter.draft_limit == HEADS and r.stats.verified > 0
