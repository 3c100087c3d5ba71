"""Command-line options come from the config fields (app/cli/options.py): help, ranges
and defaults, with the defaults that differ stated once (CLI_DEFAULTS, BENCH_DEFAULTS)."""

from __future__ import annotations

import argparse
from pathlib import Path

import pytest

from app.cli.main import build_parser
from app.cli.options import BENCH_DEFAULTS, CLI_DEFAULTS, OPTION_NAMES, field_help
from app.options import SamplingParams, SpeculationConfig, field_schema


def _parse(*argv: str) -> argparse.Namespace:
    return build_parser("tandem-cli").parse_args(list(argv))


def _help(command: str) -> str:
    parser = build_parser("tandem-cli")
    sub = next(a for a in parser._actions if isinstance(a, argparse._SubParsersAction))
    return " ".join(sub.choices[command].format_help().split())


def test_defaults_are_the_fields_except_those_stated_once() -> None:
    gen = _parse("generate", "hi", "--model", "m.gguf")
    dests = {"temperature": "temp", "top_k": "top_k", "top_p": "top_p", "min_p": "min_p",
             "repeat_penalty": "repeat_penalty", "seed": "seed", "max_tokens": "max_tokens"}
    for name, dest in dests.items():
        want = CLI_DEFAULTS.get(name, SamplingParams.model_fields[name].default)
        assert getattr(gen, dest) == want, name
    assert (gen.temp, gen.max_tokens) == (0.0, 256)  # greedy, a reply a terminal shows
    for name in ("draft_min", "draft_p_min", "ngram_min", "suffix_spec_factor",
                 "suffix_min_prob"):
        assert getattr(gen, name) == SpeculationConfig.model_fields[name].default
    assert gen.ngram_max is None  # not given: the field's default, raised to --ngram-min
    bench = _parse("bench", "--model", "m.gguf")
    assert (bench.temp, bench.seed, bench.max_tokens) == (0.0, 1234, 128)
    assert BENCH_DEFAULTS == {"temperature": 0.0, "seed": 1234, "max_tokens": 128}


def test_help_is_the_fields_description_range_and_default() -> None:
    text = _help("generate")
    for name in ("temperature", "top_p", "seed", "max_tokens"):
        default = CLI_DEFAULTS.get(name, field_schema(SamplingParams, name).default)
        assert field_help(SamplingParams, name, default) in text, name
        assert OPTION_NAMES[name] in text
    assert "(> 0 … 1; default 0.95)" in text
    assert "(1 … 1000000; default 256)" in _help("generate")
    assert "default 128)" in _help("bench")


def test_k_is_draft_max_in_both_commands_and_k_stays_a_hidden_alias() -> None:
    assert _parse("generate", "hi", "--model", "m", "--draft-max", "5").draft_max == 5
    assert _parse("generate", "hi", "--model", "m", "--k", "5").draft_max == 5
    assert _parse("bench", "--model", "m", "--draft-max", "8,1").k == (1, 8)
    assert _parse("bench", "--model", "m", "--k", "3").k == (3,)
    for command in ("generate", "bench"):
        text = _help(command)
        assert "--draft-max" in text and "--k " not in text and "--k," not in text


def test_cache_ram_sets_the_prompt_cache_of_every_command_that_loads_a_model() -> None:
    from app.cli.options import session_config
    from app.options import PROMPT_CACHE_MIB, SpecMode

    for argv in (("generate", "hi", "--model", "m.gguf"), ("bench", "--model", "m.gguf"),
                 ("serve", "--model", "m.gguf")):
        args = _parse(*argv)
        assert args.cache_ram == PROMPT_CACHE_MIB, argv
        assert session_config(args, SpecMode.OFF).prefix_cache_bytes == PROMPT_CACHE_MIB * 2**20
        off = _parse(*argv, "--cache-ram", "0")
        assert session_config(off, SpecMode.OFF).prefix_cache_bytes == 0
        assert "--cache-ram MIB" in _help(argv[0])
    for bad in ("-1", "1048577", "lots"):
        with pytest.raises(SystemExit):
            _parse("generate", "hi", "--model", "m.gguf", "--cache-ram", bad)


def test_reversed_ngram_sizes_are_refused_naming_the_flag() -> None:
    """The CLI passes the sizes as given: the one rule (the options' validator) refuses
    them, as the API does, instead of running other sizes than asked."""
    from pydantic import ValidationError

    from app.cli.options import option_error, speculation_configs
    from app.options import SpecMode

    args = _parse("generate", "hi", "--model", "m.gguf", "--ngram-min", "5", "--ngram-max", "3")
    with pytest.raises(ValidationError) as err:
        speculation_configs(args, SpecMode.PROMPT_LOOKUP, [None])
    assert str(option_error(err.value)).startswith("Invalid option --ngram-max: ngram_max (3)")
    # --ngram-min alone above the default maximum raises the maximum with it
    alone = _parse("generate", "hi", "--model", "m.gguf", "--ngram-min", "6")
    [spec] = speculation_configs(alone, SpecMode.PROMPT_LOOKUP, [None])
    assert (spec.ngram_min, spec.ngram_max) == (6, 6)


@pytest.mark.parametrize("command", ["serve", "serve-command"])
def test_a_port_out_of_range_is_a_usage_error_before_any_load(command: str) -> None:
    """``serve --port 99999`` is refused by argparse at once, before the model loads
    (bind() would fail only after it)."""
    base = ["--model", "m.gguf"] + (["--engine", "llama-server"] if command == "serve-command" else [])
    assert _parse(command, *base, "--port", "0").port == 0
    for bad in ("99999", "-5", "http"):
        with pytest.raises(SystemExit) as exc:
            _parse(command, *base, "--port", bad)
        assert exc.value.code == 2


@pytest.mark.parametrize(("command", "option"), [
    ("generate", "--temp"), ("generate", "--top-p"), ("bench", "--temp"),
    ("serve", "--draft-p-min"), ("serve", "--suffix-min-prob")])
def test_nan_is_refused_as_not_a_number_not_as_out_of_range(
        capsys: pytest.CaptureFixture[str], command: str, option: str) -> None:
    """Every comparison with NaN is false, so a range check would say "should be less
    than or equal to 5" (or let it through): the option's type refuses it by name."""
    base = [command, "--model", "m.gguf"] + (["hi"] if command == "generate" else [])
    assert getattr(_parse(*base, option, "0.5"), option.lstrip("-").replace("-", "_")) == 0.5
    for nan in ("nan", "NaN", "-nan"):
        with pytest.raises(SystemExit) as exc:
            _parse(*base, f"{option}={nan}")
        assert exc.value.code == 2
        err = capsys.readouterr().err
        assert f"argument {option}: must be a number" in err and "NaN is not allowed" in err
        assert "less than" not in err


CONTRADICTIONS = [
    (["generate", "hi", "--no-spec", "--prompt-lookup"], "--no-spec", "--prompt-lookup"),
    (["generate", "hi", "--auto", "--no-spec"], "--no-spec", "--auto"),
    (["generate", "hi", "--no-spec", "--draft", "MODEL"], "--no-spec", "--draft"),
    (["generate", "hi", "--auto", "--suffix"], "--auto", "--suffix"),
    (["bench", "--auto", "--prompt-lookup"], "--auto", "--prompt-lookup"),
    (["serve", "--auto", "--mtp"], "--auto", "--mtp"),
]


@pytest.mark.parametrize(("argv", "first", "second"), CONTRADICTIONS)
def test_contradictory_drafter_choices_are_refused_naming_both_flags(
        capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch,
        smollm_path: Path, argv: list[str], first: str, second: str) -> None:
    """Every command that takes the drafter switches refuses two choices that cannot
    both hold (before any load), naming both flags."""
    import app.chat.service
    import app.engine.session
    from app.cli.main import main

    def no_load(*_args: object, **_kwargs: object) -> None:
        raise AssertionError("the command went on to load the model")

    monkeypatch.setattr(app.engine.session.Session, "open", no_load)
    monkeypatch.setattr(app.chat.service, "ChatService", no_load)
    argv = [str(smollm_path) if a == "MODEL" else a for a in argv]
    port = ["--port", "0"] if argv[0] == "serve" else []  # never 8080, should it serve
    code = main([*argv, "--model", str(smollm_path), *port])
    out, err = capsys.readouterr()
    lines = [ln for ln in err.splitlines() if ln.strip()]
    assert code == 2 and not out and len(lines) == 1, err
    assert lines[0].startswith("error: Invalid option: ")
    assert first in lines[0] and second in lines[0] and "drop one of them" in lines[0]


def test_choices_that_agree_still_pass() -> None:
    from app.cli.options import drafter_mode
    from app.options import SpecMode

    assert drafter_mode(_parse("generate", "hi", "--model", "m", "--no-spec"),
                        off=True) is SpecMode.OFF
    assert drafter_mode(_parse("bench", "--model", "m", "--auto", "--draft", "d.gguf")
                        ) is SpecMode.AUTO  # Auto may choose the draft model given
    assert drafter_mode(_parse("serve", "--model", "m", "--suffix")) is SpecMode.SUFFIX
    assert drafter_mode(_parse("serve", "--model", "m")) is SpecMode.OFF
    assert drafter_mode(_parse("generate", "hi", "--model", "m", "--mtp",
                               "--mtp-assistant", "a.gguf")) is SpecMode("mtp")


def test_a_model_named_as_models_list_shows_it_is_found_in_the_library(
        tandem_home: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """``--model NAME.gguf`` (or NAME), no such file here: the library's model of that
    name; none, or several, is a clear error."""
    from app.cli.options import library_model
    from app.errors import ModelPathError
    from app.store import paths
    from tests.synthetic import write_header_only

    monkeypatch.chdir(tmp_path)
    model = write_header_only(paths.models_dir() / "tiny-chat.Q4_0.gguf")
    assert library_model("tiny-chat.Q4_0.gguf") == model
    assert library_model("tiny-chat.Q4_0") == model
    here = write_header_only(tmp_path / "tiny-chat.Q4_0.gguf")  # a file here wins
    assert library_model("tiny-chat.Q4_0.gguf") == Path("tiny-chat.Q4_0.gguf")
    here.unlink()
    with pytest.raises(ModelPathError, match="the library has no model named other.gguf"):
        library_model("other.gguf")
    assert library_model(tmp_path / "sub" / "x.gguf") == tmp_path / "sub" / "x.gguf"  # a path
    (paths.models_dir() / "more").mkdir()
    copy = write_header_only(paths.models_dir() / "more" / "tiny-chat.Q4_0.gguf")
    assert library_model("tiny-chat.Q4_0") == model  # a copy: listed once, the first
    copy.write_bytes(copy.read_bytes() + b"\0")  # another model of that name
    with pytest.raises(ModelPathError, match="names 2 models in the library"):
        library_model("tiny-chat.Q4_0")

    from app.catalog.library import Library, ModelFile

    blob = tmp_path / "sha256-0123"  # an Ollama blob: listed by its tag
    monkeypatch.setattr(Library, "discover", lambda self: [
        ModelFile(blob, (blob,), (), "ollama", label="llama3.2:1b")])
    assert library_model("llama3.2:1b") == blob
    (tmp_path / "dangling.gguf").symlink_to(tmp_path / "nowhere.gguf")
    assert library_model("dangling.gguf") == Path("dangling.gguf")  # its own error follows
