"""The draft model in the registry: the session's loaded
:class:`app.engine.drafters.DraftModelDrafter` (loaded with
:meth:`app.engine.session.Session.set_draft_model`)."""

from __future__ import annotations

from app.engine.drafter_kinds import DrafterHost, Unavailable, register
from app.engine.drafters import Drafter
from app.options import DRAFT_MODEL_INFO, SpeculationConfig


def create(host: DrafterHost, spec: SpeculationConfig) -> Drafter | Unavailable:
    """The loaded draft model's drafter with the reply's ``draft_p_min``."""
    drafter = host.loaded_draft
    if drafter is None:
        if host.loaded_assistant is not None:
            return Unavailable("The loaded drafter model is an MTP assistant, which drafts "
                               "as MTP; decoding without speculation.")
        return Unavailable("No draft model is loaded; decoding without speculation.")
    if drafter.model.is_recurrent:
        return Unavailable("The draft model's memory cannot roll back; speculation is off.")
    drafter.p_min = spec.draft_p_min
    return drafter


KIND = register(DRAFT_MODEL_INFO, create)
