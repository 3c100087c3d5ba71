"""Prompt lookup (n-gram) in the registry: :class:`app.engine.drafters.PromptLookupDrafter`."""

from __future__ import annotations

from app.engine.drafter_kinds import DrafterHost, Unavailable, register
from app.engine.drafters import Drafter, PromptLookupDrafter
from app.engine.suffix import SuffixIndex
from app.options import PROMPT_LOOKUP_INFO, SpeculationConfig


def replay(spec: SpeculationConfig, index: SuffixIndex) -> Drafter:
    """A new n-gram index over one reply's prompt and text (``index`` is not used)."""
    return PromptLookupDrafter(spec.ngram_min, max(spec.ngram_min, spec.ngram_max))


def create(host: DrafterHost, spec: SpeculationConfig) -> Drafter | Unavailable:
    """A new n-gram index over this reply's prompt and text."""
    return replay(spec, host.suffix_index)


KIND = register(PROMPT_LOOKUP_INFO, create, replay=replay)
