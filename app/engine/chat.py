"""Chat messages → prompt tokens, through the model's own chat template.

The template is the GGUF's ``tokenizer.chat_template`` (a Jinja template written for
Hugging Face transformers). It is untrusted input, so it is compiled and rendered only in
:class:`~app.engine.template_sandbox.TemplateSandbox` (Jinja's immutable sandbox with
size budgets, a deadline and a memory ceiling); a template that does not compile or
fails on a sample conversation is replaced by the fallback below, with a note. A base model without a template
gets :data:`FALLBACK_TEMPLATE`, a plain "User:/Assistant:" transcript whose turns end at
the stop strings ``"\\nUser:"`` and ``"\\nAssistant:"`` (a base model happily writes
the next turns itself). Whatever the template does with ``bos_token``, the token
sequence starts with exactly one BOS when the vocabulary adds one.
"""

from __future__ import annotations

import datetime as _dt
import hashlib
import logging
import json
import re
import secrets
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from typing import Any, Literal

from jinja2 import TemplateError

from app.engine.llama import LlamaModel
from app.engine.template_sandbox import (
    MAX_STRING_CHARS,
    MAX_TEMPLATE_CHARS,
    TemplateLimitError,
    TemplateSandbox,
    guarded,
)
from app.errors import ChatTemplateError

Role = Literal["system", "user", "assistant"]

#: The transcript used when a GGUF has no chat template (base models).
FALLBACK_TEMPLATE = (
    "{% for m in messages %}"
    "{% if m.role == 'system' %}{{ m.content }}\n\n"
    "{% elif m.role == 'user' %}User: {{ m.content }}\n"
    "{% else %}Assistant: {{ m.content }}\n{% endif %}"
    "{% endfor %}"
    "{% if add_generation_prompt %}Assistant:{% endif %}"
)
FALLBACK_STOP = ("\nUser:", "\nAssistant:")

log = logging.getLogger(__name__)


@dataclass(frozen=True, slots=True)
class ChatMessage:
    role: Role
    content: str


def unanswered(roles: Sequence[str]) -> set[int]:
    """Indices of the user messages left without a reply: followed by another user
    message (a reply stopped before any text, or one that failed). A chat's prompt
    leaves them out: the user went on without an answer, and many chat templates
    (Gemma's, Mistral's, Llama 2's) refuse two user messages in a row."""
    return {i for i in range(len(roles) - 1) if roles[i] == "user" and roles[i + 1] == "user"}


class TemplateRaised(TemplateError):
    """The template refused the conversation itself (``raise_exception``), for example
    "Conversation roles must alternate": its words are shown, the template is kept."""


def _raise_exception(message: str) -> None:
    raise TemplateRaised(message)


def _strftime_now(fmt: str) -> str:
    return _dt.datetime.now().strftime(fmt)


def _tojson(value: object, indent: int | None = None) -> str:
    # transformers' tojson: plain json.dumps, no HTML escaping, non-ASCII kept
    return json.dumps(value, ensure_ascii=False, indent=indent)


class ChatFormat:
    """Renders a conversation with a model's chat template and tokenizes it.

    Args:
        model: the target model (its template, BOS/EOS tokens and tokenizer are used).

    Attributes:
        uses_fallback: True when the GGUF has no template and the plain transcript is used.
        stop: stop strings implied by the format (only the fallback has any).
    """

    def __init__(self, model: LlamaModel) -> None:
        self.model = model
        #: why the GGUF's own template is not used (it did not compile, or failed on a
        #: sample conversation), else None
        self.template_error: str | None = None
        self._spellings_cache: dict[bytes, tuple[str, ...]] = {}
        # The environment transformers renders chat templates in (trim/lstrip blocks,
        # loop controls, a tojson that keeps non-ASCII), but sandboxed, immutable and
        # with size budgets on everything that builds strings (app.engine.template_sandbox).
        env = TemplateSandbox(
            trim_blocks=True, lstrip_blocks=True, extensions=["jinja2.ext.loopcontrols"]
        )
        self._env = env
        env.globals["raise_exception"] = _raise_exception
        env.globals["strftime_now"] = _strftime_now
        env.add_filter("tojson", _tojson)
        self._bos_text = model.token_text(model.bos).decode("utf-8", "replace") if model.bos >= 0 else ""
        self._eos_text = model.token_text(model.eos).decode("utf-8", "replace") if model.eos >= 0 else ""
        self._template = env.from_string(FALLBACK_TEMPLATE)
        self.uses_fallback = True
        source = model.chat_template
        if source:
            problem = self._adopt(source)
            if problem is not None:
                self.template_error = (
                    f"The model's chat template cannot be used ({problem}); a plain "
                    "User:/Assistant: transcript is used instead."
                )
        self.stop: tuple[str, ...] = FALLBACK_STOP if self.uses_fallback else ()

    def _adopt(self, source: str) -> str | None:
        """Compile ``source`` and render a sample conversation with it, both under the
        sandbox's limits; use it when both work. Returns why not, else None.

        The sample render finds templates that fail or blow up whatever the conversation
        (most hostile ones) when the model loads, not at the first message. A template
        that refuses the sample through ``raise_exception`` is still used: it checks the
        conversation, and its message is shown when a real one fails the check.
        """
        if len(source) > MAX_TEMPLATE_CHARS:
            return f"it is {len(source)} characters long"
        try:
            with guarded(self._env, "compiling the chat template"):
                template = self._env.from_string(source)
        except TemplateError as exc:
            return f"it is not valid Jinja: {exc}"
        previous = self._template
        self._template = template
        sample = [ChatMessage("system", "You are helpful."), ChatMessage("user", "Hi"),
                  ChatMessage("assistant", "Hello."), ChatMessage("user", "Thanks")]
        try:
            self.render(sample)
        except ChatTemplateError as exc:
            if not isinstance(exc.__cause__, TemplateRaised):
                self._template = previous
                return str(exc.__cause__ or exc)
        self.uses_fallback = False
        return None

    def render(self, messages: Sequence[ChatMessage], add_generation_prompt: bool = True) -> str:
        """The prompt text for ``messages``.

        Some templates reject a system message (older Gemma templates raise "System role
        not supported"); then the system text is folded into the first user message.

        Raises:
            ChatTemplateError: the template failed (its own message, or which limit it
                hit); the template's error is the exception's ``__cause__``.
        """
        msgs = [{"role": m.role, "content": m.content} for m in messages]
        try:
            return self._render(msgs, add_generation_prompt)
        except TemplateRaised as exc:
            if msgs and msgs[0]["role"] == "system" and len(msgs) > 1:
                system = msgs[0]["content"]
                rest = [dict(m) for m in msgs[1:]]
                for m in rest:
                    if m["role"] == "user":
                        m["content"] = f"{system}\n\n{m['content']}"
                        break
                try:
                    return self._render(rest, add_generation_prompt)
                except TemplateError:
                    pass
            raise ChatTemplateError(f"The model's chat template failed: {exc}") from exc
        except TemplateError as exc:
            raise ChatTemplateError(f"The model's chat template failed: {exc}") from exc

    def _render(self, msgs: list[dict[str, Any]], add_generation_prompt: bool) -> str:
        with guarded(self._env, "rendering the chat template"):
            out = self._template.render(
                messages=msgs,
                add_generation_prompt=add_generation_prompt,
                bos_token=self._bos_text,
                eos_token=self._eos_text,
            )
        if len(out) > MAX_STRING_CHARS:
            raise TemplateLimitError("the rendered prompt is absurdly long")
        return out

    def tokenize(self, messages: Sequence[ChatMessage], continuation: str = "") -> list[int]:
        """Prompt tokens for ``messages``, ending where the assistant's reply begins, or
        with ``continuation``: the start of that reply, which the model then continues
        (the text follows the template's generation prompt as the model wrote it there,
        whatever the template would make of it as a finished message).

        The template's own markup is parsed for control tokens (``<|im_start|>``); the
        text of a message (and the continuation) is not: a control token's spelling
        typed or pasted into a message reaches the model as the characters it is, so a
        message cannot end its turn or open another role's (:meth:`_runs`; a template
        that reads the spelling it prints is parsed whole, with a warning in the log).
        Messages without such text are tokenized in one piece with the markup, as
        llama.cpp tokenizes a chat.
        """
        text = self.render(messages) + continuation
        spellings = self._control_spellings(
            [*messages, ChatMessage("assistant", continuation)] if continuation else messages)
        runs = self._runs(messages, spellings, text, continuation) if spellings else None
        if runs is None:
            tokens = self.model.tokenize(text, add_special=False, parse_special=True)
        else:
            tokens = []
            for run in runs:
                tokens += [run] if isinstance(run, int) else self.model.tokenize(
                    run, add_special=False, parse_special=False)
        return with_single_bos(self.model, tokens)

    def _control_spellings(self, messages: Sequence[ChatMessage]) -> set[str]:
        """The control-token spellings in the messages' texts: tokens that
        ``parse_special`` finds and plain tokenizing does not, and that print as nothing
        (llama.cpp's rendering of control tokens). Cached by a digest of each text: a
        conversation is tokenized again at every turn."""
        found: set[str] = set()
        for m in messages:
            key = hashlib.blake2b(m.content.encode("utf-8", "surrogatepass"),
                                  digest_size=16).digest()
            spellings = self._spellings_cache.get(key)
            if spellings is None:
                parsed = self.model.tokenize(m.content, add_special=False, parse_special=True)
                plain = set(self.model.tokenize(m.content, add_special=False, parse_special=False))
                ids = dict.fromkeys(t for t in parsed
                                    if t not in plain and not self.model.token_to_piece(t))
                spellings = tuple(self.model.token_text(t).decode("utf-8", "replace") for t in ids)
                if len(self._spellings_cache) >= 1024:
                    self._spellings_cache.clear()
                self._spellings_cache[key] = spellings
            found.update(spellings)
        return found

    def _runs(self, messages: Sequence[ChatMessage], spellings: set[str],
              text: str, continuation: str = "") -> list[int | str] | None:
        """``text`` (the rendered ``messages``) cut as llama.cpp cuts a text it parses
        for control tokens — each control token (its id) and the raw text between two
        (a string, tokenized in one call: a vocabulary's leading space and the merges
        come out as llama.cpp's own tokenizing makes them) — except that ``spellings``
        inside the messages stay raw text. None when the messages cannot be told from
        the markup (:meth:`_literal_pieces`)."""
        pieces = self._literal_pieces(messages, spellings, text, continuation)
        if pieces is None:
            log.warning("the chat template reads the control-token text in a message: "
                        "that text is parsed as control tokens")
            return None
        controls: dict[str, int] = {}  # the markup's control tokens, by spelling
        for piece, literal in pieces:
            for t in [] if literal else self.model.tokenize(piece, add_special=False,
                                                             parse_special=True):
                if not self.model.token_to_piece(t):
                    controls[self.model.token_text(t).decode("utf-8", "replace")] = t
        controls.pop("", None)
        spelled = _longest_first(controls)
        runs: list[int | str] = []
        raw, strip_next = "", False
        for piece, literal in pieces:
            at = 0
            for match in [] if literal or not controls else spelled.finditer(piece):
                token = controls[match.group()]
                raw, strip_next = _stripped(raw + piece[at:match.start()], strip_next,
                                            *self.model.strips_around(token))
                runs += [raw, token] if raw else [token]
                raw, at = "", match.end()
            raw += piece[at:]
        raw = _stripped(raw, strip_next, False, False)[0]
        return runs + [raw] if raw else runs

    def _literal_pieces(self, messages: Sequence[ChatMessage], spellings: set[str],
                        text: str, continuation: str = "") -> list[tuple[str, bool]] | None:
        """``text`` (the rendered ``messages`` and the ``continuation``) as (piece,
        literal) runs: each spelling inside a message or the continuation is literal,
        the rest is markup and ordinary text. Found by
        rendering the messages again with each spelling swapped for a unique mark;
        None when that render, marks put back, is not ``text`` (a template that reads
        the text it prints): then the whole text is parsed as before."""
        if not spellings:
            return [(text, False)]
        nonce = secrets.token_hex(6)
        hidden: list[str] = []

        def hide(match: re.Match[str]) -> str:
            hidden.append(match.group())
            return f"\ue000{nonce}.{len(hidden) - 1}\ue001"

        spelled = _longest_first(spellings)
        try:
            marked = self.render([ChatMessage(m.role, spelled.sub(hide, m.content))
                                  for m in messages]) + spelled.sub(hide, continuation)
        except ChatTemplateError:
            return None
        pieces: list[tuple[str, bool]] = []
        at = 0
        for mark in re.finditer(f"\ue000{nonce}\\.(\\d+)\ue001", marked):
            pieces += [(marked[at:mark.start()], False), (hidden[int(mark.group(1))], True)]
            at = mark.end()
        pieces.append((marked[at:], False))
        return pieces if "".join(p for p, _ in pieces) == text else None


def _longest_first(spellings: Iterable[str]) -> re.Pattern[str]:
    """A pattern matching any of ``spellings`` as they are, the longest first where one
    begins another (as llama.cpp matches its special tokens)."""
    return re.compile("|".join(map(re.escape, sorted(spellings, key=len, reverse=True))))


#: what C's isspace calls whitespace (llama.cpp strips it around LSTRIP/RSTRIP tokens)
_C_SPACE = " \t\n\v\f\r"


def _stripped(raw: str, lstrip: bool, before: bool, after: bool) -> tuple[str, bool]:
    """``raw`` between two control tokens as llama.cpp's partition leaves it: its leading
    whitespace gone after a token that strips what follows it (``lstrip``), its trailing
    whitespace before one that strips what precedes it (``before``); returns it and
    whether the next raw text loses its leading whitespace (``after``)."""
    if lstrip:
        raw = raw.lstrip(_C_SPACE)
    if before:
        raw = raw.rstrip(_C_SPACE)
    return raw, after


def with_single_bos(model: LlamaModel, tokens: Sequence[int]) -> list[int]:
    """``tokens`` starting with exactly one BOS when the vocabulary adds BOS; unchanged
    when it does not.

    llama.cpp's rule (``llama_vocab::impl::tokenize`` warns about, and llama-server
    removes, a duplicate BOS only when ``add_bos`` is set): a vocabulary that does not add
    BOS may use the BOS id as ordinary text — SmolLM2's BOS is ``<|im_start|>``, which
    opens every ChatML turn, so stripping it would cut the first turn's header.
    """
    out = list(tokens)
    if model.bos >= 0 and model.add_bos:
        i = 0
        while i < len(out) and out[i] == model.bos:
            i += 1
        out = [model.bos, *out[i:]]
    return out


def tokenize_plain(model: LlamaModel, text: str) -> list[int]:
    """A raw completion prompt: the text as is (no special-token parsing), one BOS."""
    return with_single_bos(model, model.tokenize(text, add_special=True, parse_special=False))
