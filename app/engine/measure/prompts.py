"""Prompt sets for measurement: the builtin ones, a user's file, and their tokenization.

Prompt sets are data: ``builtin:code``, ``builtin:chat`` and the multi-turn
``builtin:agent`` live in ``resources/prompts/{code,chat,agent}.json`` (conversations are
loaded by :mod:`app.engine.measure.multiturn`); a user file may be JSON, JSON Lines or plain text
(see :func:`load_prompts`). Each prompt has a completion form for base models and a
chat form for models with a chat template; :func:`prepare_prompt` picks one for a loaded
session and tokenizes it. The benchmark, the k sweep and the race all run on the
:class:`PreparedPrompt` this gives.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal

from app.engine.chat import ChatMessage, tokenize_plain
from app.engine.session import Session
from app.errors import PromptSetError, TandemError
from app.formatting import loads_json
from app.store import paths

PromptFormat = Literal["auto", "plain", "chat"]

BUILTIN_SETS = ("code", "chat", "agent")
#: The builtin sets that are multi-turn conversations (:mod:`app.engine.measure.multiturn`).
MULTITURN_SETS = ("agent",)


@dataclass(frozen=True, slots=True)
class BenchPrompt:
    """One benchmark prompt in both formats.

    ``plain``: a completion prompt for base models (Gemma 3 270M has no chat template), so
    that the model continues sensibly; ``chat``: the user message for models with a chat
    template; ``stop``: stop strings used with ``plain`` (a chat reply ends at the
    template's end-of-turn token instead).
    """

    name: str
    plain: str
    chat: str
    stop: tuple[str, ...] = ()


@dataclass(frozen=True, slots=True)
class PreparedPrompt:
    """Prompt token ids (starting with exactly one BOS where the model adds one) and the
    stop strings that go with them."""

    tokens: tuple[int, ...]
    stop: tuple[str, ...] = ()
    name: str = ""
    format: Literal["plain", "chat"] = "plain"


def prompt_texts(obj: Any, where: str, names: bool = False) -> tuple[str, str, tuple[str, ...]]:
    """A prompt or a conversation's turn of a prompt file: a string, or an object with
    ``text`` (or ``plain`` and ``chat``, each defaulting to the other) and ``stop`` (a
    string or a list of strings); ``names``: a ``name`` key is allowed too.

    Returns:
        (plain text, chat text, stop strings).

    Raises:
        PromptSetError: an empty prompt, an unknown key, a value of the wrong type (the
            message starts with ``where``).
    """
    if isinstance(obj, str):
        if not obj:
            raise PromptSetError(f"{where} is empty.")
        return obj, obj, ()
    if not isinstance(obj, dict):
        raise PromptSetError(f"{where} is neither a string nor an object.")
    allowed = _TEXT_KEYS | ({"name"} if names else set())
    unknown = set(obj) - allowed
    if unknown:
        raise PromptSetError(f"{where}: unknown key(s) {sorted(unknown)}; use "
                             f"{', '.join(sorted(allowed))}.")
    text = obj.get("text")
    plain = obj.get("plain", text)
    chat = obj.get("chat", text if text is not None else plain)
    if plain is None and isinstance(chat, str):
        plain = chat
    if not isinstance(plain, str) or not isinstance(chat, str) or not (plain or chat):
        raise PromptSetError(f"{where} needs a non-empty 'text' string (or 'plain' and 'chat').")
    stop = obj.get("stop", [])
    if isinstance(stop, str):
        stop = [stop]
    if not isinstance(stop, list) or not all(isinstance(s, str) for s in stop):
        raise PromptSetError(f"{where}: 'stop' must be a string or a list of strings.")
    return plain, chat, tuple(stop)


#: the keys of a prompt object (and of a conversation's turn)
_TEXT_KEYS = {"text", "plain", "chat", "stop"}


def _prompt_from_obj(obj: Any, index: int, source: str) -> BenchPrompt:
    plain, chat, stop = prompt_texts(obj, f"{source}: prompt {index + 1}", names=True)
    name = (obj.get("name") if isinstance(obj, dict) else None) or f"prompt-{index + 1}"
    return BenchPrompt(name=str(name), plain=plain, chat=chat, stop=stop)


def load_prompts(spec: str) -> list[BenchPrompt]:
    """Load a prompt set.

    Args:
        spec: ``builtin:code`` or ``builtin:chat``, or a file path:

            * ``.json``: a list of prompts, or an object with a ``prompts`` list (the
              builtin format); each prompt is a string or an object with ``text`` (or
              ``plain`` and ``chat``), optional ``name`` and ``stop``;
            * ``.jsonl``: one such prompt per line;
            * anything else: plain text, prompts separated by lines holding only ``---``.

    Returns:
        At least one prompt.

    Raises:
        TandemError: unknown builtin set, missing or unreadable file, no prompts.
    """
    if spec.startswith("builtin:"):
        name = spec.split(":", 1)[1]
        if name not in BUILTIN_SETS:
            raise TandemError(
                f"Unknown builtin prompt set {spec!r}; choose "
                + " or ".join(f"builtin:{n}" for n in BUILTIN_SETS)
                + "."
            )
        path = paths.resources_dir() / "prompts" / f"{name}.json"
    else:
        path = Path(spec)
    if not path.is_file():
        raise TandemError(f"Prompt file not found: {path}")
    try:
        raw = path.read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as exc:
        raise TandemError(f"Could not read the prompt file {path}: {exc}") from exc
    suffix = path.suffix.lower()
    items: list[Any]
    try:
        if suffix == ".json":
            data = loads_json(raw)
            if isinstance(data, dict) and "conversations" in data:
                raise PromptSetError(
                    f"{path} is a multi-turn set; load it with "
                    "app.engine.measure.multiturn.load_conversations."
                )
            items = data.get("prompts", []) if isinstance(data, dict) else data
            if not isinstance(items, list):
                raise TandemError(f"{path}: expected a list of prompts.")
        elif suffix == ".jsonl":
            items = [loads_json(line) for line in raw.splitlines() if line.strip()]
        else:
            blocks: list[list[str]] = [[]]
            for line in raw.splitlines():
                if line.strip() == "---":
                    blocks.append([])
                else:
                    blocks[-1].append(line)
            items = ["\n".join(b).strip("\n") for b in blocks]
            items = [t for t in items if t.strip()]
    except json.JSONDecodeError as exc:
        raise TandemError(f"{path} is not valid JSON: {exc}") from exc
    prompts = [_prompt_from_obj(obj, i, str(path)) for i, obj in enumerate(items)]
    if not prompts:
        raise TandemError(f"{path} holds no prompts.")
    return prompts


def resolve_format(session: Session, fmt: PromptFormat) -> Literal["plain", "chat"]:
    """``auto``: ``chat`` when the model has its own chat template, else ``plain``."""
    if fmt == "auto":
        return "plain" if session.chat_format.uses_fallback else "chat"
    return fmt


def prepare_prompt(
    session: Session, prompt: BenchPrompt, fmt: PromptFormat = "auto"
) -> PreparedPrompt:
    """Tokenize a benchmark prompt for this session's target in the chosen format."""
    resolved = resolve_format(session, fmt)
    if resolved == "chat":
        return prepare_chat(session, [ChatMessage("user", prompt.chat)], name=prompt.name)
    return PreparedPrompt(
        tokens=tuple(tokenize_plain(session.target, prompt.plain)),
        stop=prompt.stop,
        name=prompt.name,
        format="plain",
    )


def prepare_chat(
    session: Session, messages: Sequence[ChatMessage], name: str = ""
) -> PreparedPrompt:
    """A conversation through the model's chat template (or the plain fallback
    transcript), with the format's stop strings."""
    return PreparedPrompt(
        tokens=tuple(session.chat_prompt(messages)),
        stop=tuple(session.chat_format.stop),
        name=name,
        format="chat",
    )
