"""The figures line under a reply, shared by the chat view's footer and the Markdown
export (Qt-free): what a stored reply's statistics (:meth:`SpecStats.to_dict`) say in
words."""

from __future__ import annotations

from typing import Any

from app.engine.reply import ended_at_full_context
from app.engine.stats import MIN_VERIFIED_FOR_ESTIMATE
from app.formatting import REASON_WORDS
from app.options import SpecMode
from app.remote.figures import tokens_per_pass
from app.ui.explain import stored_auto_explanation, stored_context_words


def remote_footer_parts(remote: dict[str, Any], n_tokens: int) -> list[str]:
    """A remote reply's footer parts: the engine and drafter as the server names them,
    and its α and τ (per pass over every round, as for a local reply, else the
    server's per drafting round, said so), or that it reported nothing."""
    parts = [f"{remote.get('engine', 'server')} · "
             f"{remote.get('method') or 'drafter not reported'}"]
    figures = remote.get("figures")
    if not isinstance(figures, dict):
        parts.append("no speculation figures from the server")
        return parts
    wide = " server-wide" if figures.get("scope") == "server-wide" else ""
    if figures.get("acceptance_rate") is not None:
        parts.append(f"α {figures['acceptance_rate'] * 100:.0f}% "
                     f"({figures['accepted']}/{figures['draft_tokens']}{wide})")
    else:
        parts.append("nothing drafted")
    if (per_pass := tokens_per_pass(n_tokens, remote)) is not None:
        parts.append(f"τ {per_pass:.2f}")
    elif figures.get("mean_acceptance_length") is not None and figures.get("drafts"):
        parts.append(f"τ {figures['mean_acceptance_length']:.2f} per drafting round")
    return parts


def reply_figures(stats: dict[str, Any] | None, finish_reason: str | None,
                  note: str | None = None) -> list[str]:
    """The figures of a reply, in the order the footer and the export write them:
    tokens, tok/s, CPU threads, drafter and k (a remote server's own figures instead),
    α (with its counts when too few draft tokens were verified for an estimate), τ, and
    how it ended (``finish_reason`` "stop" says nothing; a length stop the ``note``
    explains as a full context neither)."""
    parts: list[str] = []
    if stats:
        parts.append(f"{stats.get('emitted', 0)} tokens")
        remote = (stats.get("extra") or {}).get("remote")
        # a remote reply's rate as the gauge shows it (tokens after the first, measured
        # on the stream: its first token is the prefill's)
        tps = remote.get("decode_tps") if isinstance(remote, dict) else stats.get("decode_tps")
        if tps:
            parts.append(f"{tps:.1f} tok/s")
        threads = stats.get("n_threads")
        if isinstance(threads, int) and threads > 0:
            parts.append(f"{threads} CPU thread{'s' if threads != 1 else ''}")
        try:
            mode: SpecMode | None = SpecMode(stats.get("mode", SpecMode.OFF.value))
        except ValueError:  # written by a newer Tandem with a drafter this one lacks
            mode = None
        if isinstance(remote, dict):  # a remote server's reply: its own figures
            parts.extend(remote_footer_parts(remote, int(stats.get("emitted", 0))))
            stats = {}
        label = mode.words if mode is not None else str(stats.get("mode"))
        if mode is not SpecMode.OFF:
            label += f" k={stats.get('draft_max', 0)}"
        if isinstance(stats.get("auto"), dict):  # chosen by the auto drafter choice
            label = f"{SpecMode.AUTO.label}: {label}"
        if stats:
            parts.append(label)
        alpha = stats.get("acceptance_rate")
        if alpha is not None:
            verified = int(stats.get("verified", 0))
            few = verified < MIN_VERIFIED_FOR_ESTIMATE
            parts.append(f"α {alpha * 100:.0f}%"
                         + (f" ({stats.get('accepted', 0)}/{verified} draft tokens)" if few else ""))
        tau = stats.get("mean_acceptance_length")
        if tau is not None and mode is not SpecMode.OFF:
            parts.append(f"τ {tau:.2f}")
    if finish_reason in REASON_WORDS and not (
            finish_reason == "length" and ended_at_full_context(note)):  # the note says so
        parts.append(REASON_WORDS[finish_reason])
    return parts


def reply_footer(stats: dict[str, Any] | None, finish_reason: str | None,
                 note: str | None = None) -> str:
    """One line under a reply (:func:`reply_figures`); then why Auto chose its drafter,
    what was dropped to fit the context window, and the ``note``, a line each."""
    line = " · ".join(reply_figures(stats, finish_reason, note))
    for extra in (stored_auto_explanation(stats, reason_only=True), stored_context_words(stats),
                  note):
        if extra:
            line = f"{line}\n{extra}" if line else extra
    return line
