"""Sentences that explain a reply: why Auto chose its drafter, and what was left out to
fit the context window.

The engine hands both over as figures (:class:`app.engine.auto.AutoChoice` with its
:class:`~app.engine.auto.DrafterEvidence`, :class:`app.engine.context_fit.ContextFit`);
the gauge, the reply footer and the screenshots word them here, once, from the live
objects or from what a stored reply recorded (``stats["auto"]``, ``stats["context"]``).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from app.engine.auto import MARGIN, AutoChoice, DrafterEvidence
from app.engine.context_fit import ContextFit
from app.engine.stats import MIN_VERIFIED_FOR_ESTIMATE
from app.options import SpecMode


def _replies(n: int) -> str:
    return "1 reply" if n == 1 else f"{n} replies"


def _where(choice: AutoChoice) -> str:
    return ("in this conversation" if choice.replayed_from == "conversation"
            else "in this session's latest replies")


def _evidence_words(e: DrafterEvidence, choice: AutoChoice) -> str:
    """Why this drafter scored as it did: ``92% accepted in the last 3 replies``."""
    speed = f"{e.speedup:.2f}× plain" if e.speedup is not None else ""
    if e.source == "measured":
        alpha = e.acceptance_rate
        if alpha is None:
            return f"measured {speed} over its last {_replies(e.replies)} here"
        return (f"{alpha * 100:.0f}% accepted in the last {_replies(e.replies)} "
                f"(measured {speed})")
    if e.source == "prior":
        published = (f"the published {(e.assumed_acceptance or 0) * 100:.0f}% acceptance "
                     f"of MTP heads and c = {e.cost_ratio or 0:.2f}")
        if e.cost_from_replies:
            return (f"no acceptance measured here yet; {speed} expected from {published} "
                    f"measured over its last {_replies(e.replies)}")
        return f"not tried here yet; {speed} expected from {published} measured by the load check"
    if e.source == "priced":
        alpha = e.acceptance_rate
        rate = f"{alpha * 100:.0f}% accepted" if alpha is not None else "drafted"
        return (f"{rate} in the last {_replies(e.replies)}, c = {e.cost_ratio or 0:.2f} "
                f"(estimated {speed})")
    if e.source == "untried":
        return f"not tried here yet; {speed} at best (if every draft were accepted)"
    alpha = e.acceptance_rate
    if alpha is None:
        return f"found no match {_where(choice)} yet"
    if e.verified < MIN_VERIFIED_FOR_ESTIMATE:  # say how little it rests on
        return (f"{e.accepted} of its {e.verified} drafts would have been accepted over "
                f"{_replies(e.replies)} {_where(choice)} (estimated {speed}, from few "
                "drafts)")
    return (f"{alpha * 100:.0f}% of its drafts would have been accepted over "
            f"{_replies(e.replies)} {_where(choice)} (estimated {speed})")


def auto_reason(choice: AutoChoice) -> str:
    """Why Auto chose what it chose, from its figures (the choice itself left out).

    Examples: ``92% accepted in the last 3 replies (measured 1.85× plain)``; ``prompt
    lookup found no match in this conversation yet``.
    """
    if choice.reason == "prior":
        return "nothing to learn from yet; it costs nothing to try and drafts only while drafts pay"
    dropped = "; ".join(
        f"{e.mode.words} left out: measured {e.speedup:.2f}× plain here"
        for e in choice.evidence if e.mode in choice.dropped and e.speedup is not None)
    if choice.mode is not SpecMode.OFF:
        lead = next((e for e in choice.evidence if e.mode is choice.mode), None)
        why = _evidence_words(lead, choice) if lead is not None else "best estimate"
        return "; ".join(filter(None, (why, dropped)))
    scored = [e for e in choice.evidence if e.mode not in choice.dropped]
    if scored and all(e.source == "replay" and not e.verified for e in scored):
        names = " and ".join(e.mode.words for e in scored)
        why = f"{names} found no match {_where(choice)} yet"
    elif scored:
        best = scored[0]
        why = (f"{best.mode.words} came closest, {_evidence_words(best, choice)}; a drafter "
               f"must reach {MARGIN:.2f}× plain")
    elif dropped:
        why = ""
    else:
        why = "no drafter could be priced here"
    return "; ".join(filter(None, (why, dropped)))


def auto_explanation(choice: AutoChoice) -> str:
    """One sentence: what Auto chose and why (:func:`auto_reason`), from its figures.

    Examples: ``suffix lookup, k ≤ 16: 92% accepted in the last 3 replies (measured
    1.85× plain)``; ``no speculation: prompt lookup found no match in this conversation
    yet``.
    """
    head = (f"{choice.mode.words}, k ≤ {choice.draft_max}" if choice.mode is not SpecMode.OFF
            else "no speculation")
    reason = auto_reason(choice)
    return f"{head}: {reason}" if reason else head


def stored_auto_explanation(stats: Mapping[str, Any] | None, *,
                            reason_only: bool = False) -> str | None:
    """:func:`auto_explanation` of a stored reply's ``stats["auto"]`` (``reason_only``:
    :func:`auto_reason`, as a sentence, for a footer whose first line names the choice);
    None when there is none or it cannot be read."""
    raw = (stats or {}).get("auto")
    if not isinstance(raw, Mapping):
        return None
    choice = AutoChoice.from_dict(raw)
    if choice is None:
        return None
    if not reason_only:
        return auto_explanation(choice)
    reason = auto_reason(choice)
    return reason[:1].upper() + reason[1:] + "." if reason else None


def context_fit_words(fit: ContextFit, *, ahead: bool = False) -> str:
    """``Dropped 3 earlier messages (1,240 tokens) to fit the 4,096-token window``, and
    what was kept; ``ahead``: what sending would do (``Sending drops …``, ``… is kept``)."""
    n = fit.dropped_messages
    kept = [what for what, was in (("the system prompt", fit.kept_system),
                                   ("the first exchange", fit.kept_first)) if was]
    how = fit.policy.label.lower()
    if kept:
        verb = ("are" if ahead else "were") if len(kept) > 1 else ("is" if ahead else "was")
        how += f": {' and '.join(kept)} {verb} kept"
    return (f"{'Sending drops' if ahead else 'Dropped'} {n} earlier "
            f"message{'s' if n != 1 else ''} ({fit.dropped_tokens:,} "
            f"tokens) to fit the {fit.n_ctx:,}-token window ({how})")


def stored_context_words(stats: Mapping[str, Any] | None) -> str | None:
    """:func:`context_fit_words` of a stored reply's ``stats["context"]`` (None: none)."""
    raw = (stats or {}).get("context")
    fit = ContextFit.from_dict(raw) if isinstance(raw, Mapping) else None
    return context_fit_words(fit) if fit is not None else None
