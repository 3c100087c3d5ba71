"""A Jinja sandbox that compiles and renders untrusted chat templates within limits.

A GGUF's ``tokenizer.chat_template`` is code from whoever made the file. Jinja's
:class:`~jinja2.sandbox.ImmutableSandboxedEnvironment` stops it from reaching Python
internals or mutating its arguments, but not from asking for unbounded work: a filter
(``'x'|center(5000000000)``), ``%``-formatting (``'%0999999999d' % 1``), ``str.format``
widths, ``replace``/``join`` growth, repetition, huge powers, endless loops. Worse,
Jinja evaluates constant expressions while *compiling* (``from_string``), so a constant
``{{ 'x'|center(5000000000) }}`` would run before any render limit applied.

:class:`TemplateSandbox` closes each path with one mechanism, a size budget checked
*before* a string or list is built:

* every filter is wrapped in a ``pass_context`` function that first estimates the size
  of what the filter will build from its arguments (widths, counts, the number of
  replacements, the joined lengths) and refuses anything above
  :data:`MAX_STRING_CHARS`; a context-taking filter cannot be folded at compile time
  (Jinja raises ``Impossible``), so nothing runs while compiling;
* the operators that can build big values (``*``, ``**``, ``%``, ``+``) are intercepted,
  which also keeps Jinja from folding them; ``%`` with a string on the left is
  estimated conversion by conversion;
* calls of ``str`` methods that pad, repeat or substitute (``center``, ``ljust``,
  ``zfill``, ``expandtabs``, ``replace``, ``join``, ``translate``) and
  ``str.format``/``format_map`` (field by field) are estimated the same way;
* output, macro bodies, ``{% set %}`` blocks and ``~`` are joined through a budgeted
  ``concat`` (Jinja's documented ``Environment.concat`` and ``code_generator_class``
  hooks), so a loop that outputs one big string many times stops before the join;
* everything an operation produced is charged to a per-render budget
  (:data:`MAX_PRODUCED_CHARS`), ``range()`` has an item budget, and
* :func:`guarded` runs compile and render under a deadline and a memory ceiling (the
  process's resident memory may grow at most :data:`MAX_MEMORY_GROWTH_BYTES`), checked
  from a trace function between Python steps, so accumulation through many small steps
  ends too.

Any exception while compiling or rendering comes out of :func:`guarded` as a
:class:`TemplateLimitError` or the template's own ``TemplateError``; never a
MemoryError traceback.
"""

from __future__ import annotations

import os
import re
import sys
import time
from collections.abc import Callable, Iterable, Iterator, Mapping
from contextlib import contextmanager
from functools import update_wrapper
from types import BuiltinMethodType, MethodType
from typing import Any

from jinja2 import TemplateError, nodes, pass_context
from jinja2.compiler import CodeGenerator, Frame
from jinja2.runtime import Context
from jinja2.sandbox import ImmutableSandboxedEnvironment, SandboxedFormatter

#: the largest string or list (characters or items) any single operation may build
MAX_STRING_CHARS = 4_000_000
#: characters/items all operations of one render may produce together
MAX_PRODUCED_CHARS = 32_000_000
#: all ``range()`` items of one render
MAX_RANGE_ITEMS = 100_000
#: the largest integer (bits) ``*`` and ``**`` may build
MAX_INT_BITS = 1_000_000
#: the largest width or precision in a format spec or ``%`` conversion
MAX_FIELD_WIDTH = 100_000
#: the longest template source compiled (real ones are a few kilobytes)
MAX_TEMPLATE_CHARS = 500_000
#: resident memory a compile or render may add before it is stopped
MAX_MEMORY_GROWTH_BYTES = 256 << 20
#: wall-clock seconds one compile or render may take
MAX_SECONDS = 2.0


class TemplateLimitError(TemplateError):
    """A template asked for more work or memory than a chat prompt needs."""


def _limit(what: str) -> TemplateLimitError:
    return TemplateLimitError(f"the template {what}")


def _size(value: Any) -> int:
    return len(value) if isinstance(value, (str, bytes, list, tuple, dict)) else 0


def _str_len(value: Any) -> int:
    """Length of ``str(value)`` without building a huge string for a huge int."""
    if isinstance(value, bool) or value is None:
        return 5
    if isinstance(value, int):
        return abs(value).bit_length() * 30103 // 100000 + 2
    if isinstance(value, float):
        return 330  # '%f' of 1e308 prints 309 digits
    if isinstance(value, (str, bytes)):
        return len(value)
    return len(str(value))


_PERCENT_RE = re.compile(
    r"%(?:\((?P<key>[^)]*)\))?[#0\- +]*(?P<width>\*|\d+)?(?:\.(?P<prec>\*|\d+))?[hlL]?(?P<conv>[a-zA-Z%])"
)


def percent_format_size(fmt: str, args: Any) -> int:
    """An upper bound on ``len(fmt % args)``, computed without formatting.

    Raises:
        TemplateLimitError: a width or precision above :data:`MAX_FIELD_WIDTH`.
    """
    positional = list(args) if isinstance(args, tuple) else [args]
    mapping = args if isinstance(args, Mapping) else None
    total = len(fmt)
    i = 0
    for m in _PERCENT_RE.finditer(fmt):
        if m["conv"] == "%":
            continue
        sizes = []
        for part in ("width", "prec"):
            v = m[part]
            if v == "*":
                n = positional[i] if i < len(positional) else 0
                i += 1
                v = str(n) if isinstance(n, int) else "0"
            if v and int(v) > MAX_FIELD_WIDTH:
                raise _limit(f"formats a field {int(v)} characters wide")
            sizes.append(int(v) if v else 0)
        if m["key"] is not None and mapping is not None:
            value = mapping.get(m["key"], "")
        else:
            value = positional[i] if i < len(positional) else ""
            i += 1
        total += max(sizes[0], sizes[1] + 340, _str_len(value) + 2)
    return total


class _BudgetFormatter(SandboxedFormatter):
    """``str.format`` in the sandbox, with each field's width checked and the fields'
    total charged to the render's budget as they are produced."""

    def __init__(self, env: TemplateSandbox) -> None:
        super().__init__(env)
        self._sandbox = env
        self._total = 0

    def format_field(self, value: Any, format_spec: str) -> Any:
        for digits in re.findall(r"\d+", format_spec):
            if int(digits) > MAX_FIELD_WIDTH:
                raise _limit(f"formats a field {int(digits)} characters wide")
        out = super().format_field(value, format_spec)
        self._total += len(out)
        if self._total > MAX_STRING_CHARS:
            raise _limit("formats an absurdly long string")
        self._sandbox.charge(len(out))
        return out


def _estimate_filter(name: str, value: Any, args: tuple[Any, ...], kwargs: dict[str, Any]) -> int:
    """An upper bound on the size of what filter ``name`` builds, from its arguments
    (0 for filters whose result is within a small factor of their input)."""

    def arg(i: int, key: str, default: Any) -> Any:
        return args[i] if len(args) > i else kwargs.get(key, default)

    def num(v: Any) -> int:
        return int(v) if isinstance(v, (int, float)) and not isinstance(v, bool) else 0

    text = value if isinstance(value, str) else ""
    if name == "center":
        return max(len(text), num(arg(0, "width", 80)))
    if name == "format":
        return percent_format_size(text, kwargs or args)
    if name == "indent":
        width = arg(0, "width", 4)
        prefix = len(width) if isinstance(width, str) else num(width)
        return len(text) + (text.count("\n") + 1) * prefix
    if name == "join":
        sep = arg(0, "d", "")
        items = list(value) if isinstance(value, (list, tuple)) else []
        return sum(_str_len(x) for x in items) + max(0, len(items) - 1) * _str_len(sep)
    if name == "replace":
        old, new = str(arg(0, "old", "")), str(arg(1, "new", ""))
        count = arg(2, "count", None)
        n = text.count(old) if old else len(text) + 1
        if isinstance(count, int) and count >= 0:
            n = min(n, count)
        return len(text) + n * max(0, len(new) - len(old))
    if name == "wordwrap":
        width = max(1, num(arg(0, "width", 79)))
        wrap = arg(2, "wrapstring", None)
        return len(text) + (len(text) // width + 1) * max(1, _str_len(wrap) if wrap else 1)
    if name == "truncate":
        return min(len(text), num(arg(0, "length", 255)) + num(arg(3, "leeway", 0))) + _str_len(arg(2, "end", "..."))
    if name in ("batch", "slice"):
        return _size(value) + num(arg(0, "linecount" if name == "batch" else "slices", 0))
    if name == "tojson":
        indent = num(arg(0, "indent", 0))
        if indent > 16:
            raise _limit(f"indents JSON by {indent}")
        return 0
    if name == "urlize":
        extra = _str_len(arg(2, "target", "") or "") + _str_len(arg(3, "rel", "") or "") + 64
        return 3 * len(text) + (text.count(" ") + text.count("\n") + 1) * extra
    if name == "round":
        if num(arg(0, "precision", 0)) > 1000:
            raise _limit("rounds to an absurd precision")
    return 0


def _estimate_str_method(s: str, name: str, args: tuple[Any, ...], kwargs: dict[str, Any]) -> int:
    """An upper bound on the size of ``s.<name>(*args)`` for the str methods that can
    build far more than ``s`` (0 for the others)."""

    def first_int(default: int = 0) -> int:
        v = args[0] if args else next(iter(kwargs.values()), default)
        return v if isinstance(v, int) and not isinstance(v, bool) else default

    if name in ("center", "ljust", "rjust", "zfill"):
        return max(len(s), first_int())
    if name == "expandtabs":
        return len(s) + s.count("\t") * max(0, first_int(8))
    if name == "replace" and len(args) >= 2:
        old, new = str(args[0]), str(args[1])
        n = s.count(old) if old else len(s) + 1
        if len(args) > 2 and isinstance(args[2], int) and args[2] >= 0:
            n = min(n, args[2])
        return len(s) + n * max(0, len(new) - len(old))
    if name == "join" and args:
        items = list(args[0]) if isinstance(args[0], (list, tuple, str)) else []
        return sum(_str_len(x) for x in items) + max(0, len(items) - 1) * len(s)
    if name == "translate" and args and isinstance(args[0], Mapping):
        longest = max((_str_len(v) for v in args[0].values()), default=1)
        return len(s) * max(1, longest)
    if name in ("encode",):
        return 4 * len(s)
    return 0


def _pass_arg(func: Callable[..., Any]) -> str | None:
    """What a Jinja filter wants as its first argument (``context``, ``eval_context``,
    ``environment``) or None. Jinja records it in the private ``jinja_pass_arg``
    attribute (``jinja2.utils._PassArg``); this is the one place that reads it, and
    tests/engine/test_templates.py checks it against Jinja's own decorators."""
    tag = getattr(func, "jinja_pass_arg", None)
    return getattr(tag, "name", None)


class _BudgetCodeGenerator(CodeGenerator):
    """Jinja's code generator with ``~`` joined through the environment's budgeted
    :meth:`TemplateSandbox.concat` (Jinja joins it with a plain ``str.join``)."""

    def visit_Concat(self, node: nodes.Concat, frame: Frame) -> None:
        if frame.eval_ctx.volatile or frame.eval_ctx.autoescape:
            super().visit_Concat(node, frame)
            return
        self.write("environment.concat(map(str, (")
        for arg in node.nodes:
            self.visit(arg, frame)
            self.write(", ")
        self.write(")))")


class TemplateSandbox(ImmutableSandboxedEnvironment):
    """Jinja's immutable sandbox with size budgets on everything that builds values.

    Budgets are reset by :func:`guarded` for each compile or render. Not thread-safe:
    one environment renders one template at a time (each :class:`ChatFormat` has its
    own).
    """

    intercepted_binops = frozenset({"*", "**", "%", "+"})
    code_generator_class = _BudgetCodeGenerator

    def __init__(self, **kw: Any) -> None:
        kw.setdefault("optimized", False)  # no constant folding pass at all
        super().__init__(**kw)
        # Template output, macro and {% set %} block bodies and ``~`` are joined here
        # (generated code calls ``environment.concat``): a loop that outputs the same
        # big string many times holds only references until the join would build it.
        self.concat = self._budgeted_concat  # type: ignore[method-assign]
        self.range_budget = MAX_RANGE_ITEMS
        self.produced = 0
        self.globals["range"] = self._range
        self.globals.pop("lipsum", None)  # generates text of any size; no template needs it
        for name, func in list(self.filters.items()):
            self.filters[name] = self._budgeted_filter(name, func)

    def _budgeted_concat(self, parts: Iterable[Any]) -> str:
        out: list[str] = []
        total = 0
        for p in parts:
            total += len(p)
            if total > MAX_STRING_CHARS:
                raise _limit(f"outputs an absurdly long text (over {MAX_STRING_CHARS} characters)")
            out.append(p)
        self.charge(total)
        return "".join(out)

    def reset_budgets(self) -> None:
        self.range_budget = MAX_RANGE_ITEMS
        self.produced = 0

    def charge(self, n: int) -> None:
        """Count ``n`` characters or items produced; raise past the render's budget."""
        self.produced += n
        if self.produced > MAX_PRODUCED_CHARS:
            raise _limit("produces more text than any chat prompt needs")

    def _check_size(self, n: int, what: str) -> None:
        if n > MAX_STRING_CHARS:
            raise _limit(f"builds an absurdly long {what} ({n} characters or items)")

    def add_filter(self, name: str, func: Callable[..., Any]) -> None:
        """Register a filter of our own (``tojson``…) with the same budget as Jinja's."""
        self.filters[name] = self._budgeted_filter(name, func)

    def _budgeted_filter(self, name: str, func: Callable[..., Any]) -> Callable[..., Any]:
        wants = _pass_arg(func)

        def budgeted(context: Context, value: Any, *args: Any, **kwargs: Any) -> Any:
            self._check_size(_estimate_filter(name, value, args, kwargs), f"string with |{name}")
            if wants == "context":
                out = func(context, value, *args, **kwargs)
            elif wants == "eval_context":
                out = func(context.eval_ctx, value, *args, **kwargs)
            elif wants == "environment":
                out = func(self, value, *args, **kwargs)
            else:
                out = func(value, *args, **kwargs)
            n = _size(out)
            self._check_size(n, f"value with |{name}")
            self.charge(n)
            return out

        # pass_context last: update_wrapper copies the filter's own jinja_pass_arg, and a
        # filter that does not take a context could be folded while compiling
        return pass_context(update_wrapper(budgeted, func))

    def _range(self, *args: int) -> range:
        r = range(*args)
        self.range_budget -= len(r)
        if self.range_budget < 0:
            raise _limit("loops too much (range budget exhausted)")
        return r

    def call_binop(self, context: Context, operator: str, left: Any, right: Any) -> Any:
        if operator == "**":
            if isinstance(left, int) and isinstance(right, int) and right > 0:
                if max(1, abs(left).bit_length()) * right > MAX_INT_BITS and abs(left) > 1:
                    raise _limit("computes an absurd power")
            elif isinstance(right, (int, float)) and abs(right) > 10_000:
                raise _limit("computes an absurd power")
        elif operator == "*":
            for seq, n in ((left, right), (right, left)):
                if isinstance(seq, (str, list, tuple)) and isinstance(n, int):
                    self._check_size(len(seq) * max(0, n), "string")
            if isinstance(left, int) and isinstance(right, int):
                if left.bit_length() + right.bit_length() > MAX_INT_BITS:
                    raise _limit("computes an absurdly large number")
        elif operator == "%" and isinstance(left, str):
            self._check_size(percent_format_size(left, right), "string with %")
        elif operator == "+":
            if isinstance(left, (str, list, tuple)) and isinstance(right, (str, list, tuple)):
                self._check_size(len(left) + len(right), "string")
        out = super().call_binop(context, operator, left, right)
        self.charge(_size(out))
        return out

    def call(__self, __context: Context, __obj: Any, *args: Any, **kwargs: Any) -> Any:
        owner = getattr(__obj, "__self__", None)
        if isinstance(owner, str) and isinstance(__obj, (BuiltinMethodType, MethodType)):
            name = getattr(__obj, "__name__", "")
            __self._check_size(_estimate_str_method(owner, name, args, kwargs), f"string with .{name}()")
        out = super().call(__context, __obj, *args, **kwargs)
        n = _size(out)
        __self._check_size(n, "value")
        __self.charge(n)
        return out

    def wrap_str_format(self, value: Any) -> Callable[..., str] | None:
        """``str.format``/``format_map`` through :class:`_BudgetFormatter` (Jinja's own
        version of this method, with a budget on every field)."""
        if not isinstance(value, (MethodType, BuiltinMethodType)) or value.__name__ not in ("format", "format_map"):
            return None
        f_self = value.__self__
        if not isinstance(f_self, str) or type(f_self) is not str:
            return super().wrap_str_format(value)  # Markup: Jinja's escaping formatter
        is_format_map = value.__name__ == "format_map"

        def wrapper(*args: Any, **kwargs: Any) -> str:
            if is_format_map:
                if kwargs or len(args) != 1:
                    raise TypeError("format_map() takes exactly one argument")
                kwargs, args = args[0], ()
            return str(_BudgetFormatter(self).vformat(f_self, args, kwargs))

        return update_wrapper(wrapper, value)


def _rss_reader() -> Callable[[], int] | None:
    """A cheap reader of this process's resident memory in bytes, or None where the OS
    offers none (then only the budgets and the deadline apply)."""
    if sys.platform.startswith("linux"):
        try:
            fd = os.open("/proc/self/statm", os.O_RDONLY)
        except OSError:
            return None
        page = os.sysconf("SC_PAGE_SIZE")

        def linux_rss() -> int:
            return int(os.pread(fd, 64, 0).split()[1]) * page

        linux_rss.fd = fd  # type: ignore[attr-defined]
        return linux_rss
    try:
        import resource
    except ImportError:
        return None
    scale = 1 if sys.platform == "darwin" else 1024  # ru_maxrss: bytes on macOS, KiB elsewhere

    def peak_rss() -> int:
        return int(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss) * scale

    return peak_rss


@contextmanager
def guarded(env: TemplateSandbox, what: str, seconds: float = MAX_SECONDS) -> Iterator[None]:
    """Run a compile or render of ``env`` under the deadline and the memory ceiling.

    Every exception inside becomes a :class:`TemplateError` (the template's own, or a
    :class:`TemplateLimitError` naming what went wrong), so a hostile template can only
    ever be a template error.

    A trace function (``sys.settrace``, this thread only) checks the clock at every
    Python step and the resident memory every 8 steps. When a debugger or coverage tool
    already traces, it is left alone and only the size budgets apply.
    """
    env.reset_budgets()
    deadline = time.monotonic() + seconds
    rss = _rss_reader()
    ceiling = rss() + MAX_MEMORY_GROWTH_BYTES if rss is not None else None
    steps = 0

    def tracer(frame: Any, event: str, arg: Any) -> Any:
        nonlocal steps
        if time.monotonic() > deadline:
            raise TemplateLimitError(f"{what} took too long (an endless loop?)")
        steps += 1
        if ceiling is not None and rss is not None and steps % 8 == 0 and rss() > ceiling:
            raise TemplateLimitError(f"{what} used too much memory")
        return tracer

    previous = sys.gettrace()
    if previous is None:  # never override a debugger's or coverage's tracer
        sys.settrace(tracer)
    try:
        yield
    except TemplateError:
        raise
    except MemoryError:
        raise TemplateLimitError(f"{what} ran out of memory") from None
    except RecursionError:
        raise TemplateLimitError(f"{what} recursed too deeply") from None
    except Exception as exc:  # anything else a template can raise is its own fault
        raise TemplateError(f"{type(exc).__name__}: {exc}") from exc
    finally:
        if previous is None:
            sys.settrace(None)
        fd = getattr(rss, "fd", None)
        if fd is not None:
            os.close(fd)
