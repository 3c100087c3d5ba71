"""The one speculation and sampling vocabulary (app/options.py)."""

from __future__ import annotations

import json

import pytest

from app.engine.stats import SpecStats
from app.options import (
    DRAFT_MODEL_K,
    FREE_DRAFTER_K,
    K_MAX,
    SamplingParams,
    SpecMode,
    SpeculationConfig,
    default_draft_max,
    parse_draft_lengths,
)


def test_every_mode_has_its_words_and_reads_back_from_its_value() -> None:
    for mode in SpecMode:
        assert mode.label and mode.words
        assert SpecMode(mode.value) is mode and json.dumps(mode) == f'"{mode.value}"'
    with pytest.raises(ValueError, match="not a drafter mode"):
        SpecMode("plain")  # an old stored name is translated by the store, not here


def test_with_changes_validates_and_model_copy_would_not() -> None:
    spec = SpeculationConfig(mode=SpecMode.PROMPT_LOOKUP)
    assert spec.with_changes(draft_max=K_MAX).draft_max == K_MAX
    with pytest.raises(ValueError):
        spec.with_changes(draft_max=K_MAX + 1)
    with pytest.raises(ValueError):
        SamplingParams().with_changes(top_p=0.0)
    assert spec.with_changes(mode="draft-model").mode is SpecMode.DRAFT_MODEL


BUILT_IN = (SpecMode.OFF, SpecMode.PROMPT_LOOKUP, SpecMode.DRAFT_MODEL, SpecMode.SUFFIX,
            SpecMode.AUTO)


def test_k_not_given_is_the_drafters_default_and_a_given_k_is_kept() -> None:
    assert (FREE_DRAFTER_K, DRAFT_MODEL_K) == (16, 4)
    for mode in SpecMode:
        want = DRAFT_MODEL_K if mode is SpecMode.DRAFT_MODEL else FREE_DRAFTER_K
        if mode.info is not None and mode not in BUILT_IN:  # a registered drafter's own
            want = mode.info.default_k
        assert default_draft_max(mode) == default_draft_max(mode.value) == want
        assert SpeculationConfig(mode=mode).draft_max == want
        assert SpeculationConfig.model_validate({"mode": mode.value}).draft_max == want
        assert SpeculationConfig(mode=mode, draft_max=7).draft_max == 7
    # a stored configuration keeps its k; changing the drafter keeps an explicit k
    stored = SpeculationConfig(mode=SpecMode.SUFFIX, draft_max=7)
    assert SpeculationConfig.model_validate_json(stored.model_dump_json()).draft_max == 7
    assert stored.with_changes(mode=SpecMode.DRAFT_MODEL).draft_max == 7
    # k_for: a default k follows the drafter, a chosen one stays
    assert stored.k_for(SpecMode.DRAFT_MODEL) == 7
    assert SpeculationConfig(mode=SpecMode.SUFFIX).k_for(SpecMode.DRAFT_MODEL) == 4
    assert SpeculationConfig(mode=SpecMode.DRAFT_MODEL).k_for("prompt-lookup") == 16
    with pytest.raises(ValueError, match="mode"):
        SpeculationConfig.model_validate({"mode": "telepathy"})


def test_draft_lengths_parse_with_the_one_limit() -> None:
    assert parse_draft_lengths("8, 1;2 2") == (1, 2, 8)
    for bad in ("", "x", "0", str(K_MAX + 1)):
        with pytest.raises(ValueError):
            parse_draft_lengths(bad)


def test_statistics_read_back_from_their_dict() -> None:
    lookup = SpecStats(mode="prompt-lookup", verified=8, accepted=6, proposed=10,
                       verified_at=(4, 4))
    again = SpecStats.from_dict(lookup.to_dict())
    assert again == lookup and lookup.to_dict()["mode"] == "prompt-lookup"


def test_every_field_is_described_and_its_bounds_are_read_from_the_field() -> None:
    from app.options import SEED_MAX, field_schema

    for model in (SamplingParams, SpeculationConfig):
        for name in model.model_fields:
            assert field_schema(model, name).description, f"{model.__name__}.{name}"
    top_p = field_schema(SamplingParams, "top_p")
    assert (top_p.low, top_p.low_open, top_p.high, top_p.high_open) == (0.0, True, 1.0, False)
    assert top_p.range_text() == "> 0 … 1" and top_p.default == 0.95
    assert field_schema(SamplingParams, "seed").high == SEED_MAX
    assert field_schema(SamplingParams, "repeat_last_n").range_text() == "≥ 0"
    k = field_schema(SpeculationConfig, "draft_max")
    assert (k.low, k.high, k.default) == (1, K_MAX, FREE_DRAFTER_K)
    with pytest.raises(KeyError):
        field_schema(SamplingParams, "temp")
