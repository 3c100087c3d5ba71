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
