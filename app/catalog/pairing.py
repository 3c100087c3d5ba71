"""Can this draft model draft for that target? llama.cpp's compatibility rule, explained.

A draft model's tokens are fed to the target by id, so both must share a tokenizer. The
rule is llama.cpp's own (``common_speculative_are_compatible`` in common/speculative.cpp
of the vendored llama.cpp, commit 0c1e57098):

1. same vocabulary type (SPM, BPE, …);
2. same "add BOS" flag, and the same BOS id when it is added;
3. same "add EOS" flag, and the same EOS id when it is added;
4. vocabulary sizes differ by at most 128 (``SPEC_VOCAB_MAX_SIZE_DIFFERENCE``);
5. identical token text for every id from 5 (``SPEC_VOCAB_CHECK_START_TOKEN_ID``) up to
   the smaller vocabulary.

An MTP assistant (Gemma 4's "assistant" drafter: a separate GGUF that drafts from the
target's hidden states and reads the target's own KV cache) pairs by
:func:`check_assistant_pair`: its architecture must be an assistant of the target's
(:data:`ASSISTANT_TARGETS`), its input hidden size (``embedding_length_out``) must be
the target's hidden size, and the tokenizer rules above must hold.

Unlike llama.cpp, which stops at the first failure, :func:`check_pair` evaluates every
rule and reports each with a detail, including the first mismatching token id and both
texts. The check runs on any :class:`VocabView`: GGUF metadata read without loading a
model (:mod:`app.catalog.gguf_meta`), or a loaded model (:mod:`app.engine`).

:func:`rank_drafts` orders candidate drafts for one target the way the draft picker
shows them: compatible drafts first with an estimate of the draft cost ratio c,
incompatible ones after with the rule that failed.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass
from typing import Generic, Protocol, TypeVar

#: llama.cpp: SPEC_VOCAB_MAX_SIZE_DIFFERENCE
VOCAB_MAX_SIZE_DIFFERENCE = 128
#: llama.cpp: SPEC_VOCAB_CHECK_START_TOKEN_ID
VOCAB_CHECK_START_TOKEN_ID = 5
#: A draft this large relative to the target leaves little to gain (c ≈ size ratio).
MAX_USEFUL_SIZE_RATIO = 0.5
#: MTP assistant architectures and the target architectures each drafts for (llama.cpp:
#: ``LLM_ARCH_GEMMA4_ASSISTANT`` requires ``ctx_other``, a ``gemma4`` target's context)
ASSISTANT_TARGETS: dict[str, tuple[str, ...]] = {"gemma4-assistant": ("gemma4",)}


def is_assistant_arch(arch: str) -> bool:
    """Whether ``arch`` (``general.architecture``) is an MTP assistant's: a drafter that
    runs only with its target's context, never as a model of its own."""
    return arch in ASSISTANT_TARGETS


@dataclass(frozen=True, slots=True)
class ModelShape:
    """What the assistant rules need to know of a model besides its tokenizer.

    Attributes:
        arch: ``general.architecture``.
        n_embd: hidden size (``<arch>.embedding_length``), elements.
        n_embd_out: width of the hidden state an assistant takes from its target
            (``<arch>.embedding_length_out``; ``n_embd`` when absent), elements.
    """

    arch: str
    n_embd: int
    n_embd_out: int

    @classmethod
    def from_header(cls, info: HeaderShape) -> ModelShape:
        """The shape a GGUF header gives (:class:`app.catalog.gguf_meta.GGUFInfo`): a
        missing hidden size is 0 (which no assistant rule accepts), a missing
        ``embedding_length_out`` the hidden size."""
        n = info.embedding_length or 0
        return cls(info.architecture, n, info.embedding_length_out or n)


class HeaderShape(Protocol):
    """The fields of a GGUF header :meth:`ModelShape.from_header` reads."""

    @property
    def architecture(self) -> str: ...

    @property
    def embedding_length(self) -> int | None: ...

    @property
    def embedding_length_out(self) -> int | None: ...


class VocabView(Protocol):
    """What the pairing rule needs to know about a model's tokenizer."""

    @property
    def vocab_type(self) -> str:
        """llama.cpp's vocabulary type name: "SPM", "BPE", "WPM", "UGM", "RWKV", …"""

    @property
    def n_vocab(self) -> int: ...

    @property
    def add_bos(self) -> bool: ...

    @property
    def bos_id(self) -> int | None: ...

    @property
    def add_eos(self) -> bool: ...

    @property
    def eos_id(self) -> int | None: ...

    def token_texts(self, start: int, stop: int) -> Sequence[bytes]:
        """Raw vocabulary entries for ids ``start`` … ``stop - 1``."""


@dataclass(frozen=True, slots=True)
class PairCheck:
    """One rule of the pairing check. ``rule`` is a stable identifier."""

    rule: str
    ok: bool
    detail: str


@dataclass(frozen=True, slots=True)
class PairResult:
    """All rules, in llama.cpp's order. ``compatible`` is True when every rule passed.

    ``warnings`` are not failures: for example a draft that is not much smaller than the
    target works but cannot be expected to speed anything up.
    """

    compatible: bool
    checks: tuple[PairCheck, ...]
    warnings: tuple[str, ...] = ()

    @property
    def first_failure(self) -> PairCheck | None:
        return next((c for c in self.checks if not c.ok), None)

    def reason(self) -> str:
        """One line for the user: why the pair is incompatible, or "compatible" (a file
        that cannot be read: the read's own sentence, which names the file)."""
        f = self.first_failure
        if f is None:
            return "compatible"
        return f.detail if f.rule == "readable" else f"{f.rule}: {f.detail}"

    def to_dict(self) -> dict[str, object]:
        return {
            "compatible": self.compatible,
            "checks": [{"rule": c.rule, "ok": c.ok, "detail": c.detail} for c in self.checks],
            "warnings": list(self.warnings),
        }


def _show(text: bytes) -> str:
    return repr(text.decode("utf-8", "replace"))


def check_pair(
    target: VocabView,
    draft: VocabView,
    *,
    target_size: int | None = None,
    draft_size: int | None = None,
) -> PairResult:
    """Check whether ``draft`` can draft for ``target``, rule by rule.

    Args:
        target, draft: the two tokenizers.
        target_size, draft_size: file sizes in bytes, used only for the "no speedup to
            expect" warning (a draft larger than half the target).

    Returns:
        A :class:`PairResult` listing every rule with passed/failed and a detail.
    """
    checks: list[PairCheck] = []

    same_type = target.vocab_type == draft.vocab_type
    checks.append(
        PairCheck(
            "vocab_type",
            same_type,
            f"target {target.vocab_type}, draft {draft.vocab_type}"
            + ("" if same_type else " (tokenizers of different kinds)"),
        )
    )

    for name, t_add, d_add, t_id, d_id in (
        ("bos", target.add_bos, draft.add_bos, target.bos_id, draft.bos_id),
        ("eos", target.add_eos, draft.add_eos, target.eos_id, draft.eos_id),
    ):
        ok = t_add == d_add and (not t_add or t_id == d_id)
        detail = (f"add_{name}: target {t_add}, draft {d_add}; {name.upper()} id: target "
                  f"{t_id}, draft {d_id}")
        if ok and t_id != d_id:  # llama.cpp compares the ids only of a token it adds
            detail += " (not added to prompts, so the ids may differ)"
        checks.append(PairCheck(f"{name}_token", ok, detail))

    diff = abs(target.n_vocab - draft.n_vocab)
    checks.append(
        PairCheck(
            "vocab_size",
            diff <= VOCAB_MAX_SIZE_DIFFERENCE,
            f"target {target.n_vocab}, draft {draft.n_vocab}: difference {diff}"
            f" (at most {VOCAB_MAX_SIZE_DIFFERENCE} allowed)",
        )
    )

    n_common = min(target.n_vocab, draft.n_vocab)
    mismatch = _first_text_mismatch(target, draft, n_common)
    if mismatch is None:
        checks.append(
            PairCheck(
                "token_text",
                True,
                f"ids {VOCAB_CHECK_START_TOKEN_ID}..{max(VOCAB_CHECK_START_TOKEN_ID, n_common) - 1}"
                " have identical text",
            )
        )
    else:
        tid, t_text, d_text = mismatch
        checks.append(
            PairCheck(
                "token_text",
                False,
                f"token {tid} differs: target {_show(t_text)}, draft {_show(d_text)}",
            )
        )

    warnings: list[str] = []
    if target_size and draft_size and draft_size > MAX_USEFUL_SIZE_RATIO * target_size:
        warnings.append(
            f"The draft is {draft_size / target_size:.0%} of the target's size: each draft"
            " step costs nearly as much as a target step, so expect no speedup."
        )
    return PairResult(all(c.ok for c in checks), tuple(checks), tuple(warnings))


def check_assistant_pair(
    target: VocabView,
    target_shape: ModelShape,
    assistant: VocabView,
    assistant_shape: ModelShape,
    *,
    target_size: int | None = None,
    assistant_size: int | None = None,
) -> PairResult:
    """Check whether the MTP assistant ``assistant`` can draft for ``target``.

    Rules: ``assistant_arch`` (its architecture is an assistant of the target's:
    :data:`ASSISTANT_TARGETS`), ``hidden_size`` (its ``n_embd_out`` equals the target's
    hidden size: llama.cpp's ``common_speculative_impl_draft_mtp`` asserts it), then the
    tokenizer rules of :func:`check_pair` (it reads the target's token embeddings by the
    target's ids and outputs its own vocabulary's). Each failed rule's detail is one
    sentence.

    Returns:
        A :class:`PairResult` listing every rule; sizes only feed the size warning.
    """
    wanted = ASSISTANT_TARGETS.get(assistant_shape.arch)
    arch_ok = wanted is not None and target_shape.arch in wanted
    if wanted is None:
        arch_detail = (f"{assistant_shape.arch} is not an MTP assistant architecture "
                       f"(known: {', '.join(sorted(ASSISTANT_TARGETS))}).")
    elif arch_ok:
        arch_detail = f"{assistant_shape.arch} drafts for {target_shape.arch}."
    else:
        arch_detail = (f"A {assistant_shape.arch} model drafts for {' or '.join(wanted)}, "
                       f"not for {target_shape.arch}.")
    hidden_ok = assistant_shape.n_embd_out == target_shape.n_embd
    hidden_detail = (f"The assistant takes hidden states of {assistant_shape.n_embd_out} "
                     f"elements and the target's are {target_shape.n_embd}.")
    if hidden_ok:
        hidden_detail = f"Hidden states of {target_shape.n_embd} elements on both sides."
    vocab = check_pair(target, assistant, target_size=target_size, draft_size=assistant_size)
    checks = (PairCheck("assistant_arch", arch_ok, arch_detail),
              PairCheck("hidden_size", hidden_ok, hidden_detail), *vocab.checks)
    return PairResult(all(c.ok for c in checks), checks, vocab.warnings)


def check_drafter_pair(
    target: VocabView,
    draft: VocabView,
    *,
    target_shape: ModelShape | None = None,
    draft_shape: ModelShape | None = None,
    target_size: int | None = None,
    draft_size: int | None = None,
) -> PairResult:
    """:func:`check_assistant_pair` when ``draft_shape`` is an MTP assistant's (an
    unknown target shape then fails its rules), else :func:`check_pair`."""
    if draft_shape is not None and is_assistant_arch(draft_shape.arch):
        return check_assistant_pair(target, target_shape or ModelShape("unknown", 0, 0),
                                    draft, draft_shape, target_size=target_size,
                                    assistant_size=draft_size)
    return check_pair(target, draft, target_size=target_size, draft_size=draft_size)


def _first_text_mismatch(
    target: VocabView, draft: VocabView, n_common: int, block: int = 8192
) -> tuple[int, bytes, bytes] | None:
    start = VOCAB_CHECK_START_TOKEN_ID
    while start < n_common:
        stop = min(n_common, start + block)
        t_texts = target.token_texts(start, stop)
        d_texts = draft.token_texts(start, stop)
        if t_texts != d_texts:
            for i, (a, b) in enumerate(zip(t_texts, d_texts)):
                if a != b:
                    return start + i, a, b
        start = stop
    return None


def estimate_draft_cost_ratio(target_size: int, draft_size: int) -> float:
    """c ≈ draft bytes / target bytes.

    Decoding one token is memory-bandwidth bound on both GPUs and CPUs, so the time of a
    step scales with the bytes of weights read; the size ratio of the two GGUF files is a
    first estimate of c until it is measured.
    """
    if target_size <= 0:
        raise ValueError("target size must be positive")
    return draft_size / target_size


K = TypeVar("K")


@dataclass(frozen=True, slots=True)
class DraftCandidate(Generic[K]):
    """One candidate draft for a target, as the draft picker lists it.

    Attributes:
        key: whatever identifies the candidate to the caller (a path, a library entry).
        result: the full pairing check (empty ``checks`` never happens: see
            :func:`unreadable_candidate` for files that could not be read).
        cost_ratio: estimated draft cost ratio c = draft bytes / target bytes, or None
            when a size is unknown.
        assistant: the candidate is an MTP assistant (:func:`check_assistant_pair`),
            which drafts through the MTP drafter rather than as a draft model.
    """

    key: K
    result: PairResult
    cost_ratio: float | None
    #: an MTP assistant (drafts with the MTP drafter), not a draft model
    assistant: bool = False

    @property
    def compatible(self) -> bool:
        return self.result.compatible

    @property
    def useful(self) -> bool:
        """Compatible and small enough to expect a speedup (no size warning)."""
        return self.result.compatible and not self.result.warnings

    @property
    def reason(self) -> str:
        """One line: "compatible", or the failed rule and its detail."""
        return self.result.reason()


def unreadable_candidate(key: K, why: str) -> DraftCandidate[K]:
    """A candidate whose file could not be read, listed among the incompatible ones."""
    return DraftCandidate(key, PairResult(False, (PairCheck("readable", False, why),)), None)


def rank_drafts(
    target: VocabView,
    target_size: int | None,
    candidates: Iterable[tuple[K, VocabView, int | None]],
    *,
    target_shape: ModelShape | None = None,
    shape_of: Callable[[K], ModelShape | None] | None = None,
) -> list[DraftCandidate[K]]:
    """Check every candidate against ``target`` and order them for the draft picker.

    Args:
        target: the target's tokenizer.
        target_size: the target's file size in bytes (all parts), or None.
        candidates: ``(key, vocab, file size in bytes or None)`` for each draft model.
        target_shape, shape_of: the target's and a candidate's :class:`ModelShape`
            (None: unknown); a candidate whose architecture is an MTP assistant's is
            checked by :func:`check_assistant_pair` (unknown target shape: it fails).

    Returns:
        Useful compatible drafts first (smallest c first), then compatible drafts too large
        to help (size warning), then incompatible ones in the order given. c is estimated
        by :func:`estimate_draft_cost_ratio`.
    """
    ranked: list[DraftCandidate[K]] = []
    for key, vocab, size in candidates:
        shape = shape_of(key) if shape_of is not None else None
        assistant = shape is not None and is_assistant_arch(shape.arch)
        result = check_drafter_pair(target, vocab, target_shape=target_shape, draft_shape=shape,
                                    target_size=target_size, draft_size=size)
        c = estimate_draft_cost_ratio(target_size, size) if target_size and size is not None else None
        ranked.append(DraftCandidate(key, result, c, assistant))

    def order(item: tuple[int, DraftCandidate[K]]) -> tuple[int, float, int]:
        i, cand = item
        group = 0 if cand.useful else 1 if cand.compatible else 2
        c = cand.cost_ratio if cand.cost_ratio is not None and group < 2 else float("inf")
        return group, c, i

    return [cand for _, cand in sorted(enumerate(ranked), key=order)]
