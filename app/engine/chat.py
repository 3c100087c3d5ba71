"""Chat messages → prompt tokens, through the model's own chat template.

The template is the GGUF's ``tokenizer.chat_template`` (a Jinja template written for
Hugging Face transformers). It is untrusted input, so it is rendered only in Jinja's
:class:`~jinja2.sandbox.ImmutableSandboxedEnvironment`. A base model without a template
gets :data:`FALLBACK_TEMPLATE`, a plain "User:/Assistant:" transcript whose turns end at
the stop strings ``"\\nUser:"`` and ``"\\nAssistant:"`` (a base model happily writes
the next turns itself). Whatever the template does with ``bos_token``, the token
sequence starts with exactly one BOS when the vocabulary adds one.
"""

from __future__ import annotations

import datetime as _dt
import json
import sys
import time
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any, Literal

from jinja2 import TemplateError
from jinja2.exceptions import SecurityError
from jinja2.sandbox import ImmutableSandboxedEnvironment

from app.engine.llama import LlamaModel
from app.errors import TandemError

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


@dataclass(frozen=True, slots=True)
class ChatMessage:
    role: Role
    content: str


def _raise_exception(message: str) -> None:
    raise TemplateError(message)


def _strftime_now(fmt: str) -> str:
    return _dt.datetime.now().strftime(fmt)


def _tojson(value: object, indent: int | None = None) -> str:
    # transformers' tojson: plain json.dumps, no HTML escaping, non-ASCII kept
    return json.dumps(value, ensure_ascii=False, indent=indent)


#: Limits that keep an untrusted template from hanging or exhausting memory. Real chat
#: templates loop over the messages and build strings of a few kilobytes.
MAX_RANGE_ITEMS = 100_000  # all range() items one render may produce
MAX_REPEAT_LEN = 1_000_000  # longest str/list a '*' may build
MAX_OUTPUT_CHARS = 4_000_000
MAX_RENDER_SECONDS = 2.0


class _TemplateSandbox(ImmutableSandboxedEnvironment):
    """Jinja's immutable sandbox plus resource limits.

    The sandbox already refuses attribute access to internals and mutation of the
    arguments; this adds a per-render budget for ``range()`` (nested loops over big
    ranges would never end), and caps ``*`` and ``**`` on huge operands.
    """

    intercepted_binops = frozenset({"*", "**"})

    def __init__(self, **kw: Any) -> None:
        super().__init__(**kw)
        self.range_budget = MAX_RANGE_ITEMS
        self.globals["range"] = self._range

    def _range(self, *args: int) -> range:
        r = range(*args)
        self.range_budget -= len(r)
        if self.range_budget < 0:
            raise SecurityError("the template loops too much (range budget exhausted)")
        return r

    def call_binop(self, context: Any, operator: str, left: Any, right: Any) -> Any:
        if operator == "**":
            if isinstance(right, (int, float)) and abs(right) > 1000:
                raise SecurityError("the template computes an absurd power")
            return left**right
        if isinstance(left, (str, list, tuple)) and isinstance(right, int):
            if len(left) * right > MAX_REPEAT_LEN:
                raise SecurityError("the template builds an absurdly long string")
        if isinstance(right, (str, list, tuple)) and isinstance(left, int):
            if len(right) * left > MAX_REPEAT_LEN:
                raise SecurityError("the template builds an absurdly long string")
        return left * right


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
        #: why the GGUF's own template is not used (it did not compile), else None
        self.template_error: str | None = None
        # The environment transformers renders chat templates in (trim/lstrip blocks,
        # loop controls, a tojson that keeps non-ASCII), but sandboxed and immutable.
        env = _TemplateSandbox(
            trim_blocks=True, lstrip_blocks=True, extensions=["jinja2.ext.loopcontrols"]
        )
        self._env = env
        env.globals["raise_exception"] = _raise_exception
        env.globals["strftime_now"] = _strftime_now
        env.filters["tojson"] = _tojson
        template = None
        if model.chat_template:
            try:
                template = env.from_string(model.chat_template)
            except TemplateError as exc:
                self.template_error = (
                    f"The model's chat template is not valid Jinja ({exc}); a plain "
                    "User:/Assistant: transcript is used instead."
                )
        self.uses_fallback = template is None
        self._template = template or env.from_string(FALLBACK_TEMPLATE)
        self.stop: tuple[str, ...] = FALLBACK_STOP if self.uses_fallback else ()
        self._bos_text = model.token_text(model.bos).decode("utf-8", "replace") if model.bos >= 0 else ""
        self._eos_text = model.token_text(model.eos).decode("utf-8", "replace") if model.eos >= 0 else ""

    def render(self, messages: Sequence[ChatMessage], add_generation_prompt: bool = True) -> str:
        """The prompt text for ``messages``.

        Some templates reject a system message (older Gemma templates raise "System role
        not supported"); then the system text is folded into the first user message.

        Raises:
            TandemError: the template failed for another reason (its message is shown).
        """
        msgs = [{"role": m.role, "content": m.content} for m in messages]
        try:
            return self._render(msgs, add_generation_prompt)
        except TemplateError as exc:
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
            raise TandemError(f"The model's chat template failed: {exc}") from exc

    def _render(self, msgs: list[dict[str, Any]], add_generation_prompt: bool) -> str:
        self._env.range_budget = MAX_RANGE_ITEMS
        deadline = time.monotonic() + MAX_RENDER_SECONDS

        def tracer(frame: Any, event: str, arg: Any) -> Any:
            # Any Python-level loop in the compiled template passes here.
            if time.monotonic() > deadline:
                raise TemplateError("rendering took too long (an endless loop?)")
            return tracer

        previous = sys.gettrace()
        if previous is None:  # never override a debugger's or coverage's tracer
            sys.settrace(tracer)
        try:
            out = self._template.render(
                messages=msgs,
                add_generation_prompt=add_generation_prompt,
                bos_token=self._bos_text,
                eos_token=self._eos_text,
            )
        except TemplateError:
            raise
        except (RecursionError, OverflowError, MemoryError, ValueError, TypeError,
                ArithmeticError, LookupError) as exc:
            # Anything else a template can raise is the template's fault, not a crash.
            raise TemplateError(f"{type(exc).__name__}: {exc}") from exc
        finally:
            if previous is None:
                sys.settrace(None)
        if len(out) > MAX_OUTPUT_CHARS:
            raise TemplateError("the rendered prompt is absurdly long")
        return out

    def tokenize(self, messages: Sequence[ChatMessage]) -> list[int]:
        """Prompt tokens for ``messages``, ending where the assistant's reply begins."""
        return with_single_bos(
            self.model,
            self.model.tokenize(self.render(messages), add_special=False, parse_special=True),
        )


def with_single_bos(model: LlamaModel, tokens: Sequence[int]) -> list[int]:
    """``tokens`` with any leading BOS removed and exactly one added when the vocab adds BOS."""
    out = list(tokens)
    if model.bos >= 0:
        i = 0
        while i < len(out) and out[i] == model.bos:
            i += 1
        out = out[i:]
        if model.add_bos:
            out.insert(0, model.bos)
    return out


def tokenize_plain(model: LlamaModel, text: str) -> list[int]:
    """A raw completion prompt: the text as is (no special-token parsing), one BOS."""
    return with_single_bos(model, model.tokenize(text, add_special=True, parse_special=False))
