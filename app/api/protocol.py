"""The OpenAI wire format: request bodies in, response bodies out, errors as OpenAI's JSON.

Pure functions and frozen values, no HTTP and no event loop, so every rule here is tested
without a server. :func:`parse_chat_request` and :func:`parse_completion_request` turn a
request body (bytes) into a :class:`GenerationRequest` holding the very
:class:`~app.options.SamplingParams` and :class:`~app.options.SpeculationConfig` the
engine takes; anything wrong raises :class:`ApiError` with the status, ``type``,
``param`` and ``code`` OpenAI's clients expect. :func:`timings` writes a reply's
:class:`~app.engine.stats.SpecStats` in llama-server's names; :func:`tandem_figures`
adds Tandem's own.

Parameters read (OpenAI's names): ``model``, ``messages`` / ``prompt``, ``max_tokens``
and ``max_completion_tokens``, ``temperature``, ``top_p``, ``seed``, ``stop``,
``stream``, ``stream_options.include_usage``; llama-server's extras ``top_k``,
``min_p``, ``repeat_penalty``, ``return_progress`` (:func:`prompt_progress`); and Tandem's ``speculation`` object (any field of
:class:`~app.options.SpeculationConfig`, over the server's default), the documented
extra body field that chooses speculation per request. Parameters Tandem cannot honour
(``n`` > 1, ``tools``, ``logprobs`` …) are refused by name, never silently ignored;
unknown names are ignored, as OpenAI-compatible servers do.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Any

import pydantic_core
from pydantic import BaseModel, ConfigDict, ValidationError

from app.engine.chat import ChatMessage
from app.engine.context_fit import ContextFit
from app.engine.reply import ReplyRecord
from app.engine.stats import SpecStats
from app.options import SamplingParams, SpeculationConfig

#: the extra body field that chooses speculation for one request
SPECULATION_FIELD = "speculation"
#: the deepest nesting of arrays and objects a request body may have: the limit of
#: pydantic-core's JSON parser (jiter), far below Python's recursion limit (1,000)
MAX_JSON_DEPTH = 200


class ApiError(Exception):
    """A request that gets OpenAI's error JSON: ``{"error": {"message", "type", "param",
    "code"}}`` with HTTP ``status``. ``headers``: extra response headers (Retry-After)."""

    def __init__(self, status: int, message: str, *, type: str = "invalid_request_error",
                 param: str | None = None, code: str | None = None,
                 headers: dict[str, str] | None = None) -> None:
        super().__init__(message)
        self.status = status
        self.message = message
        self.type = type
        self.param = param
        self.code = code
        self.headers = headers or {}

    def body(self) -> dict[str, Any]:
        return {"error": {"message": self.message, "type": self.type, "param": self.param,
                          "code": self.code}}


@dataclass(frozen=True, slots=True)
class GenerationRequest:
    """One parsed request. Exactly one of ``messages`` (chat) and ``prompt`` (completion)
    is set. ``model``: the id the client named; ``include_usage``: send a usage chunk
    before ``[DONE]`` (streams only); ``return_progress``: send prompt-processing
    progress as chunks with a ``prompt_progress`` object (llama-server's extension;
    streams only); ``continuation``: the start of the reply to go on from (the last,
    assistant message of a request with ``continue_final_message``, vLLM's field; it is
    not in ``messages``)."""

    model: str
    sampling: SamplingParams
    speculation: SpeculationConfig
    stream: bool
    include_usage: bool
    messages: tuple[ChatMessage, ...] = ()
    prompt: str | None = None
    return_progress: bool = False
    continuation: str = ""


class _Common(BaseModel):
    # strict: "0.5" is not a number, as for OpenAI; ints are still accepted for floats
    model_config = ConfigDict(strict=True, extra="allow")

    model: str
    stream: bool = False
    stream_options: dict[str, Any] | None = None
    max_tokens: int | None = None
    max_completion_tokens: int | None = None
    temperature: float | None = None
    top_p: float | None = None
    top_k: int | None = None
    min_p: float | None = None
    repeat_penalty: float | None = None
    repeat_last_n: int | None = None
    dry_multiplier: float | None = None
    dry_base: float | None = None
    dry_allowed_length: int | None = None
    return_progress: bool = False
    seed: int | None = None
    stop: str | list[str] | None = None
    n: int | None = None
    presence_penalty: float | None = None
    frequency_penalty: float | None = None
    logit_bias: dict[str, Any] | None = None
    logprobs: bool | int | None = None
    top_logprobs: int | None = None
    best_of: int | None = None
    speculation: dict[str, Any] | None = None
    #: Tandem's own: what a chat request longer than the context window does
    #: (:class:`app.options.ContextOverflow`; default: the server's)
    context_overflow: str | None = None


class _ChatMessageBody(BaseModel):
    model_config = ConfigDict(strict=True, extra="allow")

    role: str
    content: str | list[dict[str, Any]] | None = None


class _ChatBody(_Common):
    messages: list[_ChatMessageBody]
    tools: list[Any] | None = None
    tool_choice: Any = None
    functions: list[Any] | None = None
    function_call: Any = None
    response_format: dict[str, Any] | None = None
    continue_final_message: bool = False
    add_generation_prompt: bool | None = None


class _CompletionBody(_Common):
    prompt: str | list[Any]
    echo: bool | None = None
    suffix: str | None = None


# -- parsing --------------------------------------------------------------------------
def _loc(loc: tuple[Any, ...]) -> str:
    out = ""
    for part in loc:
        if isinstance(part, int):
            out += f"[{part}]"
        elif part in ("str", "list[dict[str,any]]", "list[str]", "list[any]", "int", "bool",
                      "function-after", "lax-or-strict", "json-or-python"):
            continue  # pydantic's names for the members of a union, not the client's
        else:
            out += ("." if out else "") + str(part)
    return out


def _validation_error(exc: ValidationError, prefix: str = "") -> ApiError:
    err = exc.errors()[0]
    param = _loc(tuple(err.get("loc", ())))
    if prefix:
        param = f"{prefix}.{param}" if param else prefix
    kind = err.get("type", "")
    if kind == "missing":
        return ApiError(400, f"Missing required parameter: '{param}'.", param=param,
                        code="missing_required_parameter")
    if kind == "json_invalid":
        return ApiError(400, "The request body is not valid JSON: "
                        f"{err.get('msg', '')}.", code="invalid_json")
    if kind.endswith("_type") or kind in ("model_type", "model_attributes_type", "dict_type"):
        return ApiError(400, f"Invalid type for '{param}': {err.get('msg', '')}.", param=param,
                        code="invalid_type")
    return ApiError(400, f"Invalid value for '{param}': {err.get('msg', '')}.", param=param,
                    code="invalid_value")


def _load(body: bytes, model: type[_Common]) -> _Common:
    # pydantic-core's parser (jiter), not json.loads: it refuses nesting deeper than
    # MAX_JSON_DEPTH with a ValueError, while json.loads recurses until Python's
    # recursion limit (a RecursionError, and a 500, for a body of 100,000 "["). NaN and
    # Infinity are not JSON (RFC 8259), so they are refused as such, not as a range error.
    try:
        data = pydantic_core.from_json(body, allow_inf_nan=False)
    except ValueError as exc:
        raise ApiError(400, f"The request body is not valid JSON (or is nested more than "
                       f"{MAX_JSON_DEPTH} levels deep): {exc}.", code="invalid_json") from None
    if not isinstance(data, dict):
        raise ApiError(400, "The request body must be a JSON object.", code="invalid_type")
    try:
        return model.model_validate(data)
    except ValidationError as exc:
        raise _validation_error(exc) from None


def _unsupported(param: str, why: str) -> ApiError:
    return ApiError(400, f"Unsupported parameter: '{param}' {why}", param=param,
                    code="unsupported_parameter")


def _refuse_unsupported(body: _Common) -> None:
    if body.n is not None and body.n != 1:
        raise _unsupported("n", "must be 1: Tandem generates one choice per request.")
    if body.best_of is not None and body.best_of != 1:
        raise _unsupported("best_of", "must be 1: Tandem generates one choice per request.")
    if body.logprobs not in (None, False, 0) or body.top_logprobs not in (None, 0):
        name = "logprobs" if body.logprobs not in (None, False, 0) else "top_logprobs"
        raise _unsupported(name, "is not supported: Tandem does not return log probabilities.")
    for name in ("presence_penalty", "frequency_penalty"):
        if getattr(body, name) not in (None, 0, 0.0):
            raise _unsupported(name, "is not supported; use 'repeat_penalty' (llama.cpp's).")
    if body.logit_bias:
        raise _unsupported("logit_bias", "is not supported.")
    if isinstance(body, _ChatBody):
        if body.tools or body.functions:
            name = "tools" if body.tools else "functions"
            raise _unsupported(name, "is not supported: Tandem does not call tools.")
        if body.tool_choice not in (None, "none") or body.function_call not in (None, "none"):
            name = "tool_choice" if body.tool_choice not in (None, "none") else "function_call"
            raise _unsupported(name, "is not supported: Tandem does not call tools.")
        fmt = (body.response_format or {}).get("type", "text")
        if fmt != "text":
            raise _unsupported("response_format", f"type {fmt!r} is not supported "
                               "(only 'text').")
    if isinstance(body, _CompletionBody):
        if body.echo:
            raise _unsupported("echo", "is not supported.")
        if body.suffix:
            raise _unsupported("suffix", "is not supported (no fill-in-the-middle).")


#: the request fields that set the :class:`SamplingParams` field of the same name (as
#: llama-server reads them); max_tokens and stop are read on their own
_SAMPLING_NAMES = tuple(n for n in SamplingParams.model_fields
                        if n in _Common.model_fields and n not in ("max_tokens", "stop"))


def _sampling(body: _Common, default: SamplingParams, max_tokens_default: int) -> SamplingParams:
    changes: dict[str, Any] = {}
    for name in _SAMPLING_NAMES:
        value = getattr(body, name)
        if value is not None:
            changes[name] = value
    max_tokens = body.max_completion_tokens if body.max_completion_tokens is not None \
        else body.max_tokens
    changes["max_tokens"] = max_tokens if max_tokens is not None else max_tokens_default
    if body.stop is not None:
        stops = (body.stop,) if isinstance(body.stop, str) else tuple(body.stop)
        if len(stops) > 16 or any(not s for s in stops):
            raise ApiError(400, "Invalid value for 'stop': give up to 16 non-empty strings.",
                           param="stop", code="invalid_value")
        changes["stop"] = stops
    try:
        return default.with_changes(**changes)
    except ValidationError as exc:
        err = exc.errors()[0]
        field = str(err.get("loc", ("?",))[0])
        if field == "max_tokens":
            field = "max_completion_tokens" if body.max_completion_tokens is not None \
                else "max_tokens"
        raise ApiError(400, f"Invalid value for '{field}': {err.get('msg', '')}.",
                       param=field, code="invalid_value") from None


def _speculation(body: _Common, default: SpeculationConfig) -> SpeculationConfig:
    if body.speculation is None:
        return default
    # another drafter without a k: its default k, unless the server's was chosen
    merged = {**default.model_dump(mode="json"), **default.keeping_k(body.speculation)}
    try:
        # JSON mode so that strict validation still reads the mode from its name
        return SpeculationConfig.model_validate_json(json.dumps(merged), strict=True)
    except ValidationError as exc:
        raise _validation_error(exc, SPECULATION_FIELD) from None


def _stream_flags(body: _Common) -> tuple[bool, bool]:
    include = bool((body.stream_options or {}).get("include_usage", False))
    if body.stream_options is not None and not body.stream:
        raise ApiError(400, "'stream_options' is only allowed with 'stream': true.",
                       param="stream_options", code="invalid_value")
    return body.stream, include


_ROLES = {"system": "system", "developer": "system", "user": "user", "assistant": "assistant"}


def _messages(body: _ChatBody) -> tuple[ChatMessage, ...]:
    if not body.messages:
        raise ApiError(400, "'messages' must hold at least one message.", param="messages",
                       code="invalid_value")
    out: list[ChatMessage] = []
    for i, m in enumerate(body.messages):
        role = _ROLES.get(m.role)
        if role is None:
            why = ("is not supported: Tandem does not call tools." if m.role in ("tool", "function")
                   else "must be 'system', 'developer', 'user' or 'assistant'.")
            raise ApiError(400, f"Invalid value for 'messages[{i}].role': {m.role!r} {why}",
                           param=f"messages[{i}].role", code="invalid_value")
        if m.content is None:
            text = ""
        elif isinstance(m.content, str):
            text = m.content
        else:
            parts = []
            for j, part in enumerate(m.content):
                kind = part.get("type")
                if kind != "text" or not isinstance(part.get("text"), str):
                    raise ApiError(400, f"Unsupported content part 'messages[{i}].content[{j}]'"
                                   f" of type {kind!r}: the model reads text only.",
                                   param=f"messages[{i}].content[{j}].type",
                                   code="unsupported_parameter")
                parts.append(part["text"])
            text = "".join(parts)
        out.append(ChatMessage(role, text))  # type: ignore[arg-type]
    return tuple(out)


def _prompt(body: _CompletionBody) -> str:
    p = body.prompt
    if isinstance(p, str):
        return p
    if len(p) == 1 and isinstance(p[0], str):
        return p[0]
    if p and all(isinstance(x, int) for x in p):
        raise _unsupported("prompt", "as token ids is not supported; send the text.")
    raise _unsupported("prompt", "must be one string: Tandem completes one prompt per request.")


def parse_chat_request(body: bytes, sampling: SamplingParams, speculation: SpeculationConfig,
                       *, max_tokens_default: int) -> GenerationRequest:
    """A ``POST /v1/chat/completions`` body as a :class:`GenerationRequest`.

    Args:
        body: the raw request body.
        sampling, speculation: the server's defaults, under the client's values.
        max_tokens_default: reply tokens when the client names no ``max_tokens`` (the
            context length: the reply may fill the context, as with llama-server).

    Raises:
        ApiError: 400 for invalid JSON, a wrong type, a missing field, a value out of
            range or an unsupported parameter (named in ``param``).
    """
    parsed = _load(body, _ChatBody)
    assert isinstance(parsed, _ChatBody)
    messages, continuation = _continued(parsed, _messages(parsed))
    return _request(parsed, sampling, speculation, max_tokens_default,
                    messages=messages, continuation=continuation)


def _continued(body: _ChatBody, messages: tuple[ChatMessage, ...],
               ) -> tuple[tuple[ChatMessage, ...], str]:
    """``continue_final_message`` as vLLM reads it: the last message, the assistant's,
    is the start of the reply, which goes on from it (no generation prompt after it).
    Returns (the messages before it, its text); (``messages``, "") without the flag.

    Raises:
        ApiError: 400 when the last message is not the assistant's, or
            ``add_generation_prompt`` is true with it (vLLM's and llama-server's rules),
            or false without it (a prompt with no generation prompt is not offered).
    """
    if not body.continue_final_message:
        if body.add_generation_prompt is False:
            raise _unsupported("add_generation_prompt", "can be false only with "
                               "'continue_final_message': true.")
        return messages, ""
    if body.add_generation_prompt:
        raise ApiError(400, "Cannot set both 'add_generation_prompt' and "
                       "'continue_final_message' to true.", param="add_generation_prompt",
                       code="invalid_value")
    if messages[-1].role != "assistant" or len(messages) < 2:
        raise ApiError(400, "'continue_final_message' needs the last message to be the "
                       "assistant's, the start of the reply to continue, after the "
                       "messages it replies to.", param="messages", code="invalid_value")
    return messages[:-1], messages[-1].content


def parse_completion_request(body: bytes, sampling: SamplingParams,
                             speculation: SpeculationConfig, *,
                             max_tokens_default: int) -> GenerationRequest:
    """A ``POST /v1/completions`` body as a :class:`GenerationRequest`; as
    :func:`parse_chat_request` (OpenAI's default of 16 tokens is not used: the default is
    ``max_tokens_default``, as llama-server)."""
    parsed = _load(body, _CompletionBody)
    assert isinstance(parsed, _CompletionBody)
    return _request(parsed, sampling, speculation, max_tokens_default,
                    prompt=_prompt(parsed))


def _request(parsed: _Common, sampling: SamplingParams,
             speculation: SpeculationConfig, max_tokens_default: int,
             **payload: Any) -> GenerationRequest:
    """What both endpoints share: refuse unsupported parameters, then the request with
    the client's sampling, speculation and stream flags over the server's defaults;
    ``payload`` is ``messages=`` or ``prompt=``."""
    _refuse_unsupported(parsed)
    stream, include = _stream_flags(parsed)
    return GenerationRequest(
        model=parsed.model,
        sampling=_sampling(parsed, sampling, max_tokens_default),
        speculation=_speculation(parsed, speculation),
        stream=stream, include_usage=include,
        return_progress=parsed.return_progress and stream, **payload)


# -- figures --------------------------------------------------------------------------
def cached_prompt_tokens(stats: SpecStats) -> int:
    """Prompt tokens taken from the KV cache instead of being evaluated (llama-server's
    ``cache_n``). The engine's prefill evaluates all prompt tokens but the last
    (``prefill_tokens`` of them; the rest were cached) and the last opens the first round."""
    return max(0, stats.prompt_tokens - 1 - stats.prefill_tokens)


def timings(stats: SpecStats) -> dict[str, Any]:
    """llama-server's ``timings`` object for one reply.

    ``prompt_n``: prompt tokens evaluated (not cached), ``cache_n``: prompt tokens reused
    from the KV cache, ``prompt_ms``: prefill time; ``predicted_n``: reply tokens,
    ``predicted_ms``: decode time (prefill excluded), ``predicted_per_second`` =
    predicted_n / predicted_ms · 1000; ``draft_n``: draft tokens the target evaluated,
    ``draft_n_accepted``: those it accepted. The same names and meanings as llama.cpp's
    ``tools/server`` (its ``result_timings``).
    """
    cache_n = cached_prompt_tokens(stats)
    prompt_n = max(0, stats.prompt_tokens - cache_n)
    prompt_ms = stats.prefill_time * 1000.0
    predicted_ms = stats.decode_time * 1000.0
    predicted_n = stats.emitted
    return {
        "cache_n": cache_n,
        "prompt_n": prompt_n,
        "prompt_ms": prompt_ms,
        "prompt_per_token_ms": prompt_ms / prompt_n if prompt_n else None,
        "prompt_per_second": prompt_n / stats.prefill_time if stats.prefill_time > 0 else None,
        "predicted_n": predicted_n,
        "predicted_ms": predicted_ms,
        "predicted_per_token_ms": predicted_ms / predicted_n if predicted_n else None,
        "predicted_per_second": stats.decode_tps,
        "draft_n": stats.proposed,
        "draft_n_accepted": stats.accepted,
    }


def tandem_figures(record: ReplyRecord) -> dict[str, Any]:
    """Tandem's own figures for one reply (the ``tandem`` object next to ``timings``):
    the drafter ``mode``, the draft length ``draft_max`` (k) and whether the request
    asked for it to be ``adaptive``, the acceptance rate α, the mean acceptance length τ,
    the mean draft length, the draft cost ratio c, the predicted speedup, rounds,
    verified draft tokens, TTFT in ms, end-to-end tok/s, the engine's finish reason, the
    seed used, a note, and ``context``: what was dropped to fit the context window
    (``policy``, ``n_ctx``, ``dropped_messages``, ``dropped_tokens``, ``prompt_tokens``,
    ``reply_room``, ``kept_first``, ``kept_system``; null when nothing was)."""
    stats = record.stats
    return {
        "mode": stats.mode.value,
        "draft_max": stats.draft_max,
        "adaptive": record.request.speculation.adaptive,
        "acceptance_rate": stats.acceptance_rate,
        "mean_acceptance_length": stats.mean_acceptance_length,
        "mean_draft_length": stats.mean_draft_length,
        "draft_cost_ratio": stats.draft_cost_ratio,
        "predicted_speedup": stats.predicted_speedup,
        "rounds": stats.rounds,
        "draft_verified": stats.verified,
        "ttft_ms": stats.ttft * 1000.0,
        "end_to_end_per_second": stats.end_to_end_tps,
        "finish_reason": record.reason,
        "seed": record.seed,
        "note": record.note or stats.fallback_reason,
        "context": record.context.to_dict() if record.context is not None else None,
    }


def usage(stats: SpecStats) -> dict[str, Any]:
    """OpenAI's ``usage``: prompt, completion and total tokens, cached prompt tokens."""
    return {
        "prompt_tokens": stats.prompt_tokens,
        "completion_tokens": stats.emitted,
        "total_tokens": stats.prompt_tokens + stats.emitted,
        "prompt_tokens_details": {"cached_tokens": cached_prompt_tokens(stats)},
    }


def prompt_progress(done: int, total: int, cached: int, elapsed: float) -> dict[str, int]:
    """Prompt processing in llama-server's ``prompt_progress`` names (its
    ``return_progress`` extension): ``total`` prompt tokens, ``cache`` of them taken
    from the cache, ``processed`` so far (cached included), ``time_ms`` since processing
    began. ``done``/``total``: tokens this prefill evaluates and has evaluated;
    ``cached``: the rest; ``elapsed``: seconds."""
    return {"total": cached + total, "cache": cached, "processed": cached + done,
            "time_ms": int(round(elapsed * 1000))}
