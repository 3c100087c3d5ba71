"""Suffix lookup in the registry: :class:`app.engine.suffix.SuffixDrafter` over the
session's index of earlier replies."""

from __future__ import annotations

from app.engine.drafter_kinds import DrafterHost, Unavailable, register
from app.engine.drafters import Drafter
from app.engine.suffix import SuffixDrafter, SuffixIndex
from app.options import SUFFIX_INFO, SpeculationConfig


def replay(spec: SpeculationConfig, index: SuffixIndex) -> Drafter:
    """A drafter over ``index`` with the reply's settings. With the adaptive draft-length
    policy a draft continues past the match-length cap (``past_cap``) and the policy cuts
    it (replayed and timed in docs/benchmarks.md, "Suffix lookup: the default draft
    length against fixed k"); with a fixed k every draft token is verified, and
    SuffixDecoding's cap stays."""
    return SuffixDrafter(index, spec_factor=spec.suffix_spec_factor,
                         min_token_prob=spec.suffix_min_prob, past_cap=spec.adaptive)


def create(host: DrafterHost, spec: SpeculationConfig) -> Drafter | Unavailable:
    """A drafter over the session's suffix index with the reply's settings."""
    return replay(spec, host.suffix_index)


KIND = register(SUFFIX_INFO, create, replay=replay)
