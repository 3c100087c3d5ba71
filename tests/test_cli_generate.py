"""``python -m app generate``: real models, JSON output, invariants, and clean errors."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]

CODE_PROMPT = (
    "Rename the variable `total` to `running_sum`.\n\n"
    "def accumulate(values):\n"
    "    total = 0\n"
    "    for v in values:\n"
    "        total = total + v\n"
    "    return total\n\n"
    "After renaming:\n\n"
    "def accumulate(values):\n"
)


def cli(*args: str, timeout: float = 300) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "app", *args],
        cwd=REPO, capture_output=True, text=True, timeout=timeout,
    )


def check_stats(out: dict, max_tokens: int) -> None:
    s = out["stats"]
    assert s["accepted"] <= s["verified"] <= s["proposed"]
    assert s["emitted"] == len(out["token_ids"]) <= max_tokens
    assert sum(s["accepted_at"]) == s["accepted"]
    if out["finish_reason"] == "length":
        assert s["emitted"] == s["accepted"] + s["rounds"]
    for key in ("acceptance_rate", "mean_acceptance_length", "draft_cost_ratio",
                "predicted_speedup", "decode_tps", "ttft", "prefill_tps", "end_to_end_tps",
                "draft_time", "target_time", "verified_at"):
        assert key in s


@pytest.mark.slow
def test_generate_with_the_target_as_its_own_draft(gemma_path: Path) -> None:
    r = cli("generate", "--model", str(gemma_path), "--draft", str(gemma_path), "--json",
            "--max-tokens", "32", "--threads", "2", "--fixed-k",  # the draft model's default k
            "The three primary colors are")
    assert r.returncode == 0, r.stderr
    out = json.loads(r.stdout)
    assert out["text"] and out["finish_reason"] in ("length", "stop")
    check_stats(out, 32)
    s = out["stats"]
    assert s["mode"] == "draft-model" and s["verified"] > 0 and s["draft_max"] == 4
    assert s["acceptance_rate"] > 0.8  # the same model, up to batch-size numerics
    assert s["draft_cost_ratio"] > 0.5  # a draft as large as the target is not cheap
    assert s["predicted_speedup"] is not None


@pytest.mark.slow
def test_generate_with_prompt_lookup_on_a_code_edit(gemma_path: Path) -> None:
    # --fixed-k: whether the cost-aware default verifies these drafts depends on this
    # CPU's measured pass costs (replayed deterministically in tests/engine/test_policy.py)
    r = cli("generate", "--model", str(gemma_path), "--prompt-lookup", "--fixed-k", "--json",
            "--max-tokens", "48", "--threads", "2", CODE_PROMPT)
    assert r.returncode == 0, r.stderr
    out = json.loads(r.stdout)
    check_stats(out, 48)
    s = out["stats"]
    assert s["mode"] == "prompt-lookup"
    assert s["accepted"] > 10  # the edit repeats the input: lookup drafts land
    assert s["mean_acceptance_length"] > 1.3
    plain = cli("generate", "--model", str(gemma_path), "--no-spec", "--json",
                "--max-tokens", "48", "--threads", "2", CODE_PROMPT)
    assert plain.returncode == 0, plain.stderr
    plain_out = json.loads(plain.stdout)
    assert plain_out["stats"]["mode"] == "off" and plain_out["stats"]["verified"] == 0
    assert plain_out["stats"]["acceptance_rate"] is None


@pytest.mark.slow
def test_generate_compare_measures_the_first_difference(gemma_path: Path) -> None:
    from app.engine.measure.prompts import load_prompts

    # type-hints at k = 4, greedy, 40 tokens: parted from plain decoding when measured
    text = next(p for p in load_prompts("builtin:code") if p.name == "type-hints").plain
    r = cli("generate", "--model", str(gemma_path), "--prompt-lookup", "--fixed-k",
            "--draft-max", "4", "--max-tokens", "40", "--threads", "2", "--compare", "--json",
            text)
    assert r.returncode == 0, r.stderr
    out = json.loads(r.stdout)
    assert out["off"]["stats"]["mode"] == "off" and out["on"]["stats"]["mode"] == "prompt-lookup"
    if out["identical"]:
        assert out["divergence"] is None and out["off"]["token_ids"] == out["on"]["token_ids"]
    else:
        d = out["divergence"]
        assert set(d) == {"index", "off_token", "on_token", "off_text", "on_text",
                          "off_probs", "on_probs", "verdict"}
        i = d["index"]
        assert out["off"]["token_ids"][:i] == out["on"]["token_ids"][:i]
        assert out["off"]["token_ids"][i] == d["off_token"] != d["on_token"] == out["on"]["token_ids"][i]
        assert all(0.0 <= p <= 1.0 for p in d["off_probs"] + d["on_probs"])
        assert d["verdict"] == "near-tie", out["words"]  # never suspect on a sound engine
        assert out["words"].startswith(f"At token {i + 1} plain decoding chose ")
    words = cli("generate", "--model", str(gemma_path), "--prompt-lookup", "--fixed-k",
                "--draft-max", "4", "--max-tokens", "40", "--threads", "2", "--compare", text)
    assert words.returncode == 0, words.stderr
    assert "--- speculation off ---" in words.stdout and "--- speculation on" in words.stdout
    assert ("Identical" in words.stdout) == out["identical"]
    if not out["identical"]:
        assert out["words"] in words.stdout
    bad = cli("generate", "--model", str(gemma_path), "--no-spec", "--compare", "x")
    assert bad.returncode == 2 and "--compare" in bad.stderr


def test_generate_streams_text_without_json(tiny_target: Path) -> None:
    r = cli("generate", "--model", str(tiny_target), "--max-tokens", "8", "hello")
    assert r.returncode == 0, r.stderr
    assert len(r.stdout.strip()) > 0
    assert not r.stdout.lstrip().startswith("{")


BAD_INPUT = ["missing", "not-gguf", "truncated", "incompatible", "bad-option", "folder", "fifo",
             "dangling-link", "draft-min-over-k", "system-without-chat", "absurd-threads",
             "key-without-server"]


@pytest.mark.parametrize("case", BAD_INPUT)
def test_bad_input_gives_one_line_and_status_2(
    case: str, tmp_path: Path, tiny_target: Path, smollm_path: Path
) -> None:
    """Each says what happened and what to do, in the app's words."""
    extra: list[str] = []
    if case == "folder":
        (tmp_path / "inside.gguf").write_bytes(b"")
        args = ["--model", str(tmp_path)]
        expect = "is a folder, not a GGUF file: choose a .gguf file inside it. It holds inside.gguf"
    elif case == "fifo":
        if not hasattr(os, "mkfifo"):
            pytest.skip("no named pipes here")
        os.mkfifo(tmp_path / "pipe.gguf")  # opening it to read would block forever
        args = ["--model", str(tmp_path / "pipe.gguf")]
        expect = "is a named pipe, not a GGUF file"
    elif case == "dangling-link":
        (tmp_path / "link.gguf").symlink_to(tmp_path / "gone.gguf")
        args = ["--model", str(tmp_path / "link.gguf")]
        expect = "is a link to"
    elif case == "draft-min-over-k":
        args = ["--model", str(tiny_target), "--prompt-lookup", "--draft-max", "2", "--draft-min", "3"]
        expect = "Invalid option --draft-min: draft_min (3) is larger than the draft length k (2)"
    elif case == "system-without-chat":
        args = ["--model", str(tiny_target), "--system", "Be brief."]
        expect = "Invalid option --system: a system prompt needs a chat prompt: add --chat"
    elif case == "key-without-server":
        args = ["--model", str(tiny_target), "--api-key-env", "SOME_KEY"]
        expect = "Invalid option: --api-key-env names the API key of a remote server"
    elif case == "absurd-threads":
        args = ["--model", str(tiny_target), "--threads", "1000"]
        expect = "Invalid option --threads: 1000 threads is more than this computer can use"
    elif case == "missing":
        args = ["--model", str(tmp_path / "nope.gguf")]
        expect = "not found"
    elif case == "not-gguf":
        p = tmp_path / "notes.gguf"
        p.write_text("hello, I am not a model")
        args = ["--model", str(p)]
        expect = 'notes.gguf is not a usable GGUF file: it does not start with the GGUF magic, ' \
            '"GGUF": it is text (it starts \u201chello, I am not a model\u201d), not a model'
    elif case == "truncated":
        p = tmp_path / "half.gguf"
        data = tiny_target.read_bytes()
        p.write_bytes(data[: len(data) // 2])
        args = ["--model", str(p)]
        expect = "half.gguf is not a usable GGUF file: "  # the window's words
    elif case == "incompatible":
        args = ["--model", str(tiny_target), "--draft", str(smollm_path)]
        expect = "cannot draft"
    elif case == "bad-option":
        args = ["--model", str(tiny_target), "--draft-max", "0"]
        expect = "Invalid option --draft-max"
    r = cli("generate", *args, *extra, "--max-tokens", "4", "hi")
    assert r.returncode == 2
    lines = [ln for ln in r.stderr.splitlines() if ln.strip()]
    assert len(lines) == 1, r.stderr
    assert lines[0].startswith("error: ") and expect in lines[0]
    assert "Traceback" not in r.stderr


def test_ctrl_c_prints_the_partial_reply_and_exits_with_130(tiny_model_dir: Path) -> None:
    """Ctrl-C stops the reply like the Stop button: what was written is printed with its
    statistics, and the exit status is 130 (docs/cli.md), so a script can tell a reply
    cut short from a finished one."""
    import re
    import signal

    from tests.synthetic import write_tiny_llama

    path = write_tiny_llama(tiny_model_dir / "tiny-sigint.gguf", seed=5, n_embd=256, n_ff=1024,
                            n_layer=4, n_ctx_train=65536)
    proc = subprocess.Popen(
        [sys.executable, "-m", "app", "generate", "--model", str(path),
         "--n-ctx", "65536", "--max-tokens", "60000", "hello"],
        cwd=REPO, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
    )
    assert proc.stdout is not None
    first = proc.stdout.read(1)  # blocks until the reply streams: loaded and generating
    assert first and proc.poll() is None
    proc.send_signal(signal.SIGINT)
    rest, err_bytes = proc.communicate(timeout=60)
    err = err_bytes.decode("utf-8", "replace")
    assert proc.returncode == 130, err
    assert "Traceback" not in err
    m = re.search(r"\[cancelled\] (\d+) tokens", err)
    assert m is not None, err  # the reply stopped at the Ctrl-C, and its statistics printed
    assert 0 < int(m.group(1)) < 60000
    assert (first + rest).strip()  # the partial reply was printed


def test_an_empty_stop_string_is_refused_as_the_api_refuses_it(
        capsys: pytest.CaptureFixture[str]) -> None:
    from app.cli.main import build_parser

    parser = build_parser()
    with pytest.raises(SystemExit) as exit_:
        parser.parse_args(["generate", "hi", "--model", "m.gguf", "--stop", ""])
    assert exit_.value.code == 2
    assert "a stop string cannot be empty" in capsys.readouterr().err
    args = parser.parse_args(["generate", "hi", "--model", "m.gguf", "--stop", "\n\n"])
    assert args.stop == ["\n\n"]


def test_chat_on_a_model_without_a_template_says_so(tiny_target: Path, smollm_path: Path) -> None:
    """--chat on a base model (no chat template in the GGUF) writes a plain transcript,
    which such a model may only continue (Gemma 3 270M echoed the request): the note
    says so, as the window's status bar does; a model with a template gets no note."""
    r = cli("generate", "--model", str(tiny_target), "--chat", "--max-tokens", "4",
            "--threads", "1", "hello")
    assert r.returncode == 0, r.stderr
    assert (f"note: {tiny_target.name} has no chat template: --chat wrote a plain "
            "User/Assistant transcript") in r.stderr
    r = cli("generate", "--model", str(smollm_path), "--chat", "--max-tokens", "4",
            "--threads", "1", "hello")
    assert r.returncode == 0, r.stderr
    assert "no chat template" not in r.stderr


def test_ctrl_c_stops_a_bench_and_reports_the_runs_done(tiny_model_dir: Path) -> None:
    """Ctrl-C during ``bench`` stops after the run in progress: the runs done are
    reported (``cancelled`` true, with a note) and the exit status is 130. Nothing is
    printed as an exception ignored: a KeyboardInterrupt raised inside llama.cpp's abort
    callback would be dropped there, and the bench would go on."""
    import json
    import signal

    from tests.synthetic import write_tiny_llama

    path = write_tiny_llama(tiny_model_dir / "tiny-bench-sigint.gguf", seed=5, n_embd=256,
                            n_ff=1024, n_layer=4, n_ctx_train=8192)
    proc = subprocess.Popen(
        [sys.executable, "-m", "app", "bench", "--model", str(path), "--prompt-lookup",
         "--prompts", "builtin:code", "--limit", "1", "--repeat", "20", "--no-warmup",
         "--n-ctx", "8192", "--max-tokens", "400", "--json"],
        cwd=REPO, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
    )
    assert proc.stderr is not None
    seen = []
    for line in proc.stderr:  # the progress lines: stop once a run has finished
        seen.append(line)
        if line.startswith("[1/"):
            break
    assert proc.poll() is None, "".join(seen)
    proc.send_signal(signal.SIGINT)
    out, err = proc.communicate(timeout=120)
    assert proc.returncode == 130, "".join(seen) + err
    assert "Traceback" not in err and "Exception ignored" not in err
    report = json.loads(out)
    assert report["cancelled"] is True and 1 <= len(report["runs"]) < 40
    assert any(n.startswith("Stopped with Ctrl-C") for n in report["notes"])
    assert all(c["suspect"] == 0 for c in report["configs"])
