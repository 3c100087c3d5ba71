"""Settings: round trip, schema version, corrupt files set aside with a message."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from pydantic import ValidationError

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
    s.speculation.mode = "draft-model"
    s.speculation.draft_max = 6
    s.sampling.temperature = 0.0
    s.sampling.seed = 42
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
        s.sampling.top_p = 0.0
    with pytest.raises(ValidationError):
        s.speculation.mode = "bogus"  # type: ignore[assignment]


def test_sampling_defaults_are_valid_engine_params() -> None:
    from app.engine.sampling import SamplingParams

    SamplingParams(**Settings().sampling.model_dump())
