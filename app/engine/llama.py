"""Owning wrappers over llama-cpp-python's low-level ctypes API (model, context, batch).

This is the only module that touches ``llama_cpp`` directly. It loads a GGUF with a
progress callback that can cancel, creates a context, decodes batches with logits only
where asked, exposes logits as NumPy views (no copies, nothing of size
n_ctx × n_vocab), removes KV-cache ranges, and frees every native handle exactly once on
``close()``. ``llama_cpp`` is imported lazily so that ``import app`` stays fast.
"""

from __future__ import annotations

import contextlib
import ctypes
import logging
import os
import re
import threading
import weakref
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path
from types import ModuleType
from typing import Any, Literal, TypedDict

import numpy as np
import numpy.typing as npt

from app.catalog.gguf_meta import split_part_names, split_parts
from app.catalog.model_file import check_model_file
from app.engine.exact import TILED_MM_ENV
from app.errors import ContextOverflowError, LoadCancelledError, ModelLoadError, TandemError

log = logging.getLogger(__name__)

_lib: ModuleType | None = None
_lib_lock = threading.Lock()
_log_callback: Any = None  # kept alive for the life of the process
_recent_native_errors: list[str] = []
#: set while a decode that Tandem asked llama.cpp to abort (:meth:`LlamaContext.abortable`)
#: unwinds: llama.cpp reports the abort with error lines ("failed to compute graph",
#: "llama_decode: failed to decode, ret = 2") that are then no error and no one's reason
_abort_requested = threading.Event()
#: ``GGML_CPU_TILED_MM`` as it was when llama.cpp was first imported: ggml reads it once,
#: at its first matrix product, so later changes to the environment do not count.
_tiled_mm_env: str | None = None

#: ``LLAMA_CONTEXT_TYPE_MTP`` (``enum llama_context_type`` in llama.h): a context that
#: runs a model's multi-token-prediction (nextn) layers
CONTEXT_TYPE_MTP = 1

#: llama.cpp's vocabulary types (``enum llama_vocab_type`` in llama.h).
VOCAB_TYPE_NAMES = {0: "none", 1: "SPM", 2: "BPE", 3: "WPM", 4: "UGM", 5: "RWKV", 6: "PLaMo2"}


def lib() -> ModuleType:
    """Import ``llama_cpp`` once, initialise the backend and route its log to ``logging``.

    llama.cpp writes every loader line to stderr by default; here warnings and errors go
    to the ``app.engine.llama`` logger, and the last few errors are kept so that a failed
    load can say *why* (for example "tensor data is not within the file bounds").

    Raises:
        ModelLoadError: llama-cpp-python is not installed or its library cannot load.
    """
    global _lib, _log_callback, _tiled_mm_env
    if _lib is not None:
        return _lib
    with _lib_lock:
        if _lib is not None:
            return _lib
        _tiled_mm_env = os.environ.get(TILED_MM_ENV)
        try:
            import llama_cpp
        except Exception as exc:  # ImportError, or OSError from a broken shared library
            raise ModelLoadError(
                f"llama-cpp-python could not be imported ({exc}); run packaging/install.sh"
            ) from exc

        @llama_cpp.llama_log_callback  # type: ignore[untyped-decorator]
        def _on_log(level: int, text: bytes, _user: ctypes.c_void_p) -> None:
            # enum ggml_log_level: 1 debug, 2 info, 3 warn, 4 error, 5 continuation.
            if level in (3, 4) and text:
                msg = text.decode("utf-8", "replace").rstrip()
                if _abort_requested.is_set():
                    log.debug("llama.cpp (a decode Tandem aborted): %s", msg)
                    return
                _recent_native_errors.append(msg)
                del _recent_native_errors[:-8]
                log.log(logging.WARNING if level == 3 else logging.ERROR, "llama.cpp: %s", msg)

        _log_callback = _on_log
        llama_cpp.llama_log_set(_log_callback, ctypes.c_void_p(0))
        llama_cpp.llama_backend_init()
        _lib = llama_cpp
        return _lib


def c_atoi(text: str) -> int:
    """C's ``atoi``: optional leading whitespace and sign, then digits; anything else
    ends the number, and no digits give 0 (how ggml reads its switches)."""
    m = re.match(r"\s*([+-]?\d+)", text)
    return int(m.group(1)) if m else 0


def tiled_mm_env_at_start() -> str | None:
    """``GGML_CPU_TILED_MM`` as it was when llama.cpp was first used in this process
    (ggml reads it once; later changes to the environment do not count)."""
    lib()
    return _tiled_mm_env


def tiled_kquant_matmul_disabled() -> bool:
    """Whether ggml-cpu's tiled K-quant matrix kernel (taken for batches of ≥ 8 tokens)
    is switched off in this process: ``GGML_CPU_TILED_MM`` was set, to a value C's
    ``atoi`` reads as 0, before llama.cpp was first used (ggml-cpu/tiled/tiled.cpp)."""
    env = tiled_mm_env_at_start()
    return env is not None and c_atoi(env) == 0


def _file_stats(path: Path) -> list[tuple[Path, os.stat_result]]:
    """``os.stat`` of ``path``, and of every other part when it is part 1 of a split
    model (llama.cpp maps them all); a part that cannot be read is left out."""
    parts = split_parts(path)
    names = ([path.name] if parts is None or parts[1] != 1
             else split_part_names(path.name, parts[2]))
    out = []
    for part in (path.with_name(name) for name in names):
        try:
            out.append((part, os.stat(part)))
        except OSError:
            continue
    return out


def supports_gpu_offload() -> bool:
    """Whether this llama.cpp build can put layers on a GPU (CUDA, Metal, Vulkan…)."""
    return bool(lib().llama_supports_gpu_offload())


def system_info() -> str:
    """llama.cpp's own one-line description of the compiled backends and CPU features."""
    raw = lib().llama_print_system_info()
    return raw.decode("utf-8", "replace") if isinstance(raw, bytes) else str(raw)


def _take_native_errors() -> str:
    """The distinct, informative native errors logged since the last call, joined."""
    parts: list[str] = []
    for raw in _recent_native_errors:
        msg = raw
        # "llama_model_load: error loading model: tensor … is not within the file bounds"
        for sep in ("error loading model: ", ": "):
            if sep in msg:
                msg = msg.split(sep, 1)[1]
                break
        if msg.startswith(("failed to load model", "llama_model_loader: failed to load")):
            continue
        if msg and msg not in parts:
            parts.append(msg)
    _recent_native_errors.clear()
    return "; ".join(parts)


ProgressCallback = Callable[[float], bool]
"""Called with load progress in [0, 1]; return False to cancel loading."""


class LlamaModel:
    """A loaded GGUF model (weights and vocabulary).

    Args:
        path: the GGUF file (for a split model, part 1: ``…-00001-of-0000N.gguf``).
        n_gpu_layers: layers to offload; ``None`` means all layers when the build supports
            GPU offload (CUDA/Metal), else 0.
        use_mmap: memory-map the weights (fast start, shared page cache).
        progress: called with progress 0..1 from the loading thread; returning False
            cancels the load.
        vocab_only: load only the vocabulary (for tokenizer work and pairing checks).
        use_extra_bufts: let the CPU backend repack weights into its faster layouts
            (llama.cpp's default). Off, every batch size uses the same dot-product kernels
            for repackable types (docs/proof.md).
        no_alloc: read all metadata (hyperparameters, vocabulary, tensor list) without
            allocating or reading the weights (:mod:`app.engine.probe`); not usable for
            inference.
        load_mtp: also load the multi-token-prediction (nextn) layers a GGUF carries
            (``llama_model_params.load_mtp``; llama.cpp skips them by default); only an
            MTP context (``LlamaContext(context_type=CONTEXT_TYPE_MTP)``) runs them. No
            effect on a model without such layers.

    Raises:
        ModelLoadError: the file is missing, not a GGUF, corrupt, or does not fit in memory.
        LoadCancelledError: ``progress`` returned False.
    """

    def __init__(
        self,
        path: str | os.PathLike[str],
        *,
        n_gpu_layers: int | None = None,
        use_mmap: bool = True,
        progress: ProgressCallback | None = None,
        vocab_only: bool = False,
        no_alloc: bool = False,
        use_extra_bufts: bool = True,
        load_mtp: bool = False,
    ) -> None:
        self._ptr: Any = None
        # a folder, a pipe (opening one would block) or a dangling link is refused here
        self.path = check_model_file(path)
        # llama.cpp's own loader rejects truncated files, absurd counts, lengths and
        # offsets without crashing (tests/engine/test_edge_cases.py); we only add a clear
        # message for the commonest mistake, a file that is not a GGUF at all.
        with open(self.path, "rb") as fh:
            head = fh.read(64)
        if head[:4] != b"GGUF":
            from app.catalog.gguf_meta import what_file_is

            raise ModelLoadError(f"{self.path.name} is not a GGUF file: {what_file_is(head)}.")

        L = lib()
        params = L.llama_model_default_params()
        if n_gpu_layers is None:
            n_gpu_layers = -1 if supports_gpu_offload() else 0
        params.n_gpu_layers = n_gpu_layers
        params.load_mode = 1 if use_mmap else 0  # LLAMA_LOAD_MODE_MMAP / _NONE
        params.vocab_only = vocab_only
        params.no_alloc = no_alloc
        params.use_extra_bufts = use_extra_bufts
        if load_mtp and hasattr(params, "load_mtp"):  # a field of llama.cpp builds with MTP
            params.load_mtp = True
        self.mtp_loaded = bool(load_mtp and hasattr(params, "load_mtp"))
        self.n_gpu_layers_requested = n_gpu_layers
        cancelled = False
        callback_error: list[BaseException] = []
        cb: Any = None
        if progress is not None:

            def _progress(value: float, _user: ctypes.c_void_p) -> bool:
                nonlocal cancelled
                try:
                    keep_going = bool(progress(float(value)))
                except BaseException as exc:  # never let Python unwind through C
                    callback_error.append(exc)
                    keep_going = False
                cancelled = cancelled or not keep_going
                return keep_going

            cb = L.llama_progress_callback(_progress)
            params.progress_callback = cb
        _take_native_errors()
        # the files as loaded (every part of a split model): with mmap their pages are
        # read from them while the model lives (:meth:`changed_on_disk`)
        self._file_stats = _file_stats(self.path) if use_mmap and not vocab_only else []
        ptr = L.llama_model_load_from_file(os.fsencode(self.path), params)
        del cb
        if callback_error:
            if ptr:
                L.llama_model_free(ptr)
            raise callback_error[0]
        if not ptr:
            if cancelled:
                raise LoadCancelledError(f"Loading {self.path.name} was cancelled.")
            why = _take_native_errors() or "llama.cpp could not load it"
            raise ModelLoadError(
                f"Could not load {self.path.name}: {why}. The file may be truncated or "
                "corrupt, or not enough memory is free."
            )
        self._ptr = ptr
        self._vocab = L.llama_model_get_vocab(ptr)
        self.n_vocab: int = int(L.llama_vocab_n_tokens(self._vocab))
        self.vocab_type: int = int(L.llama_vocab_type(self._vocab))
        self.bos: int = int(L.llama_vocab_bos(self._vocab))
        self.eos: int = int(L.llama_vocab_eos(self._vocab))
        self.add_bos: bool = bool(L.llama_vocab_get_add_bos(self._vocab))
        self.add_eos: bool = bool(L.llama_vocab_get_add_eos(self._vocab))
        self._read_hparams(L, ptr, vocab_only)
        self.is_recurrent: bool = bool(L.llama_model_is_recurrent(ptr)) or bool(
            L.llama_model_is_hybrid(ptr)
        )
        self.has_encoder: bool = bool(L.llama_model_has_encoder(ptr))
        buf = ctypes.create_string_buffer(256)
        n = L.llama_model_desc(ptr, buf, len(buf))
        self.description: str = buf.raw[: max(0, n)].decode("utf-8", "replace")
        tmpl = L.llama_model_chat_template(ptr, None)
        self.chat_template: str | None = tmpl.decode("utf-8", "replace") if tmpl else None
        self._piece_cache: dict[int, bytes] = {}
        self._eog_cache: dict[int, bool] = {}
        # llama.cpp requires contexts to be freed before their model; whatever order the
        # garbage collector picks, close() frees the model's live contexts first.
        self._contexts: weakref.WeakSet[LlamaContext] = weakref.WeakSet()


    def _read_hparams(self, L: ModuleType, ptr: Any, vocab_only: bool) -> None:
        """Sizes and counts the loaded model reports (layers, widths, heads, MTP layers)."""
        self.n_layer: int = int(L.llama_model_n_layer(ptr))
        self.n_ctx_train: int = int(L.llama_model_n_ctx_train(ptr))
        # Per-layer hyperparameters are not loaded with vocab_only (llama.cpp asserts).
        hp = not vocab_only
        self.n_embd: int = int(L.llama_model_n_embd(ptr)) if hp else 0
        self.n_head: int = int(L.llama_model_n_head(ptr)) if hp and self.n_layer > 0 else 0
        self.n_head_kv: int = int(L.llama_model_n_head_kv(ptr)) if hp and self.n_layer > 0 else 0
        self.n_swa: int = int(L.llama_model_n_swa(ptr))
        #: multi-token-prediction (nextn) layers the GGUF carries after its trunk
        #: (``llama_model_n_layer_nextn``; 0 also for builds that lack the function)
        self.n_layer_nextn: int = (int(L.llama_model_n_layer_nextn(ptr))
                                   if hasattr(L, "llama_model_n_layer_nextn") else 0)
        #: width of the hidden state an MTP head takes from the trunk (``n_embd_out``)
        self.n_embd_out: int = (int(L.llama_model_n_embd_out(ptr))
                                if hp and hasattr(L, "llama_model_n_embd_out") else self.n_embd)
        self.size_bytes: int = int(L.llama_model_size(ptr))

    @property
    def nextn_layers(self) -> int:
        """:attr:`n_layer_nextn`, under the name :func:`app.options.drafter_unusable`
        reads (as a GGUF header gives it)."""
        return self.n_layer_nextn

    # -- metadata -------------------------------------------------------------------
    def meta(self, key: str) -> str | None:
        """A GGUF metadata value as a string (for example ``general.name``), or None."""
        L = lib()
        buf = ctypes.create_string_buffer(1024)
        n = L.llama_model_meta_val_str(self._require(), key.encode(), buf, len(buf))
        if n < 0:
            return None
        return buf.value.decode("utf-8", "replace")

    def kv_cache_bytes(self, n_ctx: int) -> int:
        """Upper estimate of the KV cache for ``n_ctx`` tokens, bytes (F16 K and V).

        n_layer × n_ctx × n_head_kv × (key_length + value_length) × 2 B, with the head sizes
        from ``{arch}.attention.key_length``/``value_length`` or n_embd / n_head. Sliding-
        window layers need less, so for such models this overestimates.
        """
        k, v = self.head_dims()
        return self.n_layer * n_ctx * max(1, self.n_head_kv) * (k + v) * 2

    def head_dims(self) -> tuple[int, int]:
        """(key, value) size of one attention head: ``{arch}.attention.key_length`` and
        ``value_length``, else n_embd / n_head."""
        arch = self.meta("general.architecture") or ""
        default = self.n_embd // max(1, self.n_head)

        def dim(key: str) -> int:
            v = self.meta(f"{arch}.attention.{key}")
            try:
                return int(v) if v else default
            except ValueError:
                return default

        return dim("key_length"), dim("value_length")

    @property
    def name(self) -> str:
        return self.meta("general.name") or self.path.stem

    def changed_on_disk(self) -> str | None:
        """Why the weights can no longer be read safely, in words, else None: a file
        loaded with mmap (a split model's every part) was truncated or rewritten in
        place since, which its size tells: a page past a file's new end kills the
        process with SIGBUS when read. A file deleted, or replaced by a rename as
        downloads do, is no danger: the mapping keeps the file it was made from. A
        rewrite that keeps the size (or a new time alone) is not seen.
        """
        for path, was in self._file_stats:
            try:
                now = os.stat(path)
            except OSError:
                continue
            if (now.st_dev, now.st_ino) == (was.st_dev, was.st_ino) and now.st_size != was.st_size:
                return (f"{path.name} was changed on disk after it was loaded "
                        f"({was.st_size:,} bytes then, {now.st_size:,} now)")
        return None

    # -- vocabulary -----------------------------------------------------------------
    def token_to_piece(self, token: int) -> bytes:
        """The bytes a token stands for in output text (control tokens render as empty).

        Pieces can be incomplete UTF-8 (byte-fallback tokens); join bytes before decoding.
        """
        piece = self._piece_cache.get(token)
        if piece is None:
            self._require()
            L = lib()
            buf = ctypes.create_string_buffer(64)
            n = L.llama_token_to_piece(self._vocab, token, buf, len(buf), 0, False)
            if n < 0:
                buf = ctypes.create_string_buffer(-n)
                n = L.llama_token_to_piece(self._vocab, token, buf, len(buf), 0, False)
            piece = buf.raw[:n]
            self._piece_cache[token] = piece
        return piece

    def token_text(self, token: int) -> bytes:
        """The raw vocabulary entry of a token (``llama_vocab_get_text``)."""
        self._require()
        return bytes(lib().llama_vocab_get_text(self._vocab, token) or b"")

    def strips_around(self, token: int) -> tuple[bool, bool]:
        """Whether llama.cpp strips the whitespace before and after ``token`` where its
        spelling is parsed from text (its LSTRIP and RSTRIP attributes)."""
        self._require()
        L = lib()
        attr = int(L.llama_vocab_get_attr(self._vocab, token))
        return bool(attr & L.LLAMA_TOKEN_ATTR_LSTRIP), bool(attr & L.LLAMA_TOKEN_ATTR_RSTRIP)

    def is_eog(self, token: int) -> bool:
        """Whether the token ends generation (EOS, EOT, <end_of_turn>, <|im_end|>…)."""
        v = self._eog_cache.get(token)
        if v is None:
            self._require()
            v = bool(lib().llama_vocab_is_eog(self._vocab, token))
            self._eog_cache[token] = v
        return v

    def tokenize(self, text: str, *, add_special: bool, parse_special: bool) -> list[int]:
        """Text → token ids.

        Args:
            add_special: let the vocabulary add its BOS/EOS as it is configured to.
            parse_special: turn spelled-out control tokens (``<start_of_turn>``) into
                their ids; only for text that we (or the chat template) produced.
        """
        self._require()
        L = lib()
        raw = text.encode("utf-8", "replace")  # lone surrogates (undecodable argv) → '?'
        cap = len(raw) + 8
        arr = (L.llama_token * cap)()
        n = L.llama_tokenize(self._vocab, raw, len(raw), arr, cap, add_special, parse_special)
        if n < 0:
            cap = -n
            arr = (L.llama_token * cap)()
            n = L.llama_tokenize(self._vocab, raw, len(raw), arr, cap, add_special, parse_special)
        if n < 0:
            raise TandemError("The text could not be tokenized.")
        return list(arr[:n])

    def detokenize(self, tokens: Sequence[int]) -> str:
        """Token ids → text, joining bytes first so multi-byte characters survive."""
        return b"".join(self.token_to_piece(t) for t in tokens).decode("utf-8", "replace")

    # -- lifetime -------------------------------------------------------------------
    def _require(self) -> Any:
        if self._ptr is None:
            raise TandemError("The model has been closed.")
        return self._ptr

    @property
    def ptr(self) -> Any:
        return self._require()

    @property
    def vocab_ptr(self) -> Any:
        """The model's ``llama_vocab *`` (for samplers that need the vocabulary).

        Raises:
            TandemError: the model has been closed.
        """
        self._require()
        return self._vocab

    @property
    def closed(self) -> bool:
        return self._ptr is None

    def close(self) -> None:
        """Free the weights, after closing any context still open on them. Idempotent."""
        if self._ptr is not None:
            for ctx in list(self._contexts):
                ctx.close()
            # Clear the handle before the C call: a signal handled right after it returns
            # must not leave a freed pointer behind for __del__ to free again.
            ptr, self._ptr = self._ptr, None
            lib().llama_model_free(ptr)

    def __enter__(self) -> LlamaModel:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def __del__(self) -> None:  # last resort; close() is the deterministic path
        try:
            self.close()
        except Exception:
            pass


LogitsRequest = Literal["last", "all", "none"]


class KVSettings(TypedDict):
    """A context's KV cache settings as :class:`LlamaContext` was asked for them
    (keyword arguments; None: llama.cpp's default)."""

    flash_attn: int | None
    type_k: int | None
    type_v: int | None


def _apply_kv_settings(params: Any, kv: KVSettings) -> None:
    """Set ``llama_context_params``' flash attention and K/V cache types where given."""
    if kv["flash_attn"] is not None:
        params.flash_attn_type = kv["flash_attn"]
    if kv["type_k"] is not None:
        params.type_k = kv["type_k"]
    if kv["type_v"] is not None:
        params.type_v = kv["type_v"]


class DecodeAborted(Exception):
    """A decode was aborted through :meth:`LlamaContext.abortable`; the KV cache may
    hold part of the batch, so the caller must empty or resynchronise it."""


class LlamaContext:
    """A llama.cpp context (KV cache + compute buffers) for one sequence (seq_id 0).

    Args:
        model: the loaded model; must outlive this context.
        n_ctx: context window in tokens.
        n_batch: the most tokens submitted in one ``llama_decode`` call.
        n_threads: CPU threads for single-token decoding (None: llama.cpp's default).
        n_threads_batch: CPU threads for prompt processing (None: same as n_threads).
        n_outputs_max: the most positions one decode returns logits for. llama.cpp sizes
            its output buffer n_outputs_max × n_vocab floats (by default n_batch: 512 MiB
            for a 262k vocabulary); verification needs k + 1 ≤ 65.
        n_ubatch: the most tokens computed in one graph (None: min(n_batch, 512)).
        flash_attn: ``LLAMA_FLASH_ATTN_TYPE_*`` (−1 auto, 0 off, 1 on); None: llama.cpp's
            default (auto).
        type_k, type_v: KV cache element types (``GGML_TYPE_*``, e.g. 1 F16, 8 Q8_0);
            None: llama.cpp's default (F16). A quantized V cache needs flash attention.
        n_rs_seq: recurrent-state snapshots kept per sequence so that a recurrent or
            hybrid model's memory can roll back up to this many positions
            (``llama_context_params.n_rs_seq``, experimental in llama.cpp). llama.cpp
            honours it only for architectures that support the rollback
            (``llm_arch_supports_rs_rollback``: qwen35, qwen35moe, nemotron-h, lfm2,
            lfm2moe, …) and sets it to 0 elsewhere; :attr:`n_rs_seq` is what it kept.
            Each snapshot costs one recurrent state (:meth:`recurrent_state_bytes`).
        context_type: ``LLAMA_CONTEXT_TYPE_*``; :data:`CONTEXT_TYPE_MTP` makes a
            multi-token-prediction context: its graph runs only the model's nextn
            layers (the model must be loaded with ``load_mtp``), and every token it
            evaluates comes with the trunk's hidden state at the position before
            (:meth:`decode_with_hidden`).
        ctx_other: for an MTP assistant's context (Gemma 4's ``gemma4-assistant``): the
            target's context, whose KV cache the assistant reads instead of keeping its
            own (``llama_context_params.ctx_other``; llama.cpp refuses such a model's
            context without it). This context is closed before ``ctx_other`` is.

    Raises:
        ModelLoadError: llama.cpp could not create the context (usually out of memory).
    """

    def __init__(
        self,
        model: LlamaModel,
        *,
        n_ctx: int,
        n_batch: int = 512,
        n_threads: int | None = None,
        n_threads_batch: int | None = None,
        n_outputs_max: int = 65,
        n_ubatch: int | None = None,
        flash_attn: int | None = None,
        type_k: int | None = None,
        type_v: int | None = None,
        n_rs_seq: int = 0,
        context_type: int = 0,
        ctx_other: LlamaContext | None = None,
    ) -> None:
        self._ptr: Any = None
        self._batch: Any = None
        self._hidden_batch: Any = None
        #: contexts that read this one's memory (``ctx_other``): freed before it
        self._readers: weakref.WeakSet[LlamaContext] = weakref.WeakSet()
        L = lib()
        self.model = model
        params = L.llama_context_default_params()
        params.n_ctx = n_ctx
        params.n_batch = n_batch
        params.n_ubatch = min(n_batch, 512) if n_ubatch is None else min(n_batch, n_ubatch)
        #: the KV cache settings asked for (flash attention and K/V types; None: llama.cpp's
        #: default): a context that reads this one's cache (``ctx_other``) must ask the same
        self.kv_settings = KVSettings(flash_attn=flash_attn, type_k=type_k, type_v=type_v)
        _apply_kv_settings(params, self.kv_settings)
        if n_threads is not None:
            params.n_threads = n_threads
            params.n_threads_batch = n_threads_batch or n_threads
        elif n_threads_batch is not None:
            params.n_threads_batch = n_threads_batch
        params.no_perf = True
        params.n_outputs_max = max(1, min(n_outputs_max, n_batch))
        if n_rs_seq > 0:
            params.n_rs_seq = n_rs_seq
        # A sliding-window cache of n_swa + n_ubatch cells instead of n_ctx: rolling back
        # a verification batch (≤ 65 tokens) never needs an evicted cell, and a longer
        # rollback is detected through pos_min (Session._sync_prefix) and re-evaluated.
        params.swa_full = False
        if context_type:
            params.ctx_type = context_type
        if ctx_other is not None:
            params.ctx_other = ctx_other.ptr
        _take_native_errors()
        ptr = L.llama_init_from_model(model.ptr, params)
        if not ptr:
            why = _take_native_errors() or "out of memory?"
            raise ModelLoadError(f"Could not create a context of {n_ctx} tokens: {why}")
        self._ptr = ptr
        model._contexts.add(self)
        if ctx_other is not None:
            ctx_other._readers.add(self)
        # llama.cpp may round the cache size up (to a multiple of 256); the window the
        # caller asked for is the limit we enforce, so n_ctx means the same everywhere.
        self.n_ctx: int = min(n_ctx, int(L.llama_n_ctx(ptr)))
        self.n_batch: int = int(L.llama_n_batch(ptr))
        self.n_threads: int = int(L.llama_n_threads(ptr))
        self.n_outputs_max: int = int(params.n_outputs_max)
        #: recurrent-state snapshots per sequence llama.cpp kept (0: no partial rollback
        #: of recurrent state; see the n_rs_seq argument)
        self.n_rs_seq: int = int(L.llama_n_rs_seq(ptr)) if n_rs_seq > 0 else 0
        # an MTP context of a hybrid model keeps a plain attention KV cache of its nextn
        # layers only (llama.cpp's llama_model::create_memory: "Dense MTP heads use a
        # plain attention KV cache instead of the hybrid wrapper"), which rolls back freely
        self._recurrent = model.is_recurrent and context_type != CONTEXT_TYPE_MTP
        #: positions a partial seq_rm may remove now (recurrent memory only; see seq_rm)
        self._rollback_room = 0
        self._mem = L.llama_get_memory(ptr)
        self._batch = L.llama_batch_init(self.n_batch, 0, 1)
        self._n_vocab = model.n_vocab
        self._float_ptr = ctypes.POINTER(ctypes.c_float)
        self._should_stop: Callable[[], bool] | None = None
        self._abort_cb, self._no_abort_cb = self._abort_callbacks(L)
        #: called after every successful ``llama_decode`` of :meth:`decode` with the
        #: chunk's tokens and its first position (see :meth:`set_decode_listener`)
        self._listener: Callable[[Sequence[int], int], None] | None = None
        self._n_embd_out = model.n_embd_out
        #: successful ``llama_decode`` calls of :meth:`decode` so far (a listener that
        #: compares it with the count at its last call knows whether it missed one)
        self.decode_count = 0
        #: calls of :meth:`load_state` so far: a state put back without decoding (a
        #: listener's rows from before it may belong to another context)
        self.state_loads = 0
        if context_type == CONTEXT_TYPE_MTP:
            # the head's own hidden state of its output row feeds its next step
            mtp_staging().llama_set_embeddings_nextn(ptr, True, True)

    def _abort_callbacks(self, L: Any) -> tuple[Any, Any]:
        """llama.cpp's abort callback asking :attr:`_should_stop`, and a NULL one."""

        def _abort(_data: ctypes.c_void_p) -> bool:
            f = self._should_stop
            try:
                stop = bool(f is not None and f())
            except Exception:  # never unwind through C
                return False
            if stop:
                _abort_requested.set()  # until abortable() ends: see _abort_requested
            return stop

        return L.ggml_abort_callback(_abort), L.ggml_abort_callback()

    @property
    def ptr(self) -> Any:
        if self._ptr is None:
            raise TandemError("The context has been closed.")
        return self._ptr

    def decode(
        self,
        tokens: Sequence[int],
        pos0: int,
        *,
        logits: LogitsRequest = "last",
        should_stop: Callable[[], bool] | None = None,
    ) -> bool:
        """Evaluate ``tokens`` at positions ``pos0, pos0+1, …`` on sequence 0.

        Args:
            tokens: token ids; split into chunks of ``n_batch`` when longer.
            logits: ``"last"`` — logits for the final token only (prefill); ``"all"`` —
                for every token, read back with :meth:`logits` by index into ``tokens``
                (verification; requires ``len(tokens) <= n_outputs_max``); ``"none"``.
            should_stop: checked between chunks; when it returns True the remaining chunks
                are skipped and False is returned.

        Returns:
            True when every token was evaluated.

        Raises:
            ContextOverflowError: the tokens do not fit in the context window.
            TandemError: llama.cpp reported an error while decoding.
        """
        n = len(tokens)
        if n == 0:
            return True
        if pos0 + n > self.n_ctx:
            raise ContextOverflowError(
                f"{pos0 + n} tokens do not fit in the context window of {self.n_ctx} tokens."
            )
        if logits == "all" and n > self.n_outputs_max:
            raise ValueError(f"logits='all' needs len(tokens) <= n_outputs_max ({self.n_outputs_max})")
        L = lib()
        b = self._batch
        ptr = self.ptr
        start = 0
        while start < n:
            if should_stop is not None and start > 0 and should_stop():
                return False
            chunk = tokens[start : start + self.n_batch]
            m = len(chunk)
            last_chunk = start + m == n
            tok, pos, nseq, seq, out = b.token, b.pos, b.n_seq_id, b.seq_id, b.logits
            for i, t in enumerate(chunk):
                tok[i] = t
                pos[i] = pos0 + start + i
                nseq[i] = 1
                seq[i][0] = 0
                out[i] = 1 if logits == "all" else 0
            if logits == "last" and last_chunk:
                out[m - 1] = 1
            b.n_tokens = m
            rc = L.llama_decode(ptr, b)
            if rc != 0:
                if rc == 2:
                    raise DecodeAborted()
                if rc == 1:
                    raise ContextOverflowError(
                        "The context window is full (no KV-cache slot for the batch)."
                    )
                why = _take_native_errors()
                raise TandemError(f"llama_decode failed with status {rc}. {why}".strip())
            # the snapshots hold the states after each of this call's last n_rs_seq + 1
            # tokens (llama.cpp keeps them in one ubatch), so this call's tokens but its
            # first can be rolled back, and nothing before them
            self._rollback_room = min(self.n_rs_seq, m - 1)
            self.decode_count += 1
            if self._listener is not None:
                self._listener(chunk, pos0 + start)
            start += m
        return True

    def set_decode_listener(self, listener: Callable[[Sequence[int], int], None] | None
                            ) -> None:
        """Call ``listener(tokens, pos0)`` after each evaluated chunk of :meth:`decode`,
        with the trunk's hidden states of every token of the chunk readable through
        :meth:`hidden_states` until the next decode (llama.cpp's nextn embeddings,
        unmasked: a row per token whatever logits were asked for); None stops that and
        the extra output (the last layer then runs only on the positions with logits).

        An MTP drafter listens to its target this way (llama.cpp's
        ``common_speculative_impl_draft_mtp::process`` hook).

        Raises:
            TandemError: the build lacks llama.cpp's staging function
                ``llama_set_embeddings_nextn`` (:func:`mtp_staging_missing`).
        """
        if listener is None and self._listener is None:
            return  # nothing to switch off (and no staging call on builds without it)
        mtp_staging().llama_set_embeddings_nextn(self.ptr, listener is not None, False)
        self._listener = listener

    @property
    def decode_listener(self) -> Callable[[Sequence[int], int], None] | None:
        """The listener :meth:`set_decode_listener` installed, or None."""
        return self._listener

    def hidden_states(self, n_rows: int) -> npt.NDArray[np.float32]:
        """The trunk's hidden states (before the final norm's output head: llama.cpp's
        nextn embeddings) of the last decode's ``n_rows`` tokens, shape
        (n_rows, n_embd_out), a copy. Valid in a decode listener (every token of the
        chunk) or, on an MTP context, for its one output row (``n_rows`` = 1).

        Raises:
            TandemError: nothing was computed (the context does not output them).
        """
        p = mtp_staging().llama_get_embeddings_nextn(self.ptr)
        if not p:
            raise TandemError("llama.cpp computed no hidden states for this decode.")
        out = np.empty((n_rows, self._n_embd_out), dtype=np.float32)
        ctypes.memmove(out.ctypes.data, p, out.nbytes)  # as_array makes a ctypes type per call
        return out

    def decode_with_hidden(self, tokens: Sequence[int], positions: Sequence[int],
                           hidden: npt.NDArray[np.float32], *, logits_last: bool) -> None:
        """Evaluate tokens that each carry a hidden state of the trunk (an MTP context:
        token i at ``positions[i]`` with ``hidden[i]``, shape (len(tokens), n_embd_out)),
        in one ``llama_decode`` of at most ``n_batch`` rows; logits (and the head's own
        hidden state, :meth:`hidden_states`) for the last row when ``logits_last``.

        Raises:
            ValueError: shapes that do not match, or more rows than ``n_batch``.
            TandemError: llama.cpp failed to decode.
        """
        n = len(tokens)
        if n == 0:
            return
        if n > self.n_batch or len(positions) != n or hidden.shape != (n, self._n_embd_out):
            raise ValueError(f"{n} tokens, {len(positions)} positions, hidden {hidden.shape}: "
                             f"need equal counts ≤ {self.n_batch} and rows of {self._n_embd_out}")
        L = lib()
        if self._hidden_batch is None:
            b = L.llama_batch_init(self.n_batch, self._n_embd_out, 1)
            self._hidden_tokens = (L.llama_token * self.n_batch)()
            b.token = self._hidden_tokens  # llama_batch_init(embd > 0) allocates no tokens
            self._hidden_rows = np.ctypeslib.as_array(
                b.embd, shape=(self.n_batch, self._n_embd_out))
            self._hidden_batch = b
        b = self._hidden_batch
        self._hidden_rows[:n] = hidden
        tok, pos, nseq, seq, out = b.token, b.pos, b.n_seq_id, b.seq_id, b.logits
        for i in range(n):
            tok[i] = tokens[i]
            pos[i] = positions[i]
            nseq[i] = 1
            seq[i][0] = 0
            out[i] = 1 if logits_last and i == n - 1 else 0
        b.n_tokens = n
        rc = L.llama_decode(self.ptr, b)
        if rc != 0:
            why = _take_native_errors()
            raise TandemError(f"llama_decode (MTP) failed with status {rc}. {why}".strip())

    @contextlib.contextmanager
    def abortable(self, should_stop: Callable[[], bool] | None) -> Iterator[None]:
        """Within this block a decode stops soon after ``should_stop()`` turns True.

        llama.cpp then checks the callback between graph nodes (on the CPU backend; a GPU
        backend checks between graph splits) and :meth:`decode` raises
        :class:`DecodeAborted`. The callback costs a Python call per node, so it is only
        installed for long evaluations such as a prompt prefill, never per token.
        llama.cpp's own report of such an abort (error lines ending in "llama_decode:
        failed to decode, ret = 2") is logged at debug level only and never becomes part
        of a later error's message: the abort was asked for, nothing failed.
        """
        if should_stop is None:
            yield
            return
        L = lib()
        self._should_stop = should_stop
        L.llama_set_abort_callback(self.ptr, self._abort_cb, None)
        try:
            yield
        finally:
            self._should_stop = None
            _abort_requested.clear()
            if self._ptr is not None:
                L.llama_set_abort_callback(self._ptr, self._no_abort_cb, None)

    def logits(self, index: int) -> npt.NDArray[np.float32]:
        """Logits for output ``index`` of the last decode (-1: the last token), shape (n_vocab,).

        A view into llama.cpp's buffer, valid until the next ``decode``; no copy is made.
        """
        p = lib().llama_get_logits_ith(self.ptr, index)
        if not p:
            raise TandemError(f"No logits were computed for batch index {index}.")
        return np.ctypeslib.as_array(ctypes.cast(p, self._float_ptr), shape=(self._n_vocab,))

    def seq_rm(self, p0: int, p1: int = -1) -> bool:
        """Remove positions [p0, p1) of sequence 0 from the KV cache (p1 = -1: to the end).

        Returns:
            False when the memory cannot remove this range; the cache is then unchanged
            and the caller must fall back. A recurrent or hybrid model's memory removes a
            partial range only through its snapshots (``n_rs_seq``), and only back into
            the tokens of the latest decode, keeping at least its first one: llama.cpp's
            ``llama_memory_recurrent::seq_rm`` checks the depth against ``n_rs_seq`` but
            not that the snapshots hold those positions, and reports success with a wrong
            state for a deeper rollback, so that is refused here before it is asked.
        """
        self.ptr  # raises once closed: _mem belongs to the context
        if self._recurrent and p0 > 0:
            depth = self.pos_max() + 1 - p0
            if depth > self._rollback_room:
                return depth <= 0  # nothing held at or after p0: nothing to remove
            self._rollback_room = 0  # llama.cpp allows one rollback per decode
        return bool(lib().llama_memory_seq_rm(self._mem, 0, p0, p1))

    def synchronize(self) -> None:
        """Wait until the last decode has finished on every backend (a GPU backend
        returns from ``llama_decode`` before its work is done; the CPU's is done)."""
        lib().llama_synchronize(self.ptr)

    def clear(self) -> None:
        """Empty the KV cache (and recurrent state)."""
        self.ptr
        self._rollback_room = 0
        lib().llama_memory_clear(self._mem, True)

    def recurrent_state_bytes(self) -> int:
        """Bytes of sequence 0's recurrent state as llama.cpp serialises it
        (``llama_state_seq_get_size_ext`` with ``LLAMA_STATE_SEQ_FLAGS_PARTIAL_ONLY``: the
        recurrent and sliding-window parts, not the full KV cache): what one rollback
        snapshot of a recurrent or hybrid model holds. 0 for a model without recurrent
        state. Measured on the current state, so call it after a decode."""
        L = lib()
        return int(L.llama_state_seq_get_size_ext(self.ptr, 0,
                                                  L.LLAMA_STATE_SEQ_FLAGS_PARTIAL_ONLY))

    def state_size(self) -> int:
        """Bytes :meth:`state_bytes` would copy now (llama.cpp's own count)."""
        L = lib()
        return int(L.llama_state_get_size(self.ptr) if self.model.n_swa > 0
                   else L.llama_state_seq_get_size(self.ptr, 0))

    def state_bytes(self, size: int | None = None) -> bytearray:
        """Sequence 0's state (KV cells and any recurrent state) as llama.cpp serialises
        it, written straight into the returned buffer: what :meth:`load_state` puts
        back. About the KV bytes of the held positions (n_layer × 2 × KV width × element
        size per token).

        A model with a sliding window is saved whole (``llama_state_get_data``, which
        adds the last batch's logits): a sequence's state (``llama_state_seq_get_data``)
        leaves out the window's cells older than its last ``n_swa`` positions, so after a
        restore the cache could not be cut back by even one token
        (:meth:`truncate`); the whole state keeps every cell the window holds, as if the
        context had never left it. ``size``: :meth:`state_size`'s answer, when the caller
        has just asked it (it is a dry run of the serialisation, not free).

        Raises:
            TandemError: llama.cpp wrote nothing (an empty sequence writes a header only).
        """
        L = lib()
        whole = self.model.n_swa > 0
        size = self.state_size() if size is None else size
        buf = bytearray(size)
        view = (ctypes.c_uint8 * size).from_buffer(buf)
        written = int(L.llama_state_get_data(self.ptr, view, size) if whole
                      else L.llama_state_seq_get_data(self.ptr, view, size, 0))
        del view  # the buffer may be resized only once no view holds it
        if written <= 0:
            raise TandemError("llama.cpp could not copy the KV cache's state.")
        del buf[written:]
        return buf

    def load_state(self, data: bytes | bytearray) -> bool:
        """Replace sequence 0's state with ``data`` from :meth:`state_bytes` of a context
        of the same model and settings (``llama_state_seq_set_data``; no copy is made).

        Returns:
            False when llama.cpp refused it (no room for the cells); the cache is then
            empty.
        """
        L = lib()
        self.state_loads += 1
        self.clear()
        src: Any
        if isinstance(data, bytearray):
            src = (ctypes.c_uint8 * len(data)).from_buffer(data)
        else:
            src = ctypes.cast(ctypes.c_char_p(data), ctypes.POINTER(ctypes.c_uint8))
        if self.model.n_swa > 0:
            ok = int(L.llama_state_set_data(self.ptr, src, len(data))) > 0
        else:
            ok = int(L.llama_state_seq_set_data(self.ptr, src, len(data), 0)) > 0
        if not ok:
            self.clear()
            return False
        return True

    def pos_min(self) -> int:
        """Smallest position still held for sequence 0 (> 0 once a sliding window slid), -1 if empty."""
        self.ptr
        return int(lib().llama_memory_seq_pos_min(self._mem, 0))

    def pos_max(self) -> int:
        """Largest position held for sequence 0, or -1 when empty."""
        self.ptr
        return int(lib().llama_memory_seq_pos_max(self._mem, 0))

    def truncate(self, keep: int, held: int) -> int:
        """Keep positions [0, keep) of sequence 0 out of the ``held`` it holds.

        Returns:
            ``keep`` when the cache can continue from there, else 0 after emptying it (the
            caller re-evaluates everything). That happens when the memory cannot remove a
            partial range (recurrent models), or when a sliding-window cache has already
            evicted positions the next token must attend to: like llama-server, the
            smallest held position is read *before* removing, and must not exceed
            ``keep - n_swa``.
        """
        if keep >= held:
            return keep
        n_swa = self.model.n_swa
        if keep > 0 and n_swa > 0:
            pm = self.pos_min()
            if pm < 0 or pm > max(0, keep - n_swa):
                self.clear()
                return 0
        if keep <= 0 or not self.seq_rm(keep, -1):
            self.clear()
            return 0
        return keep

    def set_nextn_layer_offset(self, head: int) -> None:
        """Select which of the model's nextn layers an MTP context's next decodes run
        (0 = the first trained head; llama.cpp's ``llama_set_nextn_layer_offset``, a
        staging function; llama.cpp aborts on an offset outside [0, n_layer_nextn), so
        that is refused here). Each head is a layer of its own with its own KV entries
        in the context's cells.

        Raises:
            ValueError: ``head`` outside [0, ``model.n_layer_nextn``).
            TandemError: the build lacks the function (:func:`mtp_chain_missing`).
        """
        if not 0 <= head < max(1, self.model.n_layer_nextn):
            raise ValueError(f"head {head} outside [0, {self.model.n_layer_nextn})")
        why = mtp_chain_missing()
        if why:
            raise TandemError(f"This llama-cpp-python build lacks {why}.")
        mtp_staging().llama_set_nextn_layer_offset(self.ptr, head)

    def set_threads(self, n_threads: int, n_threads_batch: int) -> None:
        lib().llama_set_n_threads(self.ptr, n_threads, n_threads_batch)
        self.n_threads = n_threads

    @property
    def closed(self) -> bool:
        return self._ptr is None

    def close(self) -> None:
        """Free the batch and the context (and first the contexts that read its memory:
        ``ctx_other``). Idempotent."""
        for reader in list(getattr(self, "_readers", ())):
            reader.close()
        L = lib()
        if self._batch is not None:
            batch, self._batch = self._batch, None
            L.llama_batch_free(batch)
        if self._hidden_batch is not None:
            batch, self._hidden_batch = self._hidden_batch, None
            batch.token = None  # ours (a ctypes array), not llama.cpp's to free
            L.llama_batch_free(batch)
        if self._ptr is not None:
            ptr, self._ptr = self._ptr, None
            L.llama_free(ptr)

    def __enter__(self) -> LlamaContext:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def __del__(self) -> None:
        try:
            self.close()
        except Exception:
            pass


# -- multi-token prediction (llama.cpp's staging API) --------------------------------
#: the staging functions (``src/llama-ext.h``) an MTP drafter needs; llama-cpp-python
#: binds them in ``llama_cpp.llama_cpp_ext`` under their plain, Itanium or MSVC names
MTP_STAGING_FUNCTIONS = ("llama_set_embeddings_nextn", "llama_get_embeddings_nextn")
#: the staging function that selects one of several chained heads
MTP_CHAIN_FUNCTION = "llama_set_nextn_layer_offset"
#: the public functions and types it needs besides
MTP_PUBLIC_FUNCTIONS = ("llama_model_n_layer_nextn", "llama_model_n_embd_out",
                        "LLAMA_CONTEXT_TYPE_MTP")


_mtp_missing: list[str | None] = []  # the answer of mtp_staging_missing, once known


def mtp_staging_missing() -> str | None:
    """None when this llama-cpp-python build can run MTP heads, else what it lacks
    (one line: the missing symbols or the import error)."""
    if not _mtp_missing:
        _mtp_missing.append(_find_mtp_missing())
    return _mtp_missing[0]


def _find_mtp_missing() -> str | None:
    L = lib()
    missing = [name for name in MTP_PUBLIC_FUNCTIONS if not hasattr(L, name)]
    if not hasattr(L.llama_model_default_params(), "load_mtp"):
        missing.append("llama_model_params.load_mtp")
    try:
        import llama_cpp.llama_cpp_ext as ext
    except (ImportError, AttributeError, OSError) as exc:  # AttributeError: a symbol is absent
        return "; ".join([*missing, f"llama_cpp.llama_cpp_ext: {exc}"])
    missing += [name for name in MTP_STAGING_FUNCTIONS if not hasattr(ext, name)]
    return ", ".join(missing) or None


def mtp_chain_missing() -> str | None:
    """None when this build can also run a model's chained MTP heads (one nextn layer
    per draft position: ``llama_set_nextn_layer_offset``), else what it lacks."""
    why = mtp_staging_missing()
    if why:
        return why
    import llama_cpp.llama_cpp_ext as ext

    return None if hasattr(ext, MTP_CHAIN_FUNCTION) else MTP_CHAIN_FUNCTION


def mtp_staging() -> Any:
    """llama-cpp-python's bindings of llama.cpp's staging API (``llama_cpp_ext``).

    Raises:
        TandemError: the build lacks them (:func:`mtp_staging_missing` says what).
    """
    why = mtp_staging_missing()
    if why:
        raise TandemError(f"This llama-cpp-python build lacks {why}.")
    import llama_cpp.llama_cpp_ext as ext

    return ext


# -- build information (log header, About) -------------------------------------------
#: Backend names as ggml registers them (``ggml_backend_reg_name``), GPU ones first.
GPU_BACKENDS = ("CUDA", "Metal", "Vulkan", "ROCm", "HIP", "SYCL", "MUSA", "CANN", "OpenCL")


@dataclass(frozen=True, slots=True)
class BuildInfo:
    """What llama.cpp this process runs.

    Attributes:
        llama_cpp_python: the llama-cpp-python version.
        ggml_version: ggml's version (``ggml_version()``), None if the library has none.
        ggml_commit: the llama.cpp/ggml commit it was built from (``ggml_commit()``;
            ``-dirty`` when built from an sdist with local changes), None if unknown.
        backends: ggml's registered backends (``ggml_backend_reg_name``), e.g.
            ``("CUDA", "CPU")``.
        gpu_offload: ``llama_supports_gpu_offload()``.
        cpu_features: the instruction sets and kernels compiled into the CPU backend, as
            ``llama_print_system_info()`` lists them (e.g. ``("AVX2", "AVX512",
            "AVX512_VNNI", "LLAMAFILE", "REPACK")``; packaging/cpu_flags.sh chooses them).
    """

    llama_cpp_python: str
    ggml_version: str | None
    ggml_commit: str | None
    backends: tuple[str, ...]
    gpu_offload: bool
    cpu_features: tuple[str, ...] = ()

    @property
    def backend(self) -> str:
        """The backend layers go to: the first GPU backend registered, else ``CPU``."""
        for name in GPU_BACKENDS:
            if any(b.upper().startswith(name.upper()) for b in self.backends):
                return name
        return "CPU"


def _ggml_library() -> Any:
    """The loaded ``libggml`` (llama-cpp-python keeps it in its private ``_ggml`` module;
    this is the one place that reaches for it)."""
    from llama_cpp import _ggml  # private: adapter with a contract test (tests/engine)

    return _ggml.libggml


def build_info() -> BuildInfo:
    """Versions, commit and backends of the llama.cpp in this process.

    Raises:
        ModelLoadError: llama-cpp-python cannot be loaded (see :func:`lib`).
    """
    L = lib()
    version = getattr(L, "__version__", "unknown")
    ggml = _ggml_library()

    def text(fn_name: str) -> str | None:
        fn = getattr(ggml, fn_name, None)  # missing in older llama.cpp builds
        if fn is None:
            return None
        fn.argtypes, fn.restype = [], ctypes.c_char_p
        raw = fn()
        return raw.decode("utf-8", "replace") if raw else None

    backends: list[str] = []
    try:
        ggml.ggml_backend_reg_count.argtypes, ggml.ggml_backend_reg_count.restype = [], ctypes.c_size_t
        ggml.ggml_backend_reg_get.argtypes = [ctypes.c_size_t]
        ggml.ggml_backend_reg_get.restype = ctypes.c_void_p
        ggml.ggml_backend_reg_name.argtypes = [ctypes.c_void_p]
        ggml.ggml_backend_reg_name.restype = ctypes.c_char_p
        for i in range(int(ggml.ggml_backend_reg_count())):
            name = ggml.ggml_backend_reg_name(ggml.ggml_backend_reg_get(i))
            if name:
                backends.append(name.decode("utf-8", "replace"))
    except AttributeError:  # a build without the backend registry
        pass
    return BuildInfo(
        llama_cpp_python=str(version),
        ggml_version=text("ggml_version"),
        ggml_commit=text("ggml_commit"),
        backends=tuple(backends),
        gpu_offload=bool(L.llama_supports_gpu_offload()),
        cpu_features=cpu_features(L.llama_print_system_info().decode("utf-8", "replace")),
    )


def cpu_features(system_info: str) -> tuple[str, ...]:
    """The features switched on in the ``CPU :`` section of llama.cpp's system info line
    (``"CPU : SSE3 = 1 | AVX512 = 0 | REPACK = 1 | "`` → ``("SSE3", "REPACK")``); ()
    when it has no such section."""
    _, found, rest = system_info.partition("CPU :")
    features: list[str] = []
    for part in rest.split("|") if found else ():
        name, eq, value = part.partition("=")
        if ":" in name:  # the next backend's section
            break
        if eq and value.strip() == "1":
            features.append(name.strip())
    return tuple(features)
