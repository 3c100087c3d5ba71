"""Prompt lookup (n-gram) in the registry: :class:`app.engine.drafters.PromptLookupDrafter`."""

from __future__ import annotations

from app.engine.drafter_kinds import DrafterHost, Unavailable, register
from app.engine.drafters import Drafter, PromptLookupDrafter
from app.options import PROMPT_LOOKUP_INFO, SpeculationConfig


def create(host: DrafterHost, spec: SpeculationConfig) -> Drafter | Unavailable:
    """A new n-gram index over this reply's prompt and text."""
    return PromptLookupDrafter(spec.ngram_min, max(spec.ngram_min, spec.ngram_max))


KIND = register(PROMPT_LOOKUP_INFO, create)
