"""The MTP drafter with a separate assistant GGUF: a synthetic Gemma 4 target and its
``gemma4-assistant``, which reads the target's KV cache (llama.cpp's shared-memory MTP).

The assistant is loaded in the draft model's place and drafts through the MTP drafter
(:class:`app.engine.drafter_kinds.mtp.AssistantDrafter`). Here: the output equals plain
decoding at every k, greedy exactly and seeded up to draws within float error of an
interval edge; an assistant built to imitate the target is accepted more than a
perturbed one; follow-up turns and drafter switches stay exact; a rollback that keeps
rejected tokens is called suspect; pairing says which rule fails, one sentence each; an
assistant opened as a target is refused in one sentence; the load check's child runs
the pair; the command line takes the assistant with ``--mtp-assistant``; Auto prices
it once its replies measured c; a prefix put back from the prefix cache never drafts
from a row of another context; its replies are worded "MTP".
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path
from typing import TYPE_CHECKING

import pytest

if TYPE_CHECKING:
    from app.chat.service import ChatService

from app.catalog.gguf_meta import inspect_gguf, load_vocab
from app.catalog.library import model_shape
from app.catalog.loadcheck import check_loads
from app.catalog.pairing import check_assistant_pair, rank_drafts
from app.engine.auto import AutoChoice, ReplyObservation, choose_drafter, estimate_drafters
from app.engine.divergence import SamplingTrace, compare_traces
from app.engine.drafter_kinds.mtp import MTP_K, MTP_PRIOR_ACCEPTANCE
from app.engine.rounds import Verifier
from tests.faults import FAULTS
from app.engine.session import Session, SessionConfig
from app.errors import IncompatibleDraftError, ModelLoadError
from app.options import SamplingParams, SpecMode, SpeculationConfig
from tests.engine.test_mtp import mtp_against_plain
from tests.engine.test_lossless_synthetic import SAMPLINGS, prompts
from tests.engine.util import run
from app.ui.explain import auto_explanation
from tests.synthetic import write_tiny_gemma4, write_tiny_gemma4_assistant, write_tiny_llama

MAX_TOKENS = 40
MTP = SpecMode("mtp")


@pytest.fixture(scope="module")
def models(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    d = tmp_path_factory.mktemp("gemma4")
    return {
        "target": write_tiny_gemma4(d / "target.gguf"),
        "assistant": write_tiny_gemma4_assistant(d / "assistant.gguf"),
        "copy": write_tiny_gemma4_assistant(d / "copy.gguf", perturb=0.0),
    }


@pytest.fixture(scope="module")
def paired(models: dict[str, Path]) -> Iterator[Session]:
    s = Session.open(SessionConfig(target_path=models["target"], draft_path=models["assistant"],
                                   n_ctx=256, n_threads=1))
    yield s
    s.close()


def _acceptance(s: Session, k: int = 3) -> tuple[int, int]:
    verified = accepted = 0
    for prompt in prompts()[:6]:
        r = run(s, prompt, SAMPLINGS[0], SpeculationConfig(mode="mtp", draft_max=k, adaptive=False))
        verified += r.stats.verified
        accepted += r.stats.accepted
    return accepted, verified


def test_the_assistant_loads_in_the_drafter_models_place(paired: Session) -> None:
    assert paired.assistant_model is not None and paired.draft_model is None
    assert paired.assistant_model.n_layer == 0 and paired.assistant_model.n_layer_nextn == 2
    assert paired.assistant_model.n_embd_out == paired.target.n_embd
    r = run(paired, prompts()[0], SAMPLINGS[0], SpeculationConfig(mode="draft-model"))
    assert r.stats.verified == 0 and r.finished.note is not None
    assert "MTP assistant" in r.finished.note and "\n" not in r.finished.note


@pytest.mark.parametrize("sampling", SAMPLINGS[:2], ids=["greedy", "t0.8"])
@pytest.mark.parametrize("k", [1, 2, 3, 4])
def test_the_assistant_equals_plain_decoding_at_every_k(paired: Session, sampling: SamplingParams,
                                                        k: int) -> None:
    verified = accepted = 0
    for prompt in prompts()[::2]:
        spec = mtp_against_plain(paired, prompt, sampling, k, MAX_TOKENS)
        # one assistant pass per draft token; a draft cut at the end of the reply was
        # still drafted
        assert spec.stats.proposed <= spec.stats.draft_steps
        assert spec.stats.draft_steps <= (spec.stats.rounds + 1) * k
        verified += spec.stats.verified
        accepted += spec.stats.accepted
    assert 0 < accepted < verified  # right often, not always: rollbacks ran


def test_an_assistant_that_imitates_the_target_is_accepted_more(models: dict[str, Path],
                                                                paired: Session) -> None:
    """The unperturbed assistant computes the target's last layers at the draft position
    over the target's own cache: it agrees nearly always (only the draft position's own
    key is missing), so the positions, the hidden-state pairing and the shared cache are
    llama.cpp's protocol; noise on its weights lowers α."""
    with Session.open(SessionConfig(target_path=models["target"], draft_path=models["copy"],
                                    n_ctx=256, n_threads=1)) as s:
        acc_copy, ver_copy = _acceptance(s)
    acc, ver = _acceptance(paired)
    assert acc_copy / ver_copy > 0.85
    assert acc / ver < acc_copy / ver_copy - 0.15


def test_a_sliding_window_shorter_than_the_reply_stays_exact(
        tmp_path_factory: pytest.TempPathFactory) -> None:
    """Gemma's sliding-window layers with a window of 16 (the target keeps n_swa +
    n_ubatch cells there): the assistant reads that cache past the window's start and
    the output stays the plain reply's."""
    d = tmp_path_factory.mktemp("gemma4-swa")
    target = write_tiny_gemma4(d / "t.gguf", n_swa=16)
    assistant = write_tiny_gemma4_assistant(d / "a.gguf", n_swa=16)
    accepted = 0
    with Session.open(SessionConfig(target_path=target, draft_path=assistant, n_ctx=256,
                                    n_threads=1)) as s:
        for prompt in prompts()[:4]:
            plain = run(s, prompt, SAMPLINGS[0], SpeculationConfig(mode="off"))
            r = run(s, prompt, SAMPLINGS[0], SpeculationConfig(mode="mtp", draft_max=4,
                                                               adaptive=False))
            assert r.ids == plain.ids and len(prompt) + len(r.ids) > 16
            accepted += r.stats.accepted
    assert accepted > 0


def test_follow_up_turns_and_drafter_switches_stay_exact(paired: Session) -> None:
    greedy = SAMPLINGS[0]
    for prompt in prompts()[:4]:
        paired.reset_cache()
        first = run(paired, prompt, greedy, SpeculationConfig(mode="mtp"))
        longer = [*prompt, *first.ids[:5]]
        run(paired, longer, greedy, SpeculationConfig(mode="prompt-lookup"))
        again = [*longer, 300, 301]
        after = run(paired, again, greedy, SpeculationConfig(mode="mtp", adaptive=False))
        regenerated = run(paired, again, greedy, SpeculationConfig(mode="mtp", adaptive=False))
        paired.reset_cache()
        assert first.ids == run(paired, prompt, greedy, SpeculationConfig(mode="off")).ids
        plain = run(paired, again, greedy, SpeculationConfig(mode="off")).ids
        assert after.ids == plain and regenerated.ids == plain
        assert after.stats.accepted > 0


def test_a_rollback_that_keeps_rejected_tokens_is_called_suspect(
        tmp_path_factory: pytest.TempPathFactory) -> None:
    """With attention that moves the logits by several units (a stale KV entry shows
    beyond the near-tie threshold) and an assistant often wrong, the fault that keeps
    rejected tokens in the target's cache (which the assistant reads too) is called
    suspect. (llama.cpp's batch check then also refuses the assistant's next step: the
    shared cache ends past the draft position; the drafter logs it and drafts nothing.)"""
    d = tmp_path_factory.mktemp("gemma4-sensitive")
    target = write_tiny_gemma4(d / "t.gguf", weight_scale=8.0)
    assistant = write_tiny_gemma4_assistant(d / "a.gguf", weight_scale=8.0, perturb=0.5)
    verdicts = []
    with Session.open(SessionConfig(target_path=target, draft_path=assistant, n_ctx=256,
                                    n_threads=1)) as s:
        for prompt in prompts()[:8]:
            off, on = SamplingTrace(), SamplingTrace()
            s.verifier = Verifier()
            s.reset_cache()
            run(s, prompt, SAMPLINGS[0], SpeculationConfig(mode="off"), trace=off)
            s.verifier = FAULTS["keep-rejected-kv"]()
            s.reset_cache()
            run(s, prompt, SAMPLINGS[0], SpeculationConfig(mode="mtp", draft_max=3,
                                                           adaptive=False), trace=on)
            verdicts.append(compare_traces(off, on).verdict)
    assert "suspect" in verdicts and "near-tie" not in verdicts, verdicts


def _pair(target: Path, assistant: Path) -> list[str]:
    t, a = inspect_gguf(target, use_cache=False), inspect_gguf(assistant, use_cache=False)
    ts, as_ = model_shape(t), model_shape(a)
    assert ts is not None and as_ is not None
    result = check_assistant_pair(load_vocab(target, use_cache=False), ts,
                                  load_vocab(assistant, use_cache=False), as_)
    return [f"{c.rule}: {c.detail}" for c in result.checks if not c.ok]


def test_pairing_names_each_failed_rule_in_one_sentence(models: dict[str, Path],
                                                        tmp_path_factory: pytest.TempPathFactory
                                                        ) -> None:
    d = tmp_path_factory.mktemp("pairs")
    assert _pair(models["target"], models["assistant"]) == []
    llama = write_tiny_llama(d / "llama.gguf")
    narrow = write_tiny_gemma4_assistant(d / "narrow.gguf", n_embd_target=32)
    other_vocab = write_tiny_gemma4_assistant(d / "vocab.gguf", n_vocab=700)
    failures = {
        "arch": _pair(llama, models["assistant"]),
        "hidden": _pair(models["target"], narrow),
        "vocab": _pair(models["target"], other_vocab),
    }
    assert [f.split(":")[0] for f in failures["arch"]] == ["assistant_arch"]
    assert "drafts for gemma4, not for llama" in failures["arch"][0]
    assert [f.split(":")[0] for f in failures["hidden"]] == ["hidden_size"]
    assert "32 elements" in failures["hidden"][0] and "64" in failures["hidden"][0]
    assert [f.split(":")[0] for f in failures["vocab"]] == ["vocab_size"]
    for f in sum(failures.values(), []):
        assert "\n" not in f and f.endswith((".", ")"))


def test_the_picker_ranks_a_paired_assistant_as_one(models: dict[str, Path]) -> None:
    infos = {k: inspect_gguf(p, use_cache=False) for k, p in models.items()}
    ranked = rank_drafts(load_vocab(models["target"], use_cache=False), infos["target"].file_size,
                         [("assistant", load_vocab(models["assistant"], use_cache=False),
                           infos["assistant"].file_size)],
                         target_shape=model_shape(infos["target"]),
                         shape_of=lambda k: model_shape(infos[k]))
    assert [(c.key, c.assistant, c.compatible) for c in ranked] == [("assistant", True, True)]
    assert ranked[0].result.checks[0].rule == "assistant_arch"


def test_an_incompatible_assistant_is_not_loaded(models: dict[str, Path],
                                                 tmp_path_factory: pytest.TempPathFactory) -> None:
    narrow = write_tiny_gemma4_assistant(tmp_path_factory.mktemp("narrow") / "n.gguf",
                                         n_embd_target=32)
    with Session.open(SessionConfig(target_path=models["target"], n_ctx=128, n_threads=1)) as s:
        with pytest.raises(IncompatibleDraftError, match="hidden_size: The assistant takes"):
            s.set_draft_model(narrow)
        assert s.assistant_model is None
        r = run(s, prompts()[0], SAMPLINGS[0], SpeculationConfig(mode="mtp"))
        assert r.finished.note is not None and "no MTP assistant (gemma4-assistant)" in r.finished.note


def test_an_assistant_opened_as_the_target_is_refused_in_one_sentence(
        models: dict[str, Path]) -> None:
    with pytest.raises(ModelLoadError) as info:
        Session.open(SessionConfig(target_path=models["assistant"], n_ctx=128, n_threads=1))
    msg = str(info.value)
    assert msg == ("assistant.gguf is an MTP assistant (gemma4-assistant), not a model to "
                   "chat with: choose it as the MTP drafter of a gemma4 model.")


def test_the_probe_child_runs_the_pair(models: dict[str, Path]) -> None:
    alone = check_loads(models["assistant"], use_cache=False)
    assert alone.outcome == "refused" and alone.stage == "load"
    assert check_loads(models["assistant"], target=models["target"], use_cache=False).loads
    assert check_loads(models["target"], use_cache=False).mtp is None


def test_the_command_line_takes_the_assistant(models: dict[str, Path],
                                              capsys: pytest.CaptureFixture[str]) -> None:
    from app.cli.main import main

    common = ["generate", "--model", str(models["target"]), "--threads", "1",
              "--max-tokens", "24", "--json", "--fixed-k", "hello world"]
    assert main([*common, "--mtp-assistant", str(models["assistant"])]) == 0
    spec = json.loads(capsys.readouterr().out)
    assert main([*common[:-1], "--no-spec", common[-1]]) == 0
    plain = json.loads(capsys.readouterr().out)
    assert spec["text"] == plain["text"]
    assert spec["stats"]["mode"] == "mtp" and spec["stats"]["accepted"] > 0
    assert main([*common, "--mtp-assistant", str(models["assistant"]), "--prompt-lookup"]) != 0
    assert "--mtp-assistant drafts with MTP" in capsys.readouterr().err
    assert main([*common, "--draft", str(models["assistant"])]) != 0
    assert "assistant.gguf is an MTP assistant; give it with --mtp-assistant." in (
        capsys.readouterr().err)
    assert main([*common, "--mtp-assistant", str(models["target"])]) != 0
    assert "target.gguf is a gemma4 model, not an MTP assistant" in capsys.readouterr().err
    # a broken file is told as broken, not as the wrong kind of model
    broken = models["assistant"].with_name("broken-assistant.gguf")
    broken.write_bytes(models["assistant"].read_bytes()[:200_000])
    assert main([*common, "--mtp-assistant", str(broken)]) != 0
    err = capsys.readouterr().err
    assert "not an MTP assistant" not in err and "broken-assistant.gguf" in err
    assert "Traceback" not in err


def test_serve_drafts_with_the_assistant_per_request(models: dict[str, Path],
                                                     tmp_path_factory: pytest.TempPathFactory
                                                     ) -> None:
    """``serve --mtp-assistant``: a request asking ``"speculation": {"mode": "mtp"}``
    drafts with the assistant (llama-server's timings count its tokens) through the real
    ``openai`` client, and the text is the plain reply's."""
    import os
    import subprocess
    import sys

    import openai

    repo = Path(__file__).resolve().parents[2]
    proc = subprocess.Popen(
        [sys.executable, "-m", "app", "serve", "--model", str(models["target"]),
         "--mtp-assistant", str(models["assistant"]), "--port", "0", "--n-ctx", "512",
         "--threads", "1"],
        cwd=repo, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
        env={**os.environ, "TANDEM_HOME": str(tmp_path_factory.mktemp("serve-assistant"))})
    try:
        assert proc.stdout is not None
        base = proc.stdout.readline().strip()
        assert base.startswith("http://"), proc.stderr.read() if proc.stderr else ""
        client = openai.OpenAI(base_url=base, api_key="unused", max_retries=0)
        texts = {}
        for mode in ("mtp", "off"):
            r = client.chat.completions.create(
                model="target", messages=[{"role": "user", "content": "hello there"}],
                max_tokens=40, temperature=0,
                extra_body={"speculation": {"mode": mode, "draft_max": 3, "adaptive": False}})
            extra = r.model_extra or {}
            assert extra["tandem"]["mode"] == mode
            if mode == "mtp":
                assert 0 < extra["timings"]["draft_n_accepted"] <= extra["timings"]["draft_n"]
            texts[mode] = r.choices[0].message.content
        assert texts["mtp"] == texts["off"]
    finally:
        proc.terminate()
        proc.wait(60)


def test_the_chat_service_loads_the_assistant_as_the_drafter_model(models: dict[str, Path]
                                                                  ) -> None:
    """The window's path: the target loads, then the assistant in the drafter model's
    place (the model bar names it), and an MTP reply drafts with it."""
    from app.chat.service import ChatService

    service = ChatService()
    try:
        service.load(SessionConfig(target_path=models["target"], n_ctx=256,
                                   n_threads=1)).result(120)
        changed = service.set_draft_model(models["assistant"]).result(120)
        assert (changed.path, changed.name) == (models["assistant"], "tiny-gemma4-assistant-test")
        assert_mtp_reply_drafts(service)
    finally:
        service.shutdown()


def assert_mtp_reply_drafts(service: ChatService) -> None:
    """A greedy 24-token MTP reply through ``service`` drafts, with the assistant,
    without a note."""
    from app.engine.chat import ChatMessage

    fin = service.reply((ChatMessage("user", "hello"),),
                        SamplingParams(temperature=0.0, max_tokens=24),
                        SpeculationConfig(mode="mtp", draft_max=3, adaptive=False)).result(120)
    assert fin.stats.mode is MTP and fin.stats.accepted > 0 and fin.note is None


def test_a_truncated_file_keeps_the_loaded_assistant(models: dict[str, Path],
                                                      tmp_path: Path) -> None:
    """The window's drafter button on a broken file: the change fails on the file's
    header, the service says the assistant stays loaded (DraftKept) and the next MTP
    reply drafts with it."""
    from app.chat.events import DraftKept, JobFailed
    from app.chat.service import ChatService

    broken = tmp_path / "broken.gguf"
    broken.write_bytes(models["assistant"].read_bytes()[:200_000])
    service = ChatService()
    seen: list[object] = []
    service.subscribe(seen.append)
    try:
        service.load(SessionConfig(target_path=models["target"], n_ctx=256,
                                   n_threads=1)).result(120)
        service.set_draft_model(models["assistant"]).result(120)
        job = service.set_draft_model(broken)
        with pytest.raises(Exception, match="lies outside the file"):
            job.result(120)
        kept = [e for e in seen if isinstance(e, (DraftKept, JobFailed)) and e.job_id == job.id]
        assert [type(e) for e in kept] == [DraftKept, JobFailed]
        assert kept[0] == DraftKept(job.id, models["assistant"], "tiny-gemma4-assistant-test", True)
        assert_mtp_reply_drafts(service)
    finally:
        service.shutdown()


def test_an_assistant_opened_as_the_target_keeps_the_loaded_model(
        models: dict[str, Path], tmp_path: Path) -> None:
    """Open GGUF… on an assistant while a model is loaded (chat controller, fake engine):
    the assistant is refused in one sentence before anything is unloaded, the service
    says so (TargetKept) and the window keeps the model it had."""
    from app.chat.events import JobFailed, TargetKept
    from tests.chat.fakes import Script
    from tests.chat.test_controller import Rig

    rig = Rig(tmp_path, Script())
    try:
        rig.start()
        rig.pump.until(rig.c, lambda: not rig.c.loading)
        before = rig.c.model_info
        assert before is not None
        rig.c.load_model(models["assistant"])
        rig.pump.until(rig.c, lambda: not rig.c.loading)
        assert [type(e) for e in rig.pump.seen[-2:]] == [TargetKept, JobFailed]
        assert rig.c.model_info == before
        assert rig.settings.model.target_path == before.target_path
        assert rig.view.errors[-1].message.startswith(
            "assistant.gguf is an MTP assistant (gemma4-assistant), not a model to chat with")
    finally:
        rig.c.close()


def test_the_window_loads_a_saved_assistant_after_the_target_in_mtp_mode(
        models: dict[str, Path], tmp_path: Path) -> None:
    """The chat controller (fake service): with MTP chosen and an assistant saved as the
    drafter model, loading the target loads the assistant too; a saved draft model is
    not loaded in MTP mode."""
    from tests.chat.fakes import Script
    from tests.chat.test_controller import Rig

    for draft, loaded in ((models["assistant"], True), (models["target"], False)):
        rig = Rig(tmp_path, Script())
        rig.settings.model.draft_path = draft
        rig.settings.speculation = SpeculationConfig(mode="mtp")
        rig.start()
        rig.pump.until(rig.c, lambda: not rig.c.loading)
        assert rig.c.model_info is not None
        assert (rig.c.model_info.draft_path == draft) is loaded
        rig.c.close()


@pytest.mark.parametrize("flash_attn", [0, 1], ids=["fa-off", "fa-on"])
def test_the_assistant_reads_the_cache_as_the_target_laid_it_out(models: dict[str, Path],
                                                                 flash_attn: int) -> None:
    """The assistant's context (:func:`assistant_context`, as the drafter and the probe
    make it) asks for the target's KV settings: with flash attention
    off, llama.cpp lays V out transposed, and an assistant context left at the default
    (auto: on here) read it wrongly (25 of 30 next tokens right instead of 30, measured
    on this pair). Unperturbed, the assistant predicts every next token here."""
    from app.engine.drafter_kinds.mtp import AssistantDrafter, assistant_context
    from app.engine.llama import LlamaContext, LlamaModel

    with LlamaModel(models["target"]) as t, LlamaModel(models["copy"]) as a:
        tctx = LlamaContext(t, n_ctx=256, n_threads=1, flash_attn=flash_attn)
        drafter = AssistantDrafter(tctx, assistant_context(a, tctx))
        drafter.listen()
        tokens = [1, *range(260, 280)]
        tctx.decode(tokens, 0)
        right = 0
        for _ in range(30):
            token = int(tctx.logits(-1).argmax())
            draft = drafter.draft([*tokens, token], 1)
            tctx.decode([token], len(tokens))
            tokens.append(token)
            right += draft == [int(tctx.logits(-1).argmax())]
        drafter.close()
        tctx.close()
    assert right == 30


def test_the_load_check_times_the_pair_and_auto_prices_the_assistant_with_it(
        paired: Session) -> None:
    """The load check that ran the pair when the assistant was loaded timed it too: c of
    one assistant step over one target step, remembered in the pair's verdict. Before
    the assistant has drafted, Auto prices it with the published α and that c at the
    default k, and says c was measured by the load check."""
    from app.catalog.loadcheck import cached_verdict

    assistant = paired.assistant_model
    assert assistant is not None
    verdict = cached_verdict(assistant.path, target=paired.target.path)
    assert verdict is not None and verdict.mtp == "ok"
    assert verdict.mtp_cost_ratio is not None and verdict.mtp_cost_ratio > 0
    spec = SpeculationConfig(mode=SpecMode.AUTO, draft_max=8)
    head = {e.mode: e for e in estimate_drafters(paired, [], [], spec)}[MTP]
    assert (head.prior_acceptance, head.cost_ratio, head.cost_from_replies) == (
        MTP_PRIOR_ACCEPTANCE, verdict.mtp_cost_ratio, False)
    assert set(head.predicted) == {MTP_K}
    words = auto_explanation(choose_drafter([head]))
    assert f"c = {verdict.mtp_cost_ratio:.2f} measured by the load check" in words, words


def test_auto_prices_the_assistant_from_its_replies(paired: Session) -> None:
    """A loaded assistant is MTP for Auto: once a reply measured c it is priced with
    the published α at the default k and its replies' c (the evidence says c came from
    the replies), and once α is measured at every k Auto offers."""
    spec = SpeculationConfig(mode=SpecMode.AUTO, draft_max=8)
    drafted = ReplyObservation(MTP, 24, 0.4, 0, 0, 0.25)  # drafted, nothing verified yet
    head = {e.mode: e for e in estimate_drafters(paired, [], [drafted], spec)}[MTP]
    assert (head.prior_acceptance, head.cost_ratio, head.cost_from_replies) == (
        MTP_PRIOR_ACCEPTANCE, 0.25, True)
    assert set(head.predicted) == {MTP_K}
    choice = choose_drafter([head])
    assert choice.evidence[0].cost_from_replies
    assert AutoChoice.from_dict(choice.to_dict()) == choice
    words = auto_explanation(choice)
    assert "85% acceptance of MTP heads and c = 0.25 measured over its last 1 reply" in words
    assert "load check" not in words
    r = run(paired, prompts()[0], SAMPLINGS[0], SpeculationConfig(mode="mtp", draft_max=3,
                                                                  adaptive=False))
    seen = ReplyObservation.from_stats(r.stats.to_dict())
    assert seen is not None and seen.verified > 0 and seen.draft_cost_ratio is not None
    head = {e.mode: e for e in estimate_drafters(paired, [], [seen], spec)}[MTP]
    assert head.prior_acceptance is None and head.cost_ratio == seen.draft_cost_ratio
    assert set(head.predicted) == {2, 4, 8} and head.evidence(4).source != "prior"


def test_a_restored_prefix_never_drafts_from_an_older_contexts_row(
        models: dict[str, Path]) -> None:
    """A reply whose prefill puts back a saved state (the prefix cache) decodes nothing:
    a row the assistant kept from the previous reply may hold the same token at the
    same position in another context. The first round is then plain; drafting resumes
    from the target's next decode."""
    from app.engine.drafter_kinds.mtp import AssistantDrafter, assistant_context
    from app.engine.llama import LlamaContext, LlamaModel

    with LlamaModel(models["target"]) as t, LlamaModel(models["copy"]) as a:
        tctx = LlamaContext(t, n_ctx=256, n_threads=1)
        drafter = AssistantDrafter(tctx, assistant_context(a, tctx))
        older = [1, *range(300, 319), 290]  # the same token at the same last position
        newer = [1, *range(260, 279), 290]
        x = 270
        drafter.listen()
        tctx.decode(newer, 0)
        saved = tctx.state_bytes()
        tctx.decode([x], len(newer))
        after_x = int(tctx.logits(-1).argmax())
        reference = drafter.draft([*newer, x, after_x], 2)  # drafted from newer's rows
        tctx.clear()
        tctx.decode(older, 0)  # the previous reply: the assistant keeps its rows
        token = int(tctx.logits(-1).argmax())
        assert drafter.draft([*older, token], 3)  # a live row: it drafts
        drafter.listen()  # the next reply starts; its prefill puts `newer` back
        assert tctx.load_state(saved)
        assert drafter.draft([*newer, x], 3) == []
        tctx.decode([x], len(newer))
        assert int(tctx.logits(-1).argmax()) == after_x
        assert len(reference) == 2 and drafter.draft([*newer, x, after_x], 2) == reference
        drafter.close()
        tctx.close()


def test_an_assistants_reply_is_worded_as_mtp(models: dict[str, Path], paired: Session,
                                              capsys: pytest.CaptureFixture[str]) -> None:
    """The footer and ``generate --compare`` name the drafter "MTP", true of an assistant
    as of heads in the target (the model bar names the assistant's file)."""
    from app.cli.main import main
    from app.ui.chat.chat_view import reply_footer

    r = run(paired, prompts()[0], SAMPLINGS[0], SpeculationConfig(mode="mtp", draft_max=3,
                                                                  adaptive=False))
    footer = reply_footer(r.stats.to_dict(), "stop")
    assert " · MTP k=3 · " in footer and "head" not in footer
    assert main(["generate", "--model", str(models["target"]), "--threads", "1",
                 "--max-tokens", "16", "--fixed-k", "--mtp-assistant", str(models["assistant"]),
                 "--compare", "hello world"]) == 0
    out = capsys.readouterr().out
    assert "--- speculation on (MTP, k = " in out and "head" not in out


def test_models_inspect_tells_an_assistant_from_a_model_that_does_not_load(
        models: dict[str, Path], capsys: pytest.CaptureFixture[str]) -> None:
    """An MTP assistant's header is fine: ``models inspect`` says it loads beside its
    target only (exit 0, ``loads`` null), instead of "loads no" and exit 2."""
    from app.cli.main import main

    assert main(["models", "inspect", str(models["assistant"])]) == 0
    out = capsys.readouterr().out
    assert "with a gemma4 target only" in out and "loads           no" not in out
    assert main(["models", "inspect", "--json", str(models["assistant"])]) == 0
    data = json.loads(capsys.readouterr().out)
    assert data["loads"] is None and data["load_error"] is None
