"""Multi-turn benchmark sets: conversations in which each reply feeds the next turn.

Agentic work repeats itself across turns (a tool call keeps its JSON shape, a fix
rewrites the same code, a summary quotes what it summarises) and across conversations
(the same agent, another day). A single-turn prompt set cannot show what a drafter gains
from that, so ``builtin:agent`` (``resources/prompts/agent.json``) is a set of
conversations, and :func:`run_conversations` runs them the way the app holds a chat:

* each turn's prompt is the conversation so far, including the model's own earlier
  replies (with a chat template: system, user and assistant messages; for a base model
  the plain transcript ``plain_1 + reply_1 + … + plain_t``);
* the earlier replies are those of the ``off`` run of the same repeat, so every
  configuration answers exactly the same prompts (speculation is lossless, so the
  configurations' own replies are the same up to near-ties);
* the suffix drafter's index of earlier replies is filled as the app fills it: empty at
  the start of each repeat, and each reply is added when its turn ends, so later turns
  and later conversations draft from earlier replies but never from their own. The
  session's own index is set aside for the run and put back afterwards.

The file format (JSON, or JSON Lines with one conversation per line)::

    {"conversations": [
        {"name": "tool-calls", "system": "optional, chat only",
         "turns": ["same text for both formats",
                   {"plain": "base-model text", "chat": "user message", "stop": ["\\n"]}]}]}

A turn is a string or an object with ``text`` (or ``plain`` and ``chat``) and optional
``stop`` (used with ``plain``; a chat reply ends at the template's end-of-turn token).
Unknown keys are refused, so a misspelt key is an error, not a silently ignored field.
A single-turn set (``builtin:code``…) is read as one-turn conversations.
"""

from __future__ import annotations

import dataclasses
import json
import threading
import time
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal

from app.engine.auto import ReplyObservation, resolve_auto
from app.engine.chat import ChatMessage, tokenize_plain
from app.engine.cpu import cpu_sample, other_cores
from app.engine.reply import ReplyRecord
from app.engine.measure.bench import (
    bench_plan,
    BenchReport,
    ProgressFn,
    RunRecord,
    compared_to_off,
    config_label,
    fallback_notes,
    generate_once,
    summarize,
)
from app.engine.measure.prompts import (
    MULTITURN_SETS,
    BenchPrompt,
    PreparedPrompt,
    load_prompts,
    prepare_chat,
    prompt_texts,
)
from app.engine.session import Session
from app.engine.suffix import SuffixIndex
from app.errors import PromptSetError
from app.formatting import loads_json
from app.options import SamplingParams, SpecMode, SpeculationConfig
from app.store.paths import resources_dir

_TOP_KEYS = {"name", "description", "format", "conversations"}
_CONV_KEYS = {"name", "system", "turns"}


@dataclass(frozen=True, slots=True)
class Turn:
    """One user turn: ``plain`` text appended to a base model's transcript, ``chat`` the
    user message for a chat template, ``stop`` the stop strings used with ``plain``."""

    plain: str
    chat: str
    stop: tuple[str, ...] = ()


@dataclass(frozen=True, slots=True)
class Conversation:
    """A named conversation: its turns in order and an optional system message."""

    name: str
    turns: tuple[Turn, ...]
    system: str | None = None


# -- loading and validation ----------------------------------------------------------


def _set_path(spec: str) -> Path:
    if spec.startswith("builtin:"):
        name = spec.split(":", 1)[1]
        return resources_dir() / "prompts" / f"{name}.json"
    return Path(spec)


def is_multiturn(spec: str) -> bool:
    """Whether ``spec`` names a multi-turn set (``builtin:agent``, or a file whose JSON has
    ``conversations``, or JSON Lines whose first object has ``turns``). Unreadable or
    malformed files count as single-turn: :func:`load_conversations` then says why."""
    if spec.startswith("builtin:"):
        return spec.split(":", 1)[1] in MULTITURN_SETS
    path = Path(spec)
    try:
        raw = path.read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError):
        return False
    try:
        if path.suffix.lower() == ".jsonl":
            first = next((ln for ln in raw.splitlines() if ln.strip()), "")
            obj = loads_json(first) if first else None
            return isinstance(obj, dict) and "turns" in obj
        data = loads_json(raw) if path.suffix.lower() == ".json" else None
    except json.JSONDecodeError:
        return False
    return isinstance(data, dict) and "conversations" in data


def _turn(obj: Any, where: str) -> Turn:
    plain, chat, stop = prompt_texts(obj, where)
    return Turn(plain=plain, chat=chat, stop=stop)


def _conversation(obj: Any, index: int, source: str) -> Conversation:
    where = f"{source}: conversation {index + 1}"
    if not isinstance(obj, dict):
        raise PromptSetError(f"{where} is not an object.")
    unknown = set(obj) - _CONV_KEYS
    if unknown:
        raise PromptSetError(f"{where}: unknown key(s) {sorted(unknown)}; use name, system, turns.")
    name = obj.get("name", f"conversation-{index + 1}")
    if not isinstance(name, str) or not name:
        raise PromptSetError(f"{where}: 'name' must be a non-empty string.")
    where = f"{source}: conversation {index + 1} ({name!r})"
    system = obj.get("system")
    if system is not None and not isinstance(system, str):
        raise PromptSetError(f"{where}: 'system' must be a string.")
    turns = obj.get("turns")
    if not isinstance(turns, list) or not turns:
        raise PromptSetError(f"{where} needs a non-empty 'turns' list.")
    return Conversation(
        name=name,
        turns=tuple(_turn(t, f"{where}, turn {i + 1}") for i, t in enumerate(turns)),
        system=system,
    )


def parse_conversations(data: Any, source: str) -> list[Conversation]:
    """Validate parsed JSON of the multi-turn format (see the module docstring).

    Raises:
        PromptSetError: the structure is wrong; the message names the conversation, the
            turn and the key.
    """
    if isinstance(data, dict):
        unknown = set(data) - _TOP_KEYS
        if unknown:
            raise PromptSetError(
                f"{source}: unknown key(s) {sorted(unknown)}; a multi-turn set has "
                "'conversations' (and optional name, description, format)."
            )
        items = data.get("conversations")
    else:
        items = data
    if not isinstance(items, list) or not items:
        raise PromptSetError(f"{source} holds no conversations (expected a 'conversations' list).")
    return [_conversation(obj, i, source) for i, obj in enumerate(items)]


def conversations_from_prompts(prompts: Sequence[BenchPrompt]) -> list[Conversation]:
    """A single-turn set as one-turn conversations (same names, texts and stops)."""
    return [
        Conversation(name=p.name, turns=(Turn(plain=p.plain, chat=p.chat, stop=p.stop),))
        for p in prompts
    ]


def load_conversations(spec: str) -> list[Conversation]:
    """Load a prompt set as conversations.

    Args:
        spec: ``builtin:agent`` (multi-turn), another builtin or a file. A multi-turn file
            is ``.json`` with a ``conversations`` list or ``.jsonl`` with one conversation
            object per line; anything else is read by
            :func:`app.engine.measure.prompts.load_prompts` as one-turn conversations.

    Returns:
        At least one conversation, each with at least one turn.

    Raises:
        PromptSetError: missing, unreadable or malformed file.
        TandemError: an unknown builtin set (from ``load_prompts``).
    """
    if not is_multiturn(spec):
        path = _set_path(spec)
        if path.suffix.lower() == ".json" and path.is_file():
            try:
                single: Any = loads_json(path.read_text(encoding="utf-8"))
            except (OSError, UnicodeDecodeError, json.JSONDecodeError):
                single = None
            if isinstance(single, dict) and "turns" in single:
                raise PromptSetError(
                    f"{path}: a multi-turn set needs its conversations in a "
                    "'conversations' list."
                )
        return conversations_from_prompts(load_prompts(spec))
    path = _set_path(spec)
    if not path.is_file():
        raise PromptSetError(f"Prompt file not found: {path}")
    try:
        raw = path.read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as exc:
        raise PromptSetError(f"Could not read the prompt file {path}: {exc}") from exc
    try:
        if path.suffix.lower() == ".jsonl":
            data: Any = [loads_json(ln) for ln in raw.splitlines() if ln.strip()]
        else:
            data = loads_json(raw)
    except json.JSONDecodeError as exc:
        raise PromptSetError(f"{path} is not valid JSON: {exc}") from exc
    return parse_conversations(data, str(path))


# -- prompts of a turn ---------------------------------------------------------------


def prepare_turn(
    session: Session,
    conversation: Conversation,
    turn: int,
    replies: Sequence[str],
    fmt: Literal["plain", "chat"],
) -> PreparedPrompt:
    """The prompt of turn ``turn`` (0-based) given the texts of the earlier replies.

    ``plain``: ``plain_1 + reply_1 + … + plain_turn`` as one completion prompt with the
    turn's stop strings; ``chat``: the messages through the model's chat template (or the
    plain transcript a base model gets), with the format's stop strings.

    Raises:
        ValueError: fewer replies than earlier turns.
        TandemError: the chat template failed.
    """
    if len(replies) < turn:
        raise ValueError(f"turn {turn + 1} needs {turn} earlier replies, got {len(replies)}")
    name = f"{conversation.name}#{turn + 1}"
    turns = conversation.turns
    if fmt == "plain":
        text = "".join(turns[i].plain + replies[i] for i in range(turn)) + turns[turn].plain
        return PreparedPrompt(
            tokens=tuple(tokenize_plain(session.target, text)),
            stop=turns[turn].stop,
            name=name,
            format="plain",
        )
    messages: list[ChatMessage] = []
    if conversation.system:
        messages.append(ChatMessage("system", conversation.system))
    for i in range(turn):
        messages += [ChatMessage("user", turns[i].chat), ChatMessage("assistant", replies[i])]
    messages.append(ChatMessage("user", turns[turn].chat))
    return prepare_chat(session, messages, name=name)


# -- running -------------------------------------------------------------------------


def run_conversations(
    session: Session,
    conversations: Sequence[Conversation],
    speculations: Sequence[SpeculationConfig],
    sampling: SamplingParams,
    *,
    fmt: Literal["plain", "chat"],
    repeat: int = 3,
    warmup: bool = True,
    fresh_cache: bool = True,
    share_history: bool = True,
    cancel: threading.Event | None = None,
    progress: ProgressFn | None = None,
    settings: dict[str, Any] | None = None,
) -> BenchReport:
    """Run every turn of every conversation with speculation off and each configuration.

    Per repeat, conversations run in order and turns in order; at each turn ``off`` and
    every configuration run back to back on the same prompt, in an order rotated by one
    each turn (slow drifts of the machine spread over all configurations). The ``off``
    reply becomes the conversation's next assistant message and, with
    ``share_history``, is added to the suffix index (see the module docstring).

    Args:
        speculations: the "on" configurations (distinct draft lengths per mode label).
        fmt: ``plain`` or ``chat`` (:func:`app.engine.measure.prompts.resolve_format`).
        repeat: runs of the whole set (≥ 1); the reply index restarts empty each time.
        warmup: first run each configuration once on the first turn (16 tokens,
            not recorded).
        share_history: fill the suffix index with finished replies as the app does;
            False leaves it empty (the drafter then sees the conversation only).
        cancel: stops after the current run; the report is marked ``cancelled``.

    Returns:
        A :class:`~app.engine.measure.bench.BenchReport` whose records are named
        ``<conversation>#<turn>``, grouped by (repeat, turn), ``off`` first.

    Raises:
        ValueError: no conversations, repeat < 1, or two configurations with one label.
        TandemError: the engine failed (e.g. a turn no longer fits the context window).
    """
    if not conversations:
        raise ValueError("no conversations")
    configs, sampling = bench_plan(speculations, sampling, repeat)
    labels = [config_label(s) for s in configs]
    n_turns = sum(len(c.turns) for c in conversations)
    saved_index = session.suffix_index
    run = _ConversationRuns(
        session, configs, labels, sampling, fmt, fresh_cache, share_history, cancel, progress,
        run_index=SuffixIndex(saved_index.max_match, saved_index.max_tokens,
                              saved_index.max_replies),
        n_turns=n_turns, total=repeat * n_turns * len(configs))
    session.suffix_index = run.run_index
    try:
        if warmup:
            run.warm_up(prepare_turn(session, conversations[0], 0, [], fmt))
        for rep in range(repeat):
            run.run_repeat(rep, conversations)
            if run.cancelled:
                break
    finally:
        session.suffix_index = saved_index
    return BenchReport(
        settings={**(settings or {}), "multiturn": True, "share_history": share_history,
                  **({"auto_choices": run.auto_choices} if run.auto_choices else {})},
        records=run.records,
        summaries=summarize(run.records, labels),
        cancelled=run.cancelled,
        notes=fallback_notes(run.records),
    )


#: (prompt tokens, reply tokens) of one finished turn
_TurnTokens = tuple[Sequence[int], Sequence[int]]


@dataclass
class _ConversationState:
    """What the auto choice learns within one conversation: its earlier turns (prompt and
    reply tokens) and its own runs' statistics in this conversation."""

    turns_so_far: list[_TurnTokens] = dataclasses.field(default_factory=list)
    observed: list[ReplyObservation] = dataclasses.field(default_factory=list)


@dataclass
class _ConversationRuns:
    """The state of :func:`run_conversations`: its settings, the suffix index it fills,
    the records in report order, the auto choices made, the timed runs counted for
    ``progress``, and, per repeat, the turn counter and the latest finished turns."""

    session: Session
    configs: list[SpeculationConfig]
    labels: list[str]
    sampling: SamplingParams
    fmt: Literal["plain", "chat"]
    fresh_cache: bool
    share_history: bool
    cancel: threading.Event | None
    progress: ProgressFn | None
    run_index: SuffixIndex
    n_turns: int
    total: int
    step: int = 0
    cancelled: bool = False
    records: list[RunRecord] = dataclasses.field(default_factory=list)
    auto_choices: list[dict[str, Any]] = dataclasses.field(default_factory=list)
    #: turns finished in this repeat, over all conversations so far
    flat: int = 0
    #: every finished turn of this repeat (a new conversation's auto evidence)
    recent: list[_TurnTokens] = dataclasses.field(default_factory=list)

    def _cancel_set(self) -> bool:
        return self.cancel is not None and self.cancel.is_set()

    def warm_up(self, first: PreparedPrompt) -> None:
        """Run each configuration once on the first turn (16 tokens, not recorded)."""
        warm = self.sampling.model_copy(update={"max_tokens": min(16, self.sampling.max_tokens)})
        for spec in self.configs:
            if self._cancel_set():
                break
            if spec.mode is SpecMode.AUTO:
                spec, _ = resolve_auto(self.session, (), (), spec)
            generate_once(self.session, first, warm, spec, self.cancel,
                          fresh_cache=self.fresh_cache)

    def run_repeat(self, rep: int, conversations: Sequence[Conversation]) -> None:
        """Every conversation once, with the reply index emptied first."""
        self.run_index.clear()
        self.recent = []
        self.flat = 0
        for conv in conversations:
            self.run_conversation(rep, conv)
            if self.cancelled:
                break

    def run_conversation(self, rep: int, conv: Conversation) -> None:
        """The turns of one conversation in order, each prompt holding the earlier off
        replies; stops at a cancelled run or a turn without an off reply."""
        replies: list[str] = []
        state = _ConversationState()
        for ti in range(len(conv.turns)):
            prompt = prepare_turn(self.session, conv, ti, replies, self.fmt)
            rot = (rep * self.n_turns + self.flat) % len(self.configs)
            group: dict[str, RunRecord] = {}
            off_text: str | None = None
            for spec in self.configs[rot:] + self.configs[:rot]:
                if self._cancel_set():
                    self.cancelled = True
                    break
                fin = self.run_one(spec, prompt, rep, state, group)
                if fin is None:
                    break
                if config_label(spec) == "off":
                    off_text = fin.text
            self.records += compared_to_off(self.session, group, self.labels)
            off = group.get("off")
            if self.cancelled or off is None or off_text is None:
                break
            replies.append(off_text)
            state.turns_so_far.append((prompt.tokens, off.token_ids))
            self.recent.append((prompt.tokens, off.token_ids))
            if self.share_history:
                self.run_index.add_reply(off.token_ids)
            self.flat += 1

    def run_one(self, spec: SpeculationConfig, prompt: PreparedPrompt, rep: int,
                state: _ConversationState, group: dict[str, RunRecord]) -> ReplyRecord | None:
        """One timed run of a turn, added to ``group``; None when it was cancelled."""
        run_spec, choice = spec, None
        choose_s = 0.0
        if spec.mode is SpecMode.AUTO:
            if self.fresh_cache:  # the decision's probes run on a cold cache too
                self.session.reset_cache()
            t_choose = time.perf_counter()
            # a new conversation replays the latest replies of earlier
            # ones, as the chat service does (RECENT_REPLIES = 4)
            evidence = state.turns_so_far or self.recent[-4:]
            run_spec, choice = resolve_auto(self.session, evidence, state.observed, spec)
            choose_s = time.perf_counter() - t_choose
        start = cpu_sample()
        fin = generate_once(self.session, prompt, self.sampling, run_spec, self.cancel,
                            fresh_cache=self.fresh_cache)
        other = other_cores(start, cpu_sample())
        if fin.reason == "cancelled":
            self.cancelled = True
            return None
        if choice is not None:
            state.observed.append(ReplyObservation(
                fin.stats.mode, fin.stats.emitted, fin.stats.decode_time,
                fin.stats.verified, fin.stats.accepted, fin.stats.draft_cost_ratio,
                fin.stats.plain_step_time))
            self.auto_choices.append({"prompt": prompt.name, "repeat": rep,
                                      "choose_s": choose_s, **choice.to_dict()})
        rec = RunRecord(config_label(spec), prompt.name, self.flat, rep, fin, other_cores=other)
        group[rec.label] = rec
        self.step += 1
        if self.progress is not None:
            self.progress(self.step, self.total, rec)
        return fin
