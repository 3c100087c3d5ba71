"""Suffix lookup in the registry: :class:`app.engine.suffix.SuffixDrafter` over the
session's index of earlier replies."""

from __future__ import annotations

from app.engine.drafter_kinds import DrafterHost, Unavailable, register
from app.engine.drafters import Drafter
from app.engine.suffix import SuffixDrafter, SuffixIndex
from app.options import SUFFIX_INFO, SpeculationConfig


def replay(spec: SpeculationConfig, index: SuffixIndex) -> Drafter:
    """A drafter over ``index`` with the reply's settings."""
    return SuffixDrafter(index, spec_factor=spec.suffix_spec_factor,
                         min_token_prob=spec.suffix_min_prob)


def create(host: DrafterHost, spec: SpeculationConfig) -> Drafter | Unavailable:
    """A drafter over the session's suffix index with the reply's settings."""
    return replay(spec, host.suffix_index)


KIND = register(SUFFIX_INFO, create, replay=replay)
