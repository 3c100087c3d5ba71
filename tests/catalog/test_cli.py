"""``python -m app models …`` run in-process through :func:`app.cli.main`."""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

from app.catalog.curated import find_pair
from app.cli import main
from app.store import paths
from tests.catalog.fake_hub import FakeHub
from tests.catalog.ggufs import token_list, write_vocab_gguf

REPO_ROOT = Path(__file__).resolve().parents[2]


def run(capsys: pytest.CaptureFixture[str], *argv: str) -> tuple[int, str, str]:
    code = main(list(argv))
    out, err = capsys.readouterr()
    return code, out, err


def test_inspect_json(capsys: pytest.CaptureFixture[str], smollm_path: Path) -> None:
    code, out, _ = run(capsys, "models", "inspect", str(smollm_path), "--json")
    assert code == 0
    data = json.loads(out)
    assert (data["vocab_type"], data["n_vocab"], data["has_chat_template"], data["quantization"]) == ("BPE", 49152, True, "Q4_1")


def test_pair_exits_0_compatible_1_not(capsys: pytest.CaptureFixture[str], gemma_path: Path, smollm_path: Path) -> None:
    code, out, _ = run(capsys, "models", "pair", str(gemma_path), str(smollm_path), "--json")
    assert code == 1
    data = json.loads(out)
    assert data["compatible"] is False
    assert [c["rule"] for c in data["checks"]] == ["vocab_type", "bos_token", "eos_token", "vocab_size", "token_text"]
    assert data["checks"][0] == {"rule": "vocab_type", "ok": False,
                                 "detail": "target SPM, draft BPE (tokenizers of different kinds)"}
    code, out, _ = run(capsys, "models", "pair", str(gemma_path), str(gemma_path), "--json")
    assert code == 0 and json.loads(out)["compatible"] is True
    code, out, _ = run(capsys, "models", "pair", str(gemma_path), str(smollm_path))  # text: same status
    assert code == 1 and out.rstrip().endswith("not compatible")


def test_pair_unreadable_input_exits_2(capsys: pytest.CaptureFixture[str], tmp_path: Path, smollm_path: Path) -> None:
    junk = tmp_path / "junk.gguf"
    junk.write_bytes(b"not a model")
    code, out, err = run(capsys, "models", "pair", str(junk), str(smollm_path), "--json")
    assert code == 2 and out == ""
    assert err.count("\n") == 1 and err.startswith("error: junk.gguf is not a usable GGUF file")
    code, _, err = run(capsys, "models", "pair", str(tmp_path / "missing.gguf"), str(smollm_path))
    assert code == 2 and "not found" in err


def test_list_json(capsys: pytest.CaptureFixture[str], tmp_path: Path) -> None:
    model_dir = paths.models_dir() / "acme" / "x-GGUF"
    model_dir.mkdir(parents=True)
    model = write_vocab_gguf(model_dir / "x.gguf", 300, name="Listed")
    extra = write_vocab_gguf(tmp_path / "extra.gguf", 300, name="Extra")
    code, out, _ = run(capsys, "models", "list", "--json", "--folder", str(tmp_path))
    assert code == 0
    entries = {Path(e["path"]): e for e in json.loads(out)["models"]}
    assert entries[model]["repo_id"] == "acme/x-GGUF" and entries[model]["info"]["name"] == "Listed"
    assert entries[extra]["source"] == "folder"

    code, out, _ = run(capsys, "models", "list", "--no-load-check", "--folder", str(tmp_path))
    header, *rows = out.splitlines()
    assert re.split(r"\s{2,}", header) == [
        "file", "name in metadata", "quant", "size", "params", "trained ctx", "vocab",
        "tokens", "source", "path"]
    by_path = {row.split()[-1]: row for row in rows}
    # named as the window names it (the file), the metadata's name beside it
    assert by_path[str(extra)].startswith("extra.gguf ") and " folder " in by_path[str(extra)]
    assert by_path[str(extra)].index(" Extra ") + 1 == header.index("name in metadata")
    # every column starts where its heading does, whatever its values' lengths
    assert by_path[str(extra)].index(" folder ") + 1 == header.index("source")
    assert by_path[str(model)].index(" models ") + 1 == header.index("source")
    assert by_path[str(model)].index(str(model)) == header.index("path")


def test_download_and_errors(capsys: pytest.CaptureFixture[str], hub: FakeHub) -> None:
    data = b"GGUF" + bytes(range(256)) * 100
    hub.add("acme/x-GGUF", "x.gguf", data)
    code, out, err = run(capsys, "models", "download", "acme/x-GGUF", "x.gguf")
    assert code == 0, err
    path = Path(out.strip().splitlines()[-1])
    assert path == paths.models_dir() / "acme" / "x-GGUF" / "x.gguf" and path.read_bytes() == data
    assert "done" in err  # the progress line
    code, _, err = run(capsys, "models", "download", "acme/x-GGUF", "y.gguf")
    assert code == 2 and err == "error: y.gguf was not found in acme/x-GGUF (revision main).\n"


def test_a_models_folder_that_is_a_file_is_one_error_line(
        capsys: pytest.CaptureFixture[str], hub: FakeHub, tmp_path: Path) -> None:
    """The configured models folder cannot be used (a file; a drive that is gone): a
    download says so in one line (2), the listing warns and lists what it finds."""
    from app.catalog.library import LibraryConfig, save_library_config

    hub.add("acme/x-GGUF", "x.gguf", b"GGUF" + bytes(64))
    a_file = tmp_path / "models"
    a_file.write_text("")
    save_library_config(LibraryConfig(models_dir=a_file))
    code, out, err = run(capsys, "models", "download", "acme/x-GGUF", "x.gguf")
    assert code == 2 and out == ""
    assert err == (f"error: Tandem's models folder {a_file} is a file, not a folder: move it "
                   "away or choose another folder.\n")
    code, _, err = run(capsys, "models", "list")
    assert code == 0 and "Traceback" not in err


def test_download_curated_pair_checks_first(capsys: pytest.CaptureFixture[str], hub: FakeHub, tmp_path: Path) -> None:
    pair = find_pair("qwen3-8b")
    toks = token_list(151936)
    kw = dict(model="gpt2", pre="qwen2", bos=151643, eos=151645, add_bos=False)
    hub.add(pair.target.repo, pair.target.file_for().file, write_vocab_gguf(tmp_path / "t.gguf", toks, **kw))  # type: ignore[arg-type]
    other = list(toks)
    other[1000] = b"mismatch"
    hub.add(pair.draft.repo, pair.draft.file_for().file, write_vocab_gguf(tmp_path / "d.gguf", other, **kw))  # type: ignore[arg-type]
    code, out, err = run(capsys, "models", "download", "--pair", "qwen3-8b", "--json")
    assert code == 2 and "failed the pairing check: token_text: token 1000 differs" in err
    assert list(paths.models_dir().rglob("*.gguf")) == []  # nothing downloaded
    hub.add(pair.draft.repo, pair.draft.file_for().file, write_vocab_gguf(tmp_path / "d2.gguf", toks, **kw))  # type: ignore[arg-type]
    code, out, err = run(capsys, "models", "download", "--pair", "qwen3-8b", "--json")
    assert code == 0, err
    result = json.loads(out)
    assert result["check"]["compatible"] is True
    assert [Path(p).name for p in result["paths"]] == [pair.target.file_for().file, pair.draft.file_for().file]


def test_download_an_entry_without_a_draft(capsys: pytest.CaptureFixture[str], hub: FakeHub,
                                           tmp_path: Path) -> None:
    """A catalog model that drafts without a second file: its header is read, then it
    alone is downloaded; the text listing names its drafters."""
    pair = find_pair("qwen3.5-0.8b-mtp")
    assert pair.draft is None
    hub.add(pair.target.repo, pair.target.file_for().file,
            write_vocab_gguf(tmp_path / "t.gguf", 1000))
    code, out, err = run(capsys, "models", "download", "--pair", pair.id, "--json")
    assert code == 0, err
    result = json.loads(out)
    assert result["check"]["target"]["file"].endswith(pair.target.file_for().file)
    assert [Path(p).name for p in result["paths"]] == [pair.target.file_for().file]
    code, out, _ = run(capsys, "models", "catalog")
    lines = out.splitlines()
    at = next(i for i, ln in enumerate(lines) if ln.startswith(pair.id + " "))
    assert lines[at + 1].strip() == "drafters: mtp, suffix, prompt-lookup"


def test_remote_pair_on_the_command_line(capsys: pytest.CaptureFixture[str], hub: FakeHub, tmp_path: Path) -> None:
    hub.add("a/t-GGUF", "t.gguf", write_vocab_gguf(tmp_path / "t.gguf", 1000))
    hub.add("a/d-GGUF", "d.gguf", write_vocab_gguf(tmp_path / "d.gguf", 1000, model="gpt2", pre="default"))
    code, out, _ = run(capsys, "models", "pair", "hf:a/t-GGUF/t.gguf", "hf:a/d-GGUF/d.gguf", "--json")
    assert code == 1
    data = json.loads(out)
    assert data["compatible"] is False and data["checks"][0]["rule"] == "vocab_type"
    assert data["target"]["file"] == "a/t-GGUF/t.gguf"


def test_config(capsys: pytest.CaptureFixture[str], tmp_path: Path) -> None:
    code, out, _ = run(capsys, "models", "config", "--models-dir", str(tmp_path / "m"), "--add-folder", str(tmp_path),
                       "--endpoint", "https://mirror.example", "--json")
    assert code == 0
    data = json.loads(out)
    assert data["effective_models_dir"] == str(tmp_path / "m")
    assert data["folders"] == [str(tmp_path)] and data["hf_endpoint"] == "https://mirror.example"
    code, _, err = run(capsys, "models", "config", "--endpoint", "ftp://nope")
    assert code == 2 and "not an http(s) URL" in err


def test_catalog_lists_the_curated_pairs(capsys: pytest.CaptureFixture[str]) -> None:
    code, out, _ = run(capsys, "models", "catalog", "--json")
    assert code == 0
    ids = [p["id"] for p in json.loads(out)["pairs"]]
    assert {"qwen2.5-7b-instruct", "qwen2.5-coder-7b-instruct", "qwen3-8b", "llama-3.1-8b-instruct",
            "gemma-3-12b-it"} <= set(ids)


def test_catalog_package_never_imports_qt() -> None:
    """app.catalog must work without Qt: import every module in a fresh interpreter."""
    code = (
        "import sys, importlib, pkgutil, app.catalog as c\n"
        "for m in pkgutil.iter_modules(c.__path__): importlib.import_module('app.catalog.' + m.name)\n"
        "bad = sorted(n for n in sys.modules if n.split('.')[0] in ('PySide6', 'shiboken6') or n.startswith('app.ui'))\n"
        "print(bad)\n"
    )
    out = subprocess.run([sys.executable, "-c", code], cwd=REPO_ROOT, capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "[]"
    for py in (REPO_ROOT / "app" / "catalog").glob("*.py"):
        text = py.read_text(encoding="utf-8")
        assert "PySide6" not in text and "app.ui" not in text, py


@pytest.mark.skipif(sys.platform == "win32", reason="POSIX file names are bytes")
def test_file_names_that_are_not_utf8_list_and_inspect_cleanly(tmp_path: Path, tiny_target: Path) -> None:
    """A file name that is not UTF-8 must neither raise UnicodeEncodeError under
    en_US.UTF-8 (strict stdout) nor print invalid UTF-8 with --json under C.UTF-8
    (surrogateescape)."""
    folder = tmp_path / "odd"
    folder.mkdir()
    odd = os.fsdecode(os.fsencode(str(folder)) + b"/mod\xffel.gguf")
    Path(odd).write_bytes(tiny_target.read_bytes())
    locales = {
        "en_US.UTF-8": {"PYTHONIOENCODING": "utf-8:strict"},  # what that locale gives Python
        "C.UTF-8": {"LC_ALL": "C.UTF-8", "PYTHONIOENCODING": ""},
    }
    for name, extra in locales.items():
        env = {**os.environ, **extra, "PYTHONPATH": str(REPO_ROOT)}
        for argv in (["models", "list", "--json", "--folder", str(folder)],
                     ["models", "inspect", odd, "--json"],
                     ["models", "list", "--folder", str(folder)],
                     ["models", "inspect", odd]):
            r = subprocess.run([sys.executable, "-m", "app", *argv], cwd=REPO_ROOT, env=env,
                               capture_output=True, timeout=300)
            assert r.returncode == 0 and b"Traceback" not in r.stderr, (name, argv, r.stderr[-2000:])
            text = r.stdout.decode("utf-8")  # strict: valid UTF-8 whatever the locale
            if argv[1] == "list" and "--json" not in argv:
                assert "mod\\xffel.gguf" in text, (name, argv)  # the byte it stands for
            elif "--json" in argv:
                data = json.loads(text)
                entry = data["models"][0] if "models" in data else data
                assert entry["path"].endswith("mod\\xffel.gguf") and entry["path_undecodable"] is True
                assert entry.get("loads") is True
