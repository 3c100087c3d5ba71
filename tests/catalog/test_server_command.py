"""Launch commands for llama-server and vLLM (app/catalog/server_command.py).

Every command is run through the engine's own argument parser where the engine is here:
llama-server parses the whole command line before it acts on ``--help`` (and exits 1 on
an unknown flag or a bad value: the test shows it refuses a wrong one), and vLLM's
``vllm serve`` parser (``FlexibleArgumentParser`` with ``ServeSubcommand``) plus its
``SpeculativeConfig`` fields check the vLLM commands. Without the engine those checks skip.
"""

from __future__ import annotations

import dataclasses
import json
import os
import subprocess
from pathlib import Path

import pytest

from app.catalog.curated import load_curated_pairs
from app.catalog.server_command import (
    ModelSource,
    ServeDrafter,
    ServeEngine,
    ServeNote,
    ServePlan,
    build_command,
    catalog_assistant,
    plan_for,
    resolve_model,
    resolve_mtp_assistant,
    source_for_path,
)
from app.cli import main
from app.errors import TandemError
from app.options import SpecMode, SpeculationConfig

REPO = Path(__file__).resolve().parents[2]
PAIRS = load_curated_pairs(REPO / "resources" / "catalog" / "pairs.json")
LLAMA_SERVER = Path(os.environ.get("TANDEM_LLAMA_SERVER",
                                   REPO / "bench" / ".llama-tools" / "bin" / "llama-server"))
#: a Python that has vLLM (its own virtual environment: vLLM is not a dependency)
VLLM_PYTHON = os.environ.get("TANDEM_VLLM_PYTHON", "/work/vllm-venv/bin/python")

TARGET = resolve_model("SmolLM2-1.7B-Instruct", pairs=PAIRS)
DRAFT = resolve_model("SmolLM2-135M-Instruct", pairs=PAIRS)
GEMMA4 = resolve_model("Gemma-4-E2B-it", pairs=PAIRS)
GEMMA4_ASSISTANT = resolve_model("Gemma-4-E2B-it-assistant", pairs=PAIRS)


def every_plan(engine: ServeEngine, tmp_path: Path) -> list[ServePlan]:
    """Each drafter with catalog models, plus local files and the no-key form."""
    local = ModelSource(label="t.gguf", path=tmp_path / "my model.gguf")
    plans = [ServePlan(engine=engine, target=TARGET, drafter=d,
                       draft=DRAFT if d.needs_draft else None, k=6, draft_min=2,
                       draft_p_min=0.5, gpus=2, ctx_size=4096)
             for d in ServeDrafter]
    plans.append(ServePlan(engine=engine, target=local, drafter=ServeDrafter.DRAFT_MODEL,
                           draft=dataclasses.replace(local, path=tmp_path / "d.gguf"),
                           api_key_env=None))
    plans += [ServePlan(engine=engine, target=GEMMA4, drafter=ServeDrafter.MTP, draft=a, k=3)
              for a in (GEMMA4_ASSISTANT, dataclasses.replace(local, path=tmp_path / "mtp.gguf"))]
    return plans


def test_catalog_models_are_named_by_their_repositories() -> None:
    cmd = build_command(ServePlan(engine=ServeEngine.LLAMA_SERVER, target=TARGET,
                                  drafter=ServeDrafter.DRAFT_MODEL, draft=DRAFT, k=5))
    argv = cmd.argv
    assert argv[argv.index("-hf") + 1] == "bartowski/SmolLM2-1.7B-Instruct-GGUF:Q4_K_M"
    assert argv[argv.index("-hfd") + 1] == "bartowski/SmolLM2-135M-Instruct-GGUF:Q8_0"
    assert argv[argv.index("--spec-type") + 1] == "draft-simple"
    assert argv[argv.index("--spec-draft-n-max") + 1] == "5"
    assert "--metrics" in argv and ServeNote.LOCAL_PATH not in cmd.notes
    vllm = build_command(ServePlan(engine=ServeEngine.VLLM, target=TARGET,
                                   drafter=ServeDrafter.DRAFT_MODEL, draft=DRAFT, k=5))
    assert vllm.argv[:3] == ("vllm", "serve", "HuggingFaceTB/SmolLM2-1.7B-Instruct")
    config = json.loads(vllm.argv[vllm.argv.index("--speculative-config") + 1])
    assert config == {"method": "draft_model", "model": "HuggingFaceTB/SmolLM2-135M-Instruct",
                      "num_speculative_tokens": 5}
    assert vllm.argv[vllm.argv.index("--per-request-spec-decode-metrics") + 1] == "summary"


def test_an_mtp_assistant_is_the_servers_draft_model(tmp_path: Path) -> None:
    """llama-server loads the assistant as its draft model under ``draft-mtp`` (it runs it
    on the target's cache); vLLM's ``mtp`` names it as its ``model``. Heads inside the
    target keep the note that the target must carry them."""
    spec = SpeculationConfig(mode=SpecMode("mtp"), draft_max=3)
    target = tmp_path / "gemma-4-E2B-it-Q4_0.gguf"
    assistant = tmp_path / "mtp-gemma-4-E2B-it-Q4_0.gguf"
    llama = build_command(plan_for(ServeEngine.LLAMA_SERVER, target, spec, assistant=assistant,
                                   pairs=PAIRS))
    argv = llama.argv
    assert argv[argv.index("--spec-type") + 1] == "draft-mtp"
    # one repository holds both files: each is named, or both would load the same file
    assert list(argv[argv.index("-hf") + 1:argv.index("-hf") + 4]) == [
        "ggml-org/gemma-4-E2B-it-GGUF", "-hff", "gemma-4-E2B-it-Q4_0.gguf"]
    assert list(argv[argv.index("-hfd") + 1:argv.index("-hfd") + 4]) == [
        "ggml-org/gemma-4-E2B-it-GGUF", "-md", "mtp-gemma-4-E2B-it-Q4_0.gguf"]
    assert argv[argv.index("-ngld") + 1] == "all" and ServeNote.MTP_NEEDS_HEADS not in llama.notes
    vllm = build_command(plan_for(ServeEngine.VLLM, target, spec, assistant=assistant,
                                  pairs=PAIRS))
    assert vllm.speculative_config == {"method": "mtp", "model": "google/gemma-4-E2B-it-assistant",
                                       "num_speculative_tokens": 3}
    heads = build_command(plan_for(ServeEngine.LLAMA_SERVER, target, spec, pairs=PAIRS))
    assert "-hfd" not in heads.argv and "-md" not in heads.argv
    assert ServeNote.MTP_NEEDS_HEADS in heads.notes
    # a draft model loaded beside MTP heads is not taken for an assistant
    assert plan_for(ServeEngine.VLLM, target, spec, draft=assistant, pairs=PAIRS).draft is None


def test_the_cli_takes_an_mtp_assistant(capsys: pytest.CaptureFixture[str],
                                        monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    monkeypatch.setattr("app.catalog.server_command.load_curated_pairs", lambda: PAIRS)
    assistant = tmp_path / "my assistant.gguf"
    assistant.write_bytes(b"GGUF")
    assert main(["serve-command", "--model", "Gemma-4-E2B-it", "--mtp", "--mtp-assistant",
                 str(assistant), "--engine", "llama-server", "--json"]) == 0
    argv = json.loads(capsys.readouterr().out)["argv"]
    assert argv[argv.index("-md") + 1] == str(assistant) and "draft-mtp" in argv
    assert main(["serve-command", "--model", "Gemma-4-E2B-it", "--mtp-assistant",
                 "Gemma-4-E2B-it-assistant", "--engine", "vllm"]) == 0
    assert '"method":"mtp","model":"google/gemma-4-E2B-it-assistant"' in capsys.readouterr().out
    assert main(["serve-command", "--model", "Gemma-4-E2B-it", "--suffix", "--mtp-assistant",
                 str(assistant), "--engine", "vllm"]) == 2
    assert "--mtp-assistant drafts with MTP, not suffix" in capsys.readouterr().err


def test_a_downloaded_file_is_recognised_by_its_name_and_others_keep_their_path(
        tmp_path: Path) -> None:
    known = source_for_path(tmp_path / "SmolLM2-135M-Instruct-Q4_K_M.gguf", pairs=PAIRS)
    assert (known.gguf_repo, known.quant, known.weights_repo) == (
        "bartowski/SmolLM2-135M-Instruct-GGUF", "Q4_K_M", "HuggingFaceTB/SmolLM2-135M-Instruct")
    cached = source_for_path(tmp_path / "hub" / "models--acme--x-GGUF" / "snapshots" / "abc"
                             / "x-Q5_K_S.gguf", pairs=PAIRS)
    assert (cached.gguf_repo, cached.quant, cached.weights_repo) == ("acme/x-GGUF", "Q5_K_S", None)
    mine = tmp_path / "mine.gguf"
    cmd = build_command(plan_for(ServeEngine.VLLM, mine, SpeculationConfig(mode=SpecMode.SUFFIX),
                                 pairs=PAIRS))
    assert cmd.argv[2] == str(mine)
    assert ServeNote.VLLM_NEEDS_WEIGHTS in cmd.notes and ServeNote.SUFFIX_NEEDS_ARCTIC in cmd.notes
    llama = build_command(plan_for(ServeEngine.LLAMA_SERVER, mine,
                                   SpeculationConfig(mode=SpecMode.PROMPT_LOOKUP), pairs=PAIRS))
    assert llama.argv[1:3] == ("-m", str(mine)) and ServeNote.LOCAL_PATH in llama.notes
    assert llama.argv[llama.argv.index("--spec-ngram-simple-size-m") + 1] == "16"


def test_the_shell_line_quotes_paths_and_expands_the_key(tmp_path: Path) -> None:
    plan = ServePlan(engine=ServeEngine.LLAMA_SERVER,
                     target=ModelSource(label="x", path=tmp_path / "a b's.gguf"))
    line = build_command(plan).shell(width=10_000)
    assert "'" in line and '--api-key "$TANDEM_SERVER_KEY"' in line
    assert "--host 0.0.0.0" in line
    no_key = build_command(dataclasses.replace(plan, api_key_env=None)).argv
    assert "--api-key" not in no_key and no_key[no_key.index("--host") + 1] == "127.0.0.1"


@pytest.mark.parametrize("bad", [
    {"k": 0}, {"k": 2, "draft_min": 3}, {"port": 0}, {"api_key_env": "A B"},
    {"drafter": ServeDrafter.DRAFT_MODEL}, {"ngram_min": 5, "ngram_max": 4}, {"gpus": 0},
])
def test_bad_plans_are_refused_with_a_message(bad: dict[str, object]) -> None:
    with pytest.raises(TandemError):
        ServePlan(engine=ServeEngine.VLLM, target=TARGET, **bad)  # type: ignore[arg-type]


def test_the_cli_prints_the_command_and_its_notes(
        capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr("app.catalog.server_command.load_curated_pairs", lambda: PAIRS)
    assert main(["serve-command", "--model", "SmolLM2-1.7B-Instruct", "--prompt-lookup",
                 "--engine", "vllm", "-k", "3"]) == 0
    out, err = capsys.readouterr()
    assert out.startswith("vllm serve HuggingFaceTB/SmolLM2-1.7B-Instruct")
    assert '"method":"ngram","num_speculative_tokens":3' in out and "TANDEM_SERVER_KEY" in err
    assert main(["serve-command", "--model", "no/such:thing:here", "--engine", "vllm"]) == 2
    assert "neither a file" in capsys.readouterr().err
    assert main(["serve-command", "--model", "acme/Big-GGUF:Q8_0", "--mtp",
                 "--engine", "llama-server", "--json"]) == 0
    data = json.loads(capsys.readouterr().out)
    assert data["argv"][1:3] == ["-hf", "acme/Big-GGUF:Q8_0"]
    assert "draft-mtp" in data["argv"] and data["notes"] == ["mtp-needs-heads", "api-key-from-env"]


def serve_argv(capsys: pytest.CaptureFixture[str], *args: str) -> list[str]:
    """The llama-server argv ``serve-command`` prints for ``args`` (exit status 0)."""
    assert main(["serve-command", *args, "--engine", "llama-server", "--json"]) == 0
    argv: list[str] = json.loads(capsys.readouterr().out)["argv"]
    return argv


@pytest.mark.parametrize("ref", ["ggml-org/gemma-4-E2B-it-GGUF:Q4_0", "ggml-org/gemma-4-E2B-it-GGUF",
                                 "gemma-4-e2b-it", "Gemma-4-E2B-it-assistant"])
def test_an_mtp_assistant_reference_names_the_assistant_never_the_target(
        ref: str, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch) -> None:
    """The assistant shares its repository with the target: its repository, the pair id
    or its name must all give the assistant's file."""
    monkeypatch.setattr("app.catalog.server_command.load_curated_pairs", lambda: PAIRS)
    argv = serve_argv(capsys, "--model", "Gemma-4-E2B-it", "--mtp-assistant", ref)
    assert argv[argv.index("-hff") + 1] == "gemma-4-E2B-it-Q4_0.gguf"
    assert argv[argv.index("-hfd") + 1] == "ggml-org/gemma-4-E2B-it-GGUF"
    assert argv[argv.index("-md") + 1] == "mtp-gemma-4-E2B-it-Q4_0.gguf"
    assert resolve_mtp_assistant(ref, pairs=PAIRS).gguf_file == "mtp-gemma-4-E2B-it-Q4_0.gguf"
    assert (resolve_mtp_assistant("ggml-org/gemma-4-E2B-it-GGUF:Q8_0", pairs=PAIRS).gguf_file
            == "mtp-gemma-4-E2B-it-Q8_0.gguf")


def test_a_target_file_is_refused_as_an_mtp_assistant(tmp_path: Path) -> None:
    with pytest.raises(TandemError, match="no MTP assistant"):
        resolve_mtp_assistant("ggml-org/gemma-3-4b-it-GGUF", pairs=PAIRS)
    target_file = tmp_path / "gemma-4-E2B-it-Q4_0.gguf"
    target_file.write_bytes(b"GGUF")
    with pytest.raises(TandemError, match="no MTP assistant"):
        resolve_mtp_assistant(str(target_file), pairs=PAIRS)
    with pytest.raises(TandemError, match="target's own file"):
        ServePlan(engine=ServeEngine.LLAMA_SERVER, target=GEMMA4, drafter=ServeDrafter.MTP,
                  draft=GEMMA4)


def test_mtp_takes_the_catalogs_assistant_and_knows_heads_in_the_target(
        capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr("app.catalog.server_command.load_curated_pairs", lambda: PAIRS)
    assert main(["serve-command", "--model", "gemma-4-e2b-it", "--mtp", "--engine", "llama-server",
                 "--json"]) == 0
    data = json.loads(capsys.readouterr().out)
    assert data["argv"][data["argv"].index("-md") + 1] == "mtp-gemma-4-E2B-it-Q4_0.gguf"
    assert "mtp-needs-heads" not in data["notes"]
    q8 = resolve_model("ggml-org/gemma-4-E2B-it-GGUF:Q8_0", pairs=PAIRS)
    assistant = catalog_assistant(q8, pairs=PAIRS)
    assert assistant is not None and assistant.gguf_file == "mtp-gemma-4-E2B-it-Q8_0.gguf"
    assert catalog_assistant(TARGET, pairs=PAIRS) is None
    # a target that records MTP layers drafts with its own heads: no assistant, no note
    for engine in ("llama-server", "vllm"):
        assert main(["serve-command", "--model", "qwen3.5-0.8b-mtp", "--mtp", "--engine", engine,
                     "--json"]) == 0
        data = json.loads(capsys.readouterr().out)
        assert "-md" not in data["argv"] and "mtp-needs-heads" not in data["notes"]


def test_a_catalog_pair_id_names_its_target(capsys: pytest.CaptureFixture[str],
                                            monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr("app.catalog.server_command.load_curated_pairs", lambda: PAIRS)
    argv = serve_argv(capsys, "--model", "nemotron-3-nano-4b")
    assert argv[1:3] == ["-hf", "nvidia/NVIDIA-Nemotron-3-Nano-4B-GGUF:Q4_K_M"]
    assert resolve_model("qwen3.5-0.8b-mtp", pairs=PAIRS).label == "Qwen3.5-0.8B-MTP"


@pytest.mark.parametrize(("switches", "flag", "k"), [
    (("--mtp",), "--spec-draft-n-max", "3"),
    (("--mtp", "-k", "5"), "--spec-draft-n-max", "5"),
    (("--draft", "SmolLM2-135M-Instruct"), "--spec-draft-n-max", "4"),
    (("--eagle3", "SmolLM2-135M-Instruct"), "--spec-draft-n-max", "4"),
    (("--suffix",), "--spec-ngram-mod-n-max", "16"),
    (("--prompt-lookup",), "--spec-ngram-simple-size-m", "16"),
])
def test_k_defaults_to_the_drafters_own(switches: tuple[str, ...], flag: str, k: str,
                                        capsys: pytest.CaptureFixture[str],
                                        monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr("app.catalog.server_command.load_curated_pairs", lambda: PAIRS)
    argv = serve_argv(capsys, "--model", "SmolLM2-1.7B-Instruct", *switches)
    assert argv[argv.index(flag) + 1] == k


# -- the engines' own parsers --------------------------------------------------------

needs_llama_server = pytest.mark.skipif(not LLAMA_SERVER.is_file(),
                                        reason=f"no llama-server at {LLAMA_SERVER}")


def llama_server_accepts(argv: tuple[str, ...]) -> subprocess.CompletedProcess[str]:
    """llama-server parses every argument, then ``--help`` prints usage and exits 0."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("LLAMA_ARG_")}
    return subprocess.run([str(LLAMA_SERVER), *argv[1:], "--help"], capture_output=True,
                          text=True, timeout=60, env=env, check=False)


@needs_llama_server
def test_llama_server_parses_every_command(tmp_path: Path) -> None:
    for plan in every_plan(ServeEngine.LLAMA_SERVER, tmp_path):
        argv = build_command(plan).argv
        done = llama_server_accepts(argv)
        assert done.returncode == 0, (argv, done.stderr[-2000:])
    # the check can fail: a wrong spec type and an unknown flag are refused
    bad = llama_server_accepts(("llama-server", "-hf", "a/b", "--spec-type", "suffix-tree"))
    assert bad.returncode != 0 and "unknown speculative type" in bad.stderr + bad.stdout
    unknown = llama_server_accepts(("llama-server", "-hf", "a/b", "--spec-draft-max", "4"))
    assert unknown.returncode != 0


VLLM_CHECK = r"""
import dataclasses, json, sys
from typing import get_args
from vllm.config.speculative import SpeculativeConfig, SpeculativeMethod
from vllm.entrypoints.cli.serve import ServeSubcommand
from vllm.utils.argparse_utils import FlexibleArgumentParser

parser = FlexibleArgumentParser(prog="vllm")
sub = parser.add_subparsers(dest="subparser")
ServeSubcommand().subparser_init(sub)
fields = {f.name for f in dataclasses.fields(SpeculativeConfig)}
methods = set()
def flat(t):
    for a in get_args(t):
        if isinstance(a, str): methods.add(a)
        else: flat(a)
flat(SpeculativeMethod)
out = []
for argv in json.load(sys.stdin):
    args = parser.parse_args(argv[1:])
    ServeSubcommand().validate(args)
    spec = args.speculative_config
    out.append({"model": args.model_tag, "spec": spec,
                "unknown_keys": sorted(set(spec or {}) - fields),
                "method_known": spec is None or spec.get("method") in methods,
                "metrics": args.per_request_spec_decode_metrics,
                "api_key": args.api_key, "port": args.port})
print(json.dumps(out))
"""


def vllm_parse(argvs: list[tuple[str, ...]]) -> subprocess.CompletedProcess[str]:
    return subprocess.run([VLLM_PYTHON, "-c", VLLM_CHECK], input=json.dumps(argvs),
                          capture_output=True, text=True, timeout=300, check=False)


@pytest.mark.skipif(not Path(VLLM_PYTHON).is_file(), reason=f"no vLLM Python at {VLLM_PYTHON}")
def test_vllm_serve_parses_every_command(tmp_path: Path) -> None:
    commands = [build_command(p) for p in every_plan(ServeEngine.VLLM, tmp_path)]
    done = vllm_parse([c.argv for c in commands])
    if "No module named 'vllm'" in done.stderr:
        pytest.skip(f"vLLM is not importable with {VLLM_PYTHON}")
    assert done.returncode == 0, done.stderr[-3000:]
    parsed = json.loads(done.stdout.strip().splitlines()[-1])
    for command, seen in zip(commands, parsed):
        assert seen["model"] == command.argv[2]
        assert seen["spec"] == command.speculative_config
        assert seen["unknown_keys"] == [] and seen["method_known"], seen
        assert seen["metrics"] == ("summary" if command.speculative_config else "none")
    assert parsed[0]["port"] == 8080 and "$TANDEM_SERVER_KEY" in parsed[0]["api_key"]
    # the check can fail: an unknown flag is refused by the same parser
    bad = vllm_parse([("vllm", "serve", "a/b", "--speculative-tokens", "4")])
    assert bad.returncode != 0 and "speculative-tokens" in bad.stderr


def test_a_mode_without_a_server_equivalent_or_draft_is_refused(tmp_path: Path) -> None:
    with pytest.raises(TandemError, match="needs a draft model"):
        plan_for(ServeEngine.VLLM, tmp_path / "t.gguf",
                 SpeculationConfig(mode=SpecMode.DRAFT_MODEL), pairs=PAIRS)
    auto = plan_for(ServeEngine.VLLM, tmp_path / "t.gguf", SpeculationConfig(mode=SpecMode.AUTO),
                    pairs=PAIRS)
    assert auto.drafter is ServeDrafter.SUFFIX
