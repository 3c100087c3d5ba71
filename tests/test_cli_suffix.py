"""``python -m app generate --suffix``: the suffix drafter from the command line."""

from __future__ import annotations

import json
from pathlib import Path

from tests.test_cli_generate import check_stats, cli


def test_generate_with_the_suffix_drafter(tiny_target: Path) -> None:
    # a repetitive prompt: the context alone gives the drafter matches
    prompt = "the model and the draft the model and the draft the model and the draft the"
    r = cli("generate", "--model", str(tiny_target), "--suffix", "--json", "--max-tokens", "24",
            "--threads", "2", "--fixed-k", "--draft-max", "6", prompt)
    assert r.returncode == 0, r.stderr
    out = json.loads(r.stdout)
    check_stats(out, 24)
    assert out["stats"]["mode"] == "suffix" and out["stats"]["draft_max"] == 6
    plain = cli("generate", "--model", str(tiny_target), "--no-spec", "--json", "--max-tokens",
                "24", "--threads", "2", prompt)
    assert json.loads(plain.stdout)["token_ids"] == out["token_ids"]
    both = cli("generate", "--model", str(tiny_target), "--suffix", "--prompt-lookup", prompt)
    assert both.returncode == 2 and "not allowed with" in both.stderr


def test_generate_with_the_auto_choice(tiny_target: Path) -> None:
    prompt = "the model and the draft the model and the draft the"
    r = cli("generate", "--model", str(tiny_target), "--auto", "--json", "--max-tokens", "12",
            "--threads", "2", prompt)
    assert r.returncode == 0, r.stderr
    out = json.loads(r.stdout)
    check_stats(out, 12)
    # one reply with nothing earlier: nothing to score, so auto's prior (suffix) runs
    assert (out["stats"]["mode"], out["stats"]["draft_max"]) == ("suffix", 16)  # default k
    assert "(prior)" in r.stderr


def test_bench_auto_with_a_costly_draft_runs_as_conversations(tiny_target: Path) -> None:
    # the draft is the target itself: as costly as it gets (the bench the lead runs with
    # Gemma 3 270M on builtin:agent; here only that it runs and reports what auto chose)
    r = cli("bench", "--model", str(tiny_target), "--draft", str(tiny_target), "--auto",
            "--prompts", "builtin:agent", "--limit", "1", "--repeat", "1", "--max-tokens", "6",
            "--k", "8", "--threads", "2", "--no-warmup", "--json", "-q")
    assert r.returncode == 0, r.stderr
    out = json.loads(r.stdout)
    assert [c["label"] for c in out["configs"]] == ["off", "auto"]
    choices = out["settings"]["auto_choices"]
    assert len(choices) == len([x for x in out["runs"] if x["label"] == "auto"]) >= 3
    assert all(c["mode"] in ("off", "prompt-lookup", "suffix", "draft-model") for c in choices)
    assert any(n.startswith("auto chose: ") for n in out["notes"])
