"""Settings: round trip, schema version, corrupt files set aside with a message."""

from __future__ import annotations

import json
import sys
from pathlib import Path

import pytest
from pydantic import ValidationError

from app.options import SamplingParams, SpecMode, SpeculationConfig
from app.store import paths
from app.store.settings import SCHEMA_VERSION, Settings, load_settings, save_settings


def test_missing_file_gives_defaults() -> None:
    loaded = load_settings()
    assert loaded.problem is None
    assert loaded.settings == Settings()


def test_round_trip_with_schema_version() -> None:
    s = Settings()
    s.model.target_path = Path("/models/target.gguf")
    s.model.n_ctx = 8192
    s.speculation = s.speculation.with_changes(mode=SpecMode.DRAFT_MODEL, draft_max=6,
                                               draft_min=2, ngram_max=5)
    s.sampling = s.sampling.with_changes(temperature=0.0, seed=42)
    s.ui.tint_drafts = False
    path = save_settings(s)
    assert path == paths.settings_path()
    raw = json.loads(path.read_text())
    assert raw["schema_version"] == SCHEMA_VERSION
    loaded = load_settings()
    assert loaded.problem is None
    assert loaded.settings == s


def test_no_temporary_file_is_left(tmp_path: Path) -> None:
    save_settings(Settings(), tmp_path / "settings.json")
    assert [p.name for p in tmp_path.iterdir()] == ["settings.json"]


@pytest.mark.parametrize(
    ("content", "reason"),
    [
        ("{not json", "not valid JSON"),
        ("[1, 2]", "not a JSON object"),
        ('{"schema_version": 1, "sampling": {"temperature": -3}}', "sampling.temperature"),
        ('{"schema_version": 1, "bogus": true}', "bogus"),
        ('{"model": {}}', "no schema_version"),
        ('{"schema_version": 99}', "newer Tandem"),
        ('{"schema_version": 3, "remote": ' + '{"a": ' * 50_000 + "1" + "}" * 50_001,
         "nested too deep"),
    ],
)
def test_corrupt_file_is_set_aside_and_defaults_used(content: str, reason: str) -> None:
    path = paths.settings_path()
    path.write_text(content)
    loaded = load_settings()
    assert loaded.settings == Settings()
    assert loaded.problem is not None and reason in loaded.problem
    assert "Default settings are in use" in loaded.problem
    assert not path.exists()
    assert loaded.set_aside is not None and loaded.set_aside.read_text() == content
    assert str(loaded.set_aside) in loaded.problem
    # The next start is clean, and saving works again.
    assert load_settings().problem is None
    save_settings(Settings())
    assert load_settings().problem is None


def test_binary_garbage_is_set_aside() -> None:
    paths.settings_path().write_bytes(b"\xff\xfe\x00garbage")
    loaded = load_settings()
    assert loaded.problem is not None and loaded.set_aside is not None


def test_two_corrupt_files_in_the_same_second_both_kept() -> None:
    path = paths.settings_path()
    path.write_text("{")
    first = load_settings().set_aside
    path.write_text("[")
    second = load_settings().set_aside
    assert first is not None and second is not None and first != second
    assert first.read_text() == "{" and second.read_text() == "["


def test_assignment_is_validated() -> None:
    s = Settings()
    with pytest.raises(ValidationError):
        s.sampling = s.sampling.with_changes(top_p=0.0)
    with pytest.raises(ValidationError):
        s.speculation = s.speculation.with_changes(mode="bogus")
    with pytest.raises(ValidationError):
        s.speculation = "prompt-lookup"  # type: ignore[assignment]
    with pytest.raises(ValidationError):  # frozen: no half-changed copy in the settings
        s.sampling.temperature = 0.2  # type: ignore[misc]


def test_settings_store_the_engine_objects_themselves() -> None:
    s = Settings()
    assert type(s.sampling) is SamplingParams and type(s.speculation) is SpeculationConfig
    assert s.sampling == SamplingParams()  # one set of defaults, not a copy with others
    assert s.speculation == SpeculationConfig(mode=SpecMode.PROMPT_LOOKUP)


def test_a_file_from_before_the_shared_vocabulary_still_loads() -> None:
    old = {
        "schema_version": 1,
        "speculation": {"mode": "draft-model", "draft_max": 6, "adaptive": False},
        "sampling": {"temperature": 0.7, "top_p": 0.95, "top_k": 40, "min_p": 0.05,
                     "repeat_penalty": 1.0, "seed": -1, "max_tokens": 512},
    }
    paths.settings_path().write_text(json.dumps(old))
    loaded = load_settings()
    assert loaded.problem is None
    assert loaded.settings.speculation == SpeculationConfig(
        mode=SpecMode.DRAFT_MODEL, draft_max=6, adaptive=False)
    assert loaded.settings.sampling.temperature == 0.7


@pytest.mark.parametrize(
    ("stored", "k"),
    [
        ({"mode": "prompt-lookup", "draft_max": 4}, 16),  # version 1's default: raised
        ({"mode": "suffix", "draft_max": 4, "adaptive": True}, 16),
        ({"mode": "auto", "draft_max": 4}, 16),
        ({"mode": "off", "draft_max": 4}, 16),  # so a later switch to lookup keeps 16
        ({"draft_max": 4}, 16),  # no mode stored: "off"
        ({"mode": "prompt-lookup", "draft_max": 6}, 6),  # chosen by hand: kept
        ({"mode": "prompt-lookup", "draft_max": 4, "adaptive": False}, 4),  # fixed k: kept
        ({"mode": "draft-model", "draft_max": 4}, 4),  # a draft model's default is 4
    ],
)
def test_a_version_1_file_gets_the_model_free_drafters_k(stored: dict[str, object], k: int) -> None:
    paths.settings_path().write_text(json.dumps({"schema_version": 1, "speculation": stored}))
    loaded = load_settings()
    assert loaded.problem is None
    assert loaded.settings.speculation.draft_max == k
    assert loaded.settings.speculation.mode.value == stored.get("mode", "off")
    save_settings(loaded.settings)
    assert json.loads(paths.settings_path().read_text())["schema_version"] == SCHEMA_VERSION == 3


def test_reversed_ngram_sizes_edited_by_hand_are_swapped_not_set_aside() -> None:
    """The options refuse ngram_min above ngram_max (the API says so); a settings file
    edited that way keeps everything else and gets them swapped, as lookup used them."""
    paths.settings_path().write_text(json.dumps({"schema_version": SCHEMA_VERSION, "speculation": {
        "mode": "prompt-lookup", "ngram_min": 5, "ngram_max": 3, "draft_max": 9}}))
    loaded = load_settings()
    assert loaded.problem is None
    spec = loaded.settings.speculation
    assert (spec.ngram_min, spec.ngram_max, spec.draft_max) == (3, 5, 9)


def test_a_version_2_file_keeps_k_4() -> None:
    paths.settings_path().write_text(json.dumps(
        {"schema_version": 2, "speculation": {"mode": "suffix", "draft_max": 4}}))
    assert load_settings().settings.speculation.draft_max == 4


@pytest.mark.parametrize("spec", ['null', '{"draft_max": null}', '{"draft_max": "x"}'])
def test_a_bad_version_1_speculation_is_set_aside_not_migrated(spec: str) -> None:
    paths.settings_path().write_text('{"schema_version": 1, "speculation": %s}' % spec)
    loaded = load_settings()
    assert loaded.problem is not None and "speculation" in loaded.problem
    assert loaded.settings == Settings()


def test_the_context_overflow_policy_is_saved_and_an_older_file_gets_the_default(
        tmp_path: Path) -> None:
    from app.options import ContextOverflow

    s = Settings()
    assert s.sampling.context_overflow is ContextOverflow.TRUNCATE_MIDDLE
    s.sampling = s.sampling.with_changes(context_overflow="rolling-window")
    path = save_settings(s, tmp_path / "settings.json")
    assert json.loads(path.read_text())["sampling"]["context_overflow"] == "rolling-window"
    assert load_settings(path).settings.sampling.context_overflow is ContextOverflow.ROLLING_WINDOW
    raw = json.loads(path.read_text())
    del raw["sampling"]["context_overflow"]  # written before the setting existed
    path.write_text(json.dumps(raw))
    loaded = load_settings(path)
    assert loaded.problem is None
    assert loaded.settings.sampling.context_overflow is ContextOverflow.TRUNCATE_MIDDLE


@pytest.mark.skipif(sys.platform in ("win32", "darwin"),
                    reason="a file name that is not UTF-8 is a POSIX (Linux) one")
def test_a_model_path_that_is_not_utf8_is_saved_and_read_back(tmp_path: Path) -> None:
    """A GGUF whose file name is not UTF-8 (Python holds it with PEP 383 escapes) was
    opened: saving the settings raised UnicodeEncodeError. It is written with JSON
    escapes and comes back as the same path, naming the same bytes."""
    import os

    odd = tmp_path / os.fsdecode(b"model-\xff.gguf")
    s = Settings()
    s.model.target_path = odd
    save_settings(s)
    text = paths.settings_path().read_text(encoding="utf-8")
    assert "\\udcff" in text
    back = load_settings().settings.model.target_path
    assert back == odd and os.fsencode(back).endswith(b"model-\xff.gguf")


def test_threads_from_a_bigger_computer_become_auto(tmp_path: Path) -> None:
    """A settings file carried over from a computer with more cores loads with Auto
    threads instead of a load that fails ("more than this computer can use")."""
    from app.options import max_threads

    path = tmp_path / "settings.json"
    path.write_text(json.dumps({"schema_version": 3, "model": {"n_threads": max_threads() + 1}}))
    loaded = load_settings(path)
    assert loaded.problem is None and loaded.settings.model.n_threads is None
    path.write_text(json.dumps({"schema_version": 3, "model": {"n_threads": 1}}))
    assert load_settings(path).settings.model.n_threads == 1
