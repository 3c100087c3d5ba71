"""Multi-turn prompt sets: the format's loader and validation, turn prompts that hold the
earlier replies, and the conversation runner with the reply index filled as the app does."""

from __future__ import annotations

import json
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

from app.cli.report import bench_notes
from app.engine.measure.multiturn import (
    Conversation,
    Turn,
    is_multiturn,
    load_conversations,
    prepare_turn,
    run_conversations,
)
from app.engine.measure.prompts import load_prompts
from app.engine.session import Session, SessionConfig
from app.errors import PromptSetError
from app.options import SamplingParams, SpecMode, SpeculationConfig

REPO = Path(__file__).resolve().parents[2]


def test_builtin_agent_set_loads() -> None:
    convs = load_conversations("builtin:agent")
    assert is_multiturn("builtin:agent") and not is_multiturn("builtin:code")
    assert len(convs) >= 5
    assert sum(len(c.turns) for c in convs) >= 15
    assert all(len(c.turns) >= 3 for c in convs)
    names = [c.name for c in convs]
    assert len(set(names)) == len(names)
    for c in convs:
        for t in c.turns:
            assert t.plain and t.chat and t.stop
    with pytest.raises(PromptSetError, match="multi-turn"):
        load_prompts("builtin:agent")


def test_single_turn_sets_become_one_turn_conversations() -> None:
    convs = load_conversations("builtin:code")
    prompts = load_prompts("builtin:code")
    assert [c.name for c in convs] == [p.name for p in prompts]
    assert all(len(c.turns) == 1 for c in convs)
    assert convs[0].turns[0].plain == prompts[0].plain
    assert convs[0].turns[0].stop == prompts[0].stop


def _write(tmp_path: Path, name: str, data: object) -> str:
    path = tmp_path / name
    path.write_text(data if isinstance(data, str) else json.dumps(data), encoding="utf-8")
    return str(path)


def test_format_variants(tmp_path: Path) -> None:
    spec = _write(tmp_path, "a.json", {"conversations": [
        {"name": "x", "system": "be brief", "turns": ["hello", {"plain": "P", "chat": "C",
                                                                "stop": "\n"}]},
        {"turns": [{"text": "only"}]},
    ]})
    assert is_multiturn(spec)
    a, b = load_conversations(spec)
    assert a == Conversation("x", (Turn("hello", "hello"), Turn("P", "C", ("\n",))), "be brief")
    assert b.name == "conversation-2" and b.turns == (Turn("only", "only"),)
    lines = "\n".join(json.dumps({"name": f"c{i}", "turns": ["t1", "t2"]}) for i in range(2))
    spec = _write(tmp_path, "b.jsonl", lines + "\n")
    assert is_multiturn(spec)
    assert [c.name for c in load_conversations(spec)] == ["c0", "c1"]


@pytest.mark.parametrize(
    ("data", "message"),
    [
        ({"conversations": []}, "no conversations"),
        ({"conversations": [{"turns": []}]}, "non-empty 'turns'"),
        ({"conversations": [{"turns": ["a"], "turn": []}]}, "unknown key"),
        ({"conversations": [{"turns": [{"txt": "a"}]}]}, r"conversation 1 \('conversation-1'\), turn 1: unknown key"),
        ({"conversations": [{"turns": [{"text": "a", "stop": [1]}]}]}, "'stop' must be"),
        ({"conversations": [{"turns": [""]}]}, "turn 1 is empty"),
        ({"conversations": [{"turns": [3]}]}, "neither a string nor an object"),
        ({"conversations": [{"turns": ["a"], "system": 5}]}, "'system' must be"),
        ({"conversations": [{"turns": ["a"], "name": ""}]}, "'name' must be"),
        ({"conversations": [["a"]]}, "is not an object"),
        ({"conversations": [{"turns": ["a"]}], "extra": 1}, "unknown key"),
    ],
)
def test_malformed_sets_are_refused_with_where(tmp_path: Path, data: object, message: str) -> None:
    spec = _write(tmp_path, "bad.json", data)
    with pytest.raises(PromptSetError, match=message):
        load_conversations(spec)


def test_missing_and_broken_files(tmp_path: Path) -> None:
    with pytest.raises(PromptSetError, match="not valid JSON"):
        load_conversations(_write(tmp_path, "broken.jsonl", '{"turns": ["a"]}\n{oops\n'))
    with pytest.raises(PromptSetError, match="'conversations' list"):
        load_conversations(_write(tmp_path, "one.json", {"turns": ["a"]}))
    with pytest.raises(Exception, match="not found"):
        load_conversations(str(tmp_path / "missing.json"))


# -- with a model -------------------------------------------------------------------


@pytest.fixture(scope="module")
def session(tiny_target: Path) -> Iterator[Session]:
    s = Session.open(SessionConfig(target_path=tiny_target, n_ctx=512, n_threads=2))
    yield s
    s.close()


CONV = Conversation(
    "loop",
    (
        Turn("the model and the draft", "hello", ("\n",)),
        Turn(" and then", "again", ("\n",)),
        Turn(" and then", "once more", ("\n",)),
    ),
    system="be brief",
)


def test_turn_prompts_hold_the_earlier_replies(session: Session) -> None:
    plain = prepare_turn(session, CONV, 2, ["R1", "R2"], "plain")
    text = session.target.detokenize(list(plain.tokens)).replace("\u2581", " ")  # SPM spaces
    assert text.endswith("the model and the draftR1 and thenR2 and then")
    assert plain.stop == ("\n",) and plain.name == "loop#3"
    chat = prepare_turn(session, CONV, 1, ["R1"], "chat")
    text = session.target.detokenize(list(chat.tokens)).replace("\u2581", " ")
    # the tiny model has no template: the plain User:/Assistant: transcript
    assert "be brief" in text and "User: hello\nAssistant: R1\nUser: again\nAssistant:" in text
    with pytest.raises(ValueError):
        prepare_turn(session, CONV, 2, ["R1"], "plain")


def test_runner_shares_history_across_turns_and_conversations(session: Session) -> None:
    before = session.suffix_index
    before.add_reply([300, 301, 302])  # the user's own history is set aside, then restored
    sampling = SamplingParams(temperature=0.0, max_tokens=20)
    specs = [SpeculationConfig(mode=SpecMode.SUFFIX, draft_max=4, adaptive=False)]
    convs = [CONV, Conversation("loop-again", CONV.turns)]
    report = run_conversations(session, convs, specs, sampling, fmt="plain", repeat=2,
                               warmup=False)
    assert session.suffix_index is before and len(before) == 1
    assert not report.cancelled
    assert len(report.records) == 2 * 6 * 2  # repeats × turns × configs
    by = {(r.repeat, r.prompt_name, r.label): r for r in report.records}
    # each turn's prompt is longer by the earlier turn and reply
    lens = [by[(0, f"loop#{i}", "off")].stats.prompt_tokens for i in (1, 2, 3)]
    assert lens == sorted(lens) and len(set(lens)) == 3
    for r in report.records:
        if r.label != "off":
            assert r.mode is SpecMode.SUFFIX and r.identical_to_off is True
    # the second conversation repeats the first: its replies are drafted from history
    first = by[(0, "loop#1", "k=4")].stats
    again = by[(0, "loop-again#1", "k=4")].stats
    assert again.accepted > first.accepted
    # each repeat starts from an empty index: the same figures twice
    for name in ("loop#1", "loop-again#1", "loop-again#3"):
        assert by[(0, name, "k=4")].stats.accepted == by[(1, name, "k=4")].stats.accepted
    assert report.settings["share_history"] is True
    assert any("Multi-turn" in n for n in bench_notes(report))


def test_runner_without_history(session: Session) -> None:
    sampling = SamplingParams(temperature=0.0, max_tokens=20)
    specs = [SpeculationConfig(mode=SpecMode.SUFFIX, draft_max=4, adaptive=False)]
    convs = [CONV, Conversation("loop-again", CONV.turns)]
    shared = run_conversations(session, convs, specs, sampling, fmt="plain", repeat=1,
                               warmup=False)
    alone = run_conversations(session, convs, specs, sampling, fmt="plain", repeat=1,
                              warmup=False, share_history=False)

    def acc(rep: object, name: str) -> int:
        return next(r.stats.accepted for r in rep.records  # type: ignore[attr-defined]
                    if r.prompt_name == name and r.label == "k=4")

    assert acc(alone, "loop-again#1") == acc(alone, "loop#1")  # nothing carried over
    assert acc(shared, "loop-again#1") > acc(alone, "loop-again#1")
    with pytest.raises(ValueError):
        run_conversations(session, [], specs, sampling, fmt="plain")


def test_bench_cli_suffix_on_a_multiturn_set(tiny_target: Path, tmp_path: Path) -> None:
    spec = _write(tmp_path, "set.json", {"conversations": [
        {"name": "a", "turns": [{"plain": "the model and the draft", "chat": "hi",
                                 "stop": ["\n"]},
                                {"plain": " and then", "chat": "again", "stop": ["\n"]}]}]})
    proc = subprocess.run(
        [sys.executable, "-m", "app", "bench", "--model", str(tiny_target), "--suffix",
         "--prompts", spec, "--k", "4", "--repeat", "1", "--max-tokens", "12",
         "--threads", "2", "--json", "-q"],
        capture_output=True, text=True, cwd=REPO, timeout=300,
    )
    assert proc.returncode == 0, proc.stderr
    out = json.loads(proc.stdout)
    assert out["settings"]["mode"] == "suffix" and out["settings"]["conversations"] == 1
    assert [c["label"] for c in out["configs"]] == ["off", "k=4"]
    assert [r["prompt"] for r in out["runs"]] == ["a#1", "a#1", "a#2", "a#2"]
    assert all(r["mode"] == "suffix" for r in out["runs"] if r["label"] == "k=4")


def test_the_comparison_note_says_why_differences_were_not_measured() -> None:
    from types import SimpleNamespace

    from app.cli.report import comparison_note

    def note(recorded: bool | None) -> str | None:
        settings = {} if recorded is None else {"divergence_recorded": recorded}
        report = SimpleNamespace(counts=(17, 0, 0, 21), settings=settings,
                                 summaries=[SimpleNamespace(unmeasured=4)])
        return comparison_note(report)  # type: ignore[arg-type]

    assert "4 not measured (this run recorded no divergence" in (note(False) or "")
    assert "4 not measured (of 21 runs)" in (note(True) or "")
    assert "4 not measured (of 21 runs)" in (note(None) or "")
