"""What a GGUF file is, read from its header without loading the model.

The catalog's view of one model file: name, architecture, parameter count, quantization,
size (all split parts), context length, and the tokenizer as llama.cpp will see it
(vocabulary type, size, BOS/EOS ids and whether they are added, with llama.cpp's defaults
where a key is absent). :func:`inspect_gguf` returns a :class:`GGUFInfo`;
:func:`load_vocab` returns a :class:`GGUFVocab`, the
:class:`~app.catalog.pairing.VocabView` the pairing check runs on.

The header is parsed here, over bytes (:class:`_HeaderReader`), with only the ``gguf``
package's public enums and constants (value and tensor types, block sizes, the default
alignment, the versions it reads), so that it is safe on untrusted files and fast on
large vocabularies:

* every read is bounds-checked, and header counts are checked against the file size
  before parsing, so truncated files, absurd string lengths, absurd tensor or key counts
  and tensor data outside the file (or misaligned, or overlapping) raise
  :class:`GGUFError`;
* string arrays are walked in one pass with :mod:`struct` (gguf's own ``GGUFReader``
  builds one numpy view per element: about 10 s on Gemma 3's 262,144-token vocabulary;
  this takes well under one);
* tensor data is never read: only names, types, shapes and offsets are kept, and a
  local file is memory-mapped so only the header's pages are touched.

Results are cached in SQLite under the cache folder (:func:`app.store.paths.cache_dir`),
keyed by absolute path and the size and mtime of every part, with the token texts
stored zlib-compressed, so a second scan or pairing check of the same file is fast.

The same parser reads the first bytes of a file fetched over HTTP
(:func:`parse_gguf_head`), which is how :mod:`app.catalog.hub` checks a pair before
downloading it.
"""

from __future__ import annotations

import itertools
import json
import logging
import mmap
import os
import re
import sqlite3
import struct
import threading
import zlib
from collections.abc import Sequence
from dataclasses import MISSING, asdict, dataclass, fields
from pathlib import Path
from typing import Any

import numpy as np
import numpy.typing as npt
from gguf import (
    GGML_QUANT_SIZES,
    GGUF_DEFAULT_ALIGNMENT,
    READER_SUPPORTED_VERSIONS,
    GGMLQuantizationType,
    GGUFValueType,
    LlamaFileType,
)

from app.errors import GGUFError
from app.formatting import loads_json, valid_text

log = logging.getLogger(__name__)

GGUF_MAGIC = b"GGUF"
#: Split GGUF part names, as llama.cpp's ``llama_split_path`` writes them.
SPLIT_NAME_RE = re.compile(r"^(?P<stem>.+)-(?P<no>\d{5})-of-(?P<count>\d{5})\.gguf$", re.IGNORECASE)

#: ``tokenizer.ggml.model`` → llama.cpp's vocabulary type name (``llama_vocab::impl::load``
#: in src/llama-vocab.cpp of the vendored llama.cpp, commit 0c1e57098; names as
#: ``app.engine.llama.VOCAB_TYPE_NAMES`` reports them for a loaded model).
VOCAB_TYPES: dict[str, str] = {
    "llama": "SPM",
    "gpt2": "BPE",
    "hybriddna": "BPE",
    "whitespace": "BPE",
    "gemma4": "BPE",
    "bert": "WPM",
    "t5": "UGM",
    "rwkv": "RWKV",
    "plamo2": "PLaMo2",
    "no_vocab": "none",
    "none": "none",
}

# llama.cpp's default special token ids per tokenizer model, used when the GGUF has no
# tokenizer.ggml.{bos,eos}_token_id key (same source as VOCAB_TYPES).
_DEFAULT_BOS_EOS: dict[str, tuple[int | None, int | None]] = {
    "llama": (1, 2),
    "bert": (101, None),
    "gpt2": (11, 11),
    "hybriddna": (11, 11),
    "whitespace": (11, 11),
    "t5": (None, 1),
    "rwkv": (None, None),
    "plamo2": (1, 2),
    "gemma4": (None, None),
}
# BPE pre-tokenizers for which llama.cpp turns add_bos on (all others: off).
_BPE_PRE_ADD_BOS = frozenset(
    {
        "llama3", "llama-v3", "llama-bpe", "falcon3", "falcon-h1", "pixtral", "midm-2.0",
        "lfm2", "jina-v5-nano", "tekken", "chameleon",
    }
)
# BPE pre-tokenizers whose default BOS id llama.cpp clears.
_BPE_PRE_NO_BOS = frozenset({"chatglm-bpe", "glm4", "glm5"})
# Default (add_bos, add_eos) per vocabulary type for non-BPE vocabularies.
_DEFAULT_ADD: dict[str, tuple[bool, bool]] = {
    "SPM": (True, False),
    "WPM": (True, False),
    "UGM": (False, True),
    "RWKV": (False, False),
}

# Smallest possible encodings, used to reject absurd counts before parsing.
_MIN_KV_BYTES = 8 + 4 + 1  # key length, value type, one-byte value (empty key)
_MIN_TENSOR_INFO_BYTES = 8 + 4 + 4 + 8  # name length, n_dims, type, offset (0-d, empty name)
_GGML_MAX_DIMS = 4
_FILE_TYPE_GUESSED = 1024



class IncompleteHeaderError(Exception):
    """A partial file ended inside the header; :attr:`needed` bytes would get further.

    Raised only by :func:`parse_gguf_head` on a prefix shorter than the real file; the
    caller fetches at least ``needed`` bytes from the start and tries again.
    """

    def __init__(self, needed: int) -> None:
        super().__init__(f"need at least {needed} bytes of the header")
        self.needed = needed


class _Malformed(Exception):
    """The file is broken; the message says how (without the file name)."""


@dataclass(frozen=True, slots=True)
class GGUFInfo:
    """One model as the library shows it. Sizes are bytes; counts are tokens/elements.

    Attributes:
        path: absolute path of the file (part 1 of a split model), or the remote
            ``repo/file`` for a header read over HTTP.
        name: ``general.name``, else the file name without ``.gguf``.
        architecture: ``general.architecture`` (``llama``, ``qwen2``, ``gemma3``, …).
        model_type: ``general.type``: ``model`` (default), ``mmproj``, ``adapter``, …
        parameter_count: elements in all tensors of all parts (None when not every part
            was read, for example a remote split model).
        size_label: ``general.size_label`` (``"270M"``, ``"7B"``) when present.
        quantization: ``general.file_type`` as llama.cpp names it (``Q4_K_M``, ``F16``);
            without that key, the tensor type that holds most bytes.
        file_size: bytes of all parts together.
        context_length: ``<arch>.context_length`` (training context, tokens).
        tokenizer_model / tokenizer_pre: ``tokenizer.ggml.model`` / ``.pre`` as written.
        vocab_type: llama.cpp's vocabulary type (``SPM``, ``BPE``, ``WPM``, ``UGM``,
            ``RWKV``, ``PLaMo2``, ``none``); see :data:`VOCAB_TYPES`.
        n_vocab: tokens in the vocabulary, as llama.cpp counts them.
        has_chat_template: ``tokenizer.chat_template`` is present and not empty.
        bos_id / eos_id: special token ids after llama.cpp's defaults (None: no token).
        add_bos / add_eos: whether tokenization adds them, after llama.cpp's defaults.
        split_count: number of parts (1 for a single file).
        split_paths: every part, in order.
        n_tensors: tensors in all parts read.
        gguf_version: the container version (2 or 3).
        nextn_layers: multi-token-prediction (nextn) layers after the trunk,
            ``<arch>.nextn_predict_layers`` (0 without that key): the heads the MTP
            drafter runs (:mod:`app.engine.drafter_kinds.mtp`).
        nextn_bytes: bytes of those layers' tensors (the blocks numbered from
            ``block_count − nextn_layers`` on): what loading them costs in memory
            (0 without them; None when not every part was read).
        embedding_length: hidden size, ``<arch>.embedding_length`` (None without it).
        embedding_length_out: ``<arch>.embedding_length_out``: for an MTP assistant the
            width of the target's hidden state it takes (None without that key).
    """

    path: str
    name: str
    architecture: str
    model_type: str
    parameter_count: int | None
    size_label: str | None
    quantization: str
    file_size: int
    context_length: int | None
    tokenizer_model: str | None
    tokenizer_pre: str | None
    vocab_type: str
    n_vocab: int
    has_chat_template: bool
    bos_id: int | None
    eos_id: int | None
    add_bos: bool
    add_eos: bool
    split_count: int
    split_paths: tuple[str, ...]
    n_tensors: int
    gguf_version: int
    nextn_layers: int = 0
    nextn_bytes: int | None = 0
    embedding_length: int | None = None
    embedding_length_out: int | None = None

    def to_dict(self) -> dict[str, Any]:
        """A JSON-ready dict (tuples become lists)."""
        d = asdict(self)
        d["split_paths"] = list(self.split_paths)
        return d

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> GGUFInfo:
        """Inverse of :meth:`to_dict`. Raises KeyError/TypeError on a foreign dict."""
        kwargs = {f.name: data[f.name] if f.name in data or f.default is MISSING else f.default
                  for f in fields(cls)}
        kwargs["split_paths"] = tuple(kwargs["split_paths"])
        return cls(**kwargs)


class PackedTokens:
    """Token texts stored as one bytes blob plus end offsets (compact, fast to slice)."""

    __slots__ = ("_blob", "_ends")

    def __init__(self, blob: bytes, ends: npt.NDArray[np.int64]) -> None:
        self._blob = blob
        self._ends = ends

    @classmethod
    def from_list(cls, tokens: Sequence[bytes]) -> PackedTokens:
        lengths = np.fromiter((len(t) for t in tokens), dtype=np.int64, count=len(tokens))
        return cls(b"".join(tokens), np.cumsum(lengths, dtype=np.int64))

    def __len__(self) -> int:
        return int(self._ends.shape[0])

    def slice(self, start: int, stop: int) -> list[bytes]:
        """Texts of ids ``start`` … ``stop - 1`` (clamped to the vocabulary)."""
        n = len(self)
        start, stop = max(0, start), min(stop, n)
        if start >= stop:
            return []
        ends = self._ends[start:stop].tolist()
        first = int(self._ends[start - 1]) if start > 0 else 0
        blob = self._blob
        out: list[bytes] = []
        prev = first
        for end in ends:
            out.append(blob[prev:end])
            prev = end
        return out

    def to_compressed(self) -> bytes:
        """zlib( u32 count | u32 lengths… | texts ) for the cache."""
        lengths = np.diff(self._ends, prepend=np.int64(0)).astype("<u4")
        head = struct.pack("<I", len(self))
        return zlib.compress(head + lengths.tobytes() + self._blob, 1)

    @classmethod
    def from_compressed(cls, data: bytes) -> PackedTokens:
        raw = zlib.decompress(data)
        (n,) = struct.unpack_from("<I", raw, 0)
        lengths = np.frombuffer(raw, dtype="<u4", count=n, offset=4).astype(np.int64)
        blob = raw[4 + 4 * n :]
        ends = np.cumsum(lengths, dtype=np.int64)
        if n and int(ends[-1]) != len(blob):
            raise ValueError("token blob length does not match its lengths")
        return cls(blob, ends)


class GGUFVocab:
    """A GGUF file's tokenizer seen as a :class:`~app.catalog.pairing.VocabView`.

    Token texts are the raw vocabulary entries (``tokenizer.ggml.tokens``) with llama.cpp's
    one substitution: an empty entry reads as ``[EMPTY_<id>]``, as ``llama_vocab_get_text``
    returns it, so a check on metadata agrees with a check on loaded models.
    """

    def __init__(self, info: GGUFInfo, tokens: PackedTokens) -> None:
        self.info = info
        self._tokens = tokens

    def with_info(self, info: GGUFInfo) -> GGUFVocab:
        """The same tokens with other metadata (e.g. the size of all parts of a split model)."""
        return GGUFVocab(info, self._tokens)

    @property
    def vocab_type(self) -> str:
        return self.info.vocab_type

    @property
    def n_vocab(self) -> int:
        return self.info.n_vocab

    @property
    def add_bos(self) -> bool:
        return self.info.add_bos

    @property
    def bos_id(self) -> int | None:
        return self.info.bos_id

    @property
    def add_eos(self) -> bool:
        return self.info.add_eos

    @property
    def eos_id(self) -> int | None:
        return self.info.eos_id

    def token_texts(self, start: int, stop: int) -> list[bytes]:
        """Raw texts of ids ``start`` … ``stop - 1``; ids past the list read as empty markers."""
        stop = min(stop, self.n_vocab)
        texts = self._tokens.slice(start, stop)
        out = [t if t else f"[EMPTY_{start + i}]".encode() for i, t in enumerate(texts)]
        # "no_vocab" models have n_vocab dummy tokens and no texts.
        out.extend(f"[EMPTY_{i}]".encode() for i in range(start + len(out), stop))
        return out


# --------------------------------------------------------------------------- reader


@dataclass(frozen=True, slots=True)
class _TensorInfo:
    name: str
    type_name: str
    n_elements: int
    n_bytes: int
    offset: int  # relative to the start of the data section


#: struct format of each scalar value type (GGUF spec, "gguf_type"), keyed by gguf's enum
_SCALAR_FORMATS: dict[GGUFValueType, str] = {
    GGUFValueType.UINT8: "B", GGUFValueType.INT8: "b",
    GGUFValueType.UINT16: "H", GGUFValueType.INT16: "h",
    GGUFValueType.UINT32: "I", GGUFValueType.INT32: "i",
    GGUFValueType.FLOAT32: "f", GGUFValueType.BOOL: "?",
    GGUFValueType.UINT64: "Q", GGUFValueType.INT64: "q", GGUFValueType.FLOAT64: "d",
}


class _HeaderReader:
    """Reads a GGUF header from bytes, every read bounds-checked.

    ``buf`` holds the first bytes of a file whose real size is ``total_size`` (all of it
    for a local file, mapped; a prefix fetched over HTTP for a remote one). A read past
    ``total_size`` raises :class:`_Malformed` (the file is broken); a read past ``buf``
    but inside the file raises :class:`IncompleteHeaderError` with the bytes needed.
    Only gguf's public enums and constants are used; the layout is the GGUF spec's
    (magic, version, tensor and key counts, keys, tensor infos, aligned data).
    """

    def __init__(self, buf: memoryview, total_size: int, endian: str) -> None:
        self.buf = buf
        self.total = total_size
        self.pos = 0
        self.endian = endian
        self._u64 = struct.Struct(endian + "Q")

    def require(self, offset: int, end: int) -> None:
        if end > self.total:
            raise _Malformed(
                f"the file is truncated or corrupt: a read at byte {offset} needs {end - offset}"
                f" bytes but the file has {self.total}"
            )
        if end > len(self.buf):
            raise IncompleteHeaderError(end)

    def scalar(self, fmt: str) -> Any:
        size = struct.calcsize(fmt)
        self.require(self.pos, self.pos + size)
        (value,) = struct.unpack_from(self.endian + fmt, self.buf, self.pos)
        self.pos += size
        return value

    def string(self) -> bytes:
        start = self.pos
        n = self.scalar("Q")
        if n > self.total - start - 8:
            raise _Malformed(
                f"a string at byte {start} claims {n} bytes, past the end of the file"
                f" ({self.total} bytes; the file is truncated or corrupt)"
            )
        self.require(self.pos, self.pos + n)
        data = bytes(self.buf[self.pos : self.pos + n])
        self.pos += n
        return data

    def value_type(self, what: str) -> GGUFValueType:
        at = self.pos
        raw = self.scalar("I")
        try:
            return GGUFValueType(raw)
        except ValueError:
            raise _Malformed(f"unknown {what} {raw} at byte {at}") from None

    def value(self, gtype: GGUFValueType) -> Any:
        """A scalar or string value; an array is skipped (returns None)."""
        if gtype == GGUFValueType.STRING:
            return self.string().decode("utf-8", "replace")
        if gtype == GGUFValueType.ARRAY:
            self.array(keep_strings=False)
            return None
        return self.scalar(_SCALAR_FORMATS[gtype])

    def array(self, *, keep_strings: bool) -> tuple[GGUFValueType, list[bytes] | None]:
        """Skip (or with ``keep_strings``, read) an array whose value type was just read;
        returns its item type and, for a kept array of strings, the strings as bytes."""
        start = self.pos - 4
        itype = self.value_type("array item type")
        n = self.scalar("Q")
        fmt = _SCALAR_FORMATS.get(itype)
        min_item = struct.calcsize(fmt) if fmt else (8 if itype == GGUFValueType.STRING else 12)
        if n * min_item > self.total - self.pos:
            raise _Malformed(
                f"an array at byte {start} claims {n} items, more than the file can hold"
                f" ({self.total} bytes; the file is truncated or corrupt)"
            )
        if fmt is not None:
            end = self.pos + n * struct.calcsize(fmt)
            self.require(self.pos, end)
            self.pos = end
            return itype, None
        if itype == GGUFValueType.STRING:
            return itype, self._strings(start, n, keep_strings)
        for _ in range(n):  # nested arrays: rare, none in llama.cpp's own keys
            self.value(self.value_type("array item type"))
        return itype, None

    def _strings(self, start: int, n: int, keep: bool) -> list[bytes] | None:
        # One pass with struct over the encoded strings, no object per element: Gemma 3's
        # 262,144 tokens take well under a second (gguf's GGUFReader takes about 10 s).
        buf, avail, total = self.buf, len(self.buf), self.total
        unpack = self._u64.unpack_from
        out: list[bytes] | None = [] if keep else None
        pos = first = self.pos
        for i in range(n):
            if pos + 8 > avail:
                if pos + 8 > total:
                    self.require(pos, pos + 8)  # raises _Malformed
                raise self._need_more(first, pos, i, n)
            (slen,) = unpack(buf, pos)
            if slen > total - pos - 8:
                raise _Malformed(
                    f"string {i} of an array at byte {start} claims {slen} bytes, past the end"
                    f" of the file ({total} bytes; the file is truncated or corrupt)"
                )
            if pos + 8 + slen > avail:
                raise self._need_more(first, pos + 8 + slen, i + 1, n)
            if out is not None:
                out.append(bytes(buf[pos + 8 : pos + 8 + slen]))
            pos += 8 + slen
        self.pos = pos
        return out

    def _need_more(self, start: int, pos: int, done: int, n: int) -> IncompleteHeaderError:
        # Estimate where the array ends from the mean entry size so far, so that a remote
        # reader fetches the rest in one more request instead of many.
        mean = (pos - start) / done if done else 16.0
        estimate = pos + int(mean * (n - done) * 1.05) + 4096
        return IncompleteHeaderError(min(max(estimate, pos + 8), self.total))

    def tensor_info(self, seen: set[str]) -> _TensorInfo:
        name = self.string().decode("utf-8", "replace")
        if name in seen:
            raise _Malformed(f"tensor {name!r} appears twice")
        seen.add(name)
        n_dims = self.scalar("I")
        if n_dims > _GGML_MAX_DIMS:
            raise _Malformed(f"tensor {name!r} has {n_dims} dimensions (at most 4)")
        n_elements = 1
        for _ in range(n_dims):
            n_elements *= self.scalar("Q")
        raw_type = self.scalar("I")
        offset = self.scalar("Q")
        try:
            ggml_type = GGMLQuantizationType(raw_type)
            block_size, type_size = GGML_QUANT_SIZES[ggml_type]
        except (ValueError, KeyError):
            raise _Malformed(f"tensor {name!r} has unknown type {raw_type}") from None
        if n_elements % block_size:
            raise _Malformed(
                f"tensor {name!r}: {n_elements} elements is not a whole number of blocks")
        return _TensorInfo(name, ggml_type.name, n_elements,
                           n_elements * type_size // block_size, offset)


@dataclass(slots=True)
class _Header:
    """What one parsed header yields (one part of a model)."""

    kv: dict[str, Any]
    tokens: list[bytes] | None
    tokens_malformed: str | None
    tensors: list[_TensorInfo]
    data_offset: int
    alignment: int
    version: int


#: how files that are often mistaken for models begin, and what they are
_OTHER_FILES = (
    (b"version https://git-lfs", "it is a Git LFS pointer, not the model (fetch the file "
     "itself: git lfs pull, or download it from the model page)"),
    (b"PK\x03\x04", "it is a zip archive (a PyTorch checkpoint?); llama.cpp reads GGUF files"),
    (b"<!DOCTYPE", "it is a web page (a download that saved an error or login page?)"),
    (b"<html", "it is a web page (a download that saved an error or login page?)"),
    (b"{", "it is JSON text (a config or tokenizer file?), not a model"),
)


def what_file_is(head: bytes) -> str:
    """What a file that is no GGUF seems to be, from its first bytes (32 or more), in
    words: "it is a Git LFS pointer, not the model (…)", "it starts with …"."""
    if len(head) >= 10 and head[8:10] == b'{"':  # a little-endian header length, then JSON
        return "it looks like a safetensors file; llama.cpp reads GGUF files (convert it)"
    start = head.lstrip()[:32]
    for magic, words in _OTHER_FILES:
        if start.lower().startswith(magic.lower()):
            return words
    words = "".join(itertools.takewhile(lambda ch: ch.isprintable() and ch != "\ufffd",
                                        head[:24].decode("utf-8", "replace"))).strip()
    if len(words) >= 4 and head[:4].isascii():
        return f"it is text (it starts \u201c{words}\u201d), not a model"
    return f"it starts with the bytes {' '.join(f'{b:02x}' for b in head[:4])}, not a model"


def _precheck(head: bytes, total_size: int) -> None:
    """Magic and header counts against the file size, before the reader walks anything."""
    if total_size == 0:
        raise _Malformed("the file is empty")
    if len(head) < 4 or head[:4] != GGUF_MAGIC:
        if len(head) < 4 and total_size < 4:
            raise _Malformed(f"the file is only {total_size} bytes long")
        raise _Malformed(f"it does not start with the GGUF magic, \"GGUF\": {what_file_is(head)}")
    if total_size < 24:
        raise _Malformed(f"the header is truncated (the file is {total_size} bytes)")
    (version,) = struct.unpack_from("<I", head, 4)
    fmt = "<QQ" if version & 0xFFFF else ">QQ"  # the reader's own byte-order guess
    n_tensors, n_kv = struct.unpack_from(fmt, head, 8)
    room = total_size - 24
    if n_tensors * _MIN_TENSOR_INFO_BYTES > room:
        raise _Malformed(
            f"the header claims {n_tensors} tensors, more than a {total_size}-byte file can describe"
            " (the file is truncated or corrupt)"
        )
    if n_kv * _MIN_KV_BYTES > room:
        raise _Malformed(
            f"the header claims {n_kv} metadata keys, more than a {total_size}-byte file can hold"
            " (the file is truncated or corrupt)"
        )


def _read_header(data: bytes | memoryview | mmap.mmap, total_size: int) -> _Header:
    """Parse one GGUF header from ``data``: the file's bytes, or a prefix of a
    ``total_size``-byte file.

    Raises:
        _Malformed: the file is broken.
        IncompleteHeaderError: the prefix ends inside the header.
    """
    with memoryview(data) as buf:
        _precheck(bytes(buf[:24]), total_size)
        if len(buf) < 24:
            raise IncompleteHeaderError(24)
        (raw_version,) = struct.unpack_from("<I", buf, 4)
        endian = "<" if raw_version & 0xFFFF else ">"  # a big-endian file reads byte-swapped
        r = _HeaderReader(buf, total_size, endian)
        r.pos = 4
        version = r.scalar("I")
        if version not in READER_SUPPORTED_VERSIONS:
            known = " and ".join(map(str, READER_SUPPORTED_VERSIONS))
            raise _Malformed(f"it is GGUF version {version}; versions {known} can be read")
        n_tensors, n_kv = r.scalar("Q"), r.scalar("Q")
        kv: dict[str, Any] = {}
        tokens: list[bytes] | None = None
        tokens_bad: str | None = None
        alignment = GGUF_DEFAULT_ALIGNMENT
        for _ in range(n_kv):
            key = r.string().decode("utf-8", "replace")
            gtype = r.value_type("value type")
            if gtype == GGUFValueType.ARRAY:
                keep = key == "tokenizer.ggml.tokens"
                itype, strings = r.array(keep_strings=keep)
                if keep:
                    if itype == GGUFValueType.STRING and strings is not None:
                        tokens = strings
                    else:
                        tokens_bad = "tokenizer.ggml.tokens is not an array of strings"
                continue
            value = r.value(gtype)
            if key == "general.alignment":
                if gtype != GGUFValueType.UINT32 or value <= 0 or value & (value - 1):
                    raise _Malformed(f"general.alignment is {value!r}, not a power of two")
                alignment = value
            kv[key] = value
        seen: set[str] = set()
        tensors = [r.tensor_info(seen) for _ in range(n_tensors)]
        data_offset = r.pos + (-r.pos % alignment)
    header = _Header(kv, tokens, tokens_bad, tensors, data_offset, alignment, version)
    _check_tensor_ranges(header, total_size)
    return header


def _read_file_header(path: Path, total_size: int) -> _Header:
    """:func:`_read_header` on a local file, memory-mapped: only the header's pages are
    ever read, however large the tensor data behind it."""
    with path.open("rb") as f:
        if total_size == 0:
            return _read_header(b"", 0)
        with mmap.mmap(f.fileno(), 0, access=mmap.ACCESS_READ) as mapped:
            return _read_header(mapped, total_size)


def _check_tensor_ranges(h: _Header, total_size: int) -> None:
    """Every tensor's data lies in the file, aligned, and no two overlap."""
    spans = sorted(h.tensors, key=lambda t: t.offset)
    prev_end, prev_name = 0, ""
    for t in spans:
        start = h.data_offset + t.offset
        if t.offset % h.alignment:
            raise _Malformed(f"tensor {t.name!r} has offset {t.offset}, not a multiple of the alignment {h.alignment}")
        if start + t.n_bytes > total_size:
            raise _Malformed(
                f"tensor {t.name!r} data (bytes {start}..{start + t.n_bytes}) lies outside the file"
                f" ({total_size} bytes): the file is shorter than its header says, incomplete (a "
                "download or copy cut short?) or damaged"
            )
        if t.offset < prev_end:
            raise _Malformed(f"tensors {prev_name!r} and {t.name!r} overlap")
        prev_end, prev_name = t.offset + t.n_bytes, t.name


# --------------------------------------------------------------------------- tokenizer rules


def _int_kv(kv: dict[str, Any], key: str) -> int | None:
    v = kv.get(key)
    return int(v) if isinstance(v, (int, np.integer)) and not isinstance(v, bool) else None


def _bool_kv(kv: dict[str, Any], key: str) -> bool | None:
    v = kv.get(key)
    return bool(v) if isinstance(v, (bool, np.bool_)) else None


def _tokenizer_fields(kv: dict[str, Any], arch: str, tokens: list[bytes] | None) -> dict[str, Any]:
    """vocab_type, n_vocab, bos/eos ids and add flags exactly as llama.cpp derives them."""
    model = kv.get("tokenizer.ggml.model")
    model = model if isinstance(model, str) else None
    pre = kv.get("tokenizer.ggml.pre")
    pre = pre if isinstance(pre, str) else None
    if model is None or model in ("no_vocab", "none"):
        # llama.cpp returns early for these: no special tokens, nothing added.
        n_vocab = len(tokens) if model is None and tokens else (_int_kv(kv, f"{arch}.vocab_size") or 0)
        return dict(
            tokenizer_model=model, tokenizer_pre=pre, vocab_type="none", n_vocab=n_vocab,
            bos_id=None, eos_id=None, add_bos=False, add_eos=False,
        )
    vocab_type = VOCAB_TYPES.get(model, f"unknown ({model})")
    n_vocab = len(tokens) if tokens is not None else 0
    bos, eos = _DEFAULT_BOS_EOS.get(model, (None, None))
    if vocab_type == "BPE":
        add_bos, add_eos = pre in _BPE_PRE_ADD_BOS, False
        if pre in _BPE_PRE_NO_BOS:
            bos = None
    else:
        add_bos, add_eos = _DEFAULT_ADD.get(vocab_type, (False, False))
    # Defaults outside the vocabulary are disabled; a key outside it keeps the default.
    bos = bos if bos is not None and bos < n_vocab else None
    eos = eos if eos is not None and eos < n_vocab else None
    key_bos = _int_kv(kv, "tokenizer.ggml.bos_token_id")
    key_eos = _int_kv(kv, "tokenizer.ggml.eos_token_id")
    if key_bos is not None and 0 <= key_bos < n_vocab:
        bos = key_bos
    if key_eos is not None and 0 <= key_eos < n_vocab:
        eos = key_eos
    flag = _bool_kv(kv, "tokenizer.ggml.add_bos_token")
    add_bos = add_bos if flag is None else flag
    flag = _bool_kv(kv, "tokenizer.ggml.add_eos_token")
    add_eos = add_eos if flag is None else flag
    if (pre == "gemma4" or model == "gemma4") and not add_bos:
        add_bos = True  # llama.cpp's Gemma 4 override (src/llama-vocab.cpp, "gemma4")
    return dict(
        tokenizer_model=model, tokenizer_pre=pre, vocab_type=vocab_type, n_vocab=n_vocab,
        bos_id=bos, eos_id=eos, add_bos=add_bos, add_eos=add_eos,
    )


def _quantization(kv: dict[str, Any], tensors: list[_TensorInfo]) -> str:
    ft = _int_kv(kv, "general.file_type")
    if ft is not None:
        try:
            name = LlamaFileType(ft & ~_FILE_TYPE_GUESSED).name
        except ValueError:
            return f"type {ft}"
        return name.removeprefix("MOSTLY_").removeprefix("ALL_")
    by_type: dict[str, int] = {}
    for t in tensors:
        by_type[t.type_name] = by_type.get(t.type_name, 0) + t.n_bytes
    return max(by_type, key=lambda k: by_type[k]) if by_type else "unknown"


def _build_info(
    display_path: str,
    stem: str,
    first: _Header,
    *,
    file_size: int,
    split_paths: tuple[str, ...],
    all_tensors: list[_TensorInfo] | None,
) -> tuple[GGUFInfo, list[bytes]]:
    kv = first.kv
    if first.tokens_malformed:
        raise _Malformed(first.tokens_malformed)
    arch = kv.get("general.architecture")
    arch = arch if isinstance(arch, str) and arch else "unknown"
    name = kv.get("general.name")
    name = name.strip() if isinstance(name, str) and name.strip() else stem
    model_type = kv.get("general.type")
    size_label = kv.get("general.size_label")
    template = kv.get("tokenizer.chat_template")
    tok = _tokenizer_fields(kv, arch, first.tokens)
    tensors = all_tensors if all_tensors is not None else first.tensors
    info = GGUFInfo(
        path=display_path,
        name=name,
        architecture=arch,
        model_type=model_type if isinstance(model_type, str) and model_type else "model",
        parameter_count=sum(t.n_elements for t in tensors) if all_tensors is not None else None,
        size_label=size_label if isinstance(size_label, str) and size_label else None,
        quantization=_quantization(kv, tensors),
        file_size=file_size,
        context_length=_int_kv(kv, f"{arch}.context_length"),
        has_chat_template=isinstance(template, str) and bool(template.strip()),
        split_count=max(1, _int_kv(kv, "split.count") or 1),
        split_paths=split_paths,
        n_tensors=len(tensors),
        gguf_version=first.version,
        nextn_layers=_int_kv(kv, f"{arch}.nextn_predict_layers") or 0,
        nextn_bytes=_nextn_bytes(kv, arch, tensors) if all_tensors is not None else None,
        embedding_length=_int_kv(kv, f"{arch}.embedding_length"),
        embedding_length_out=_int_kv(kv, f"{arch}.embedding_length_out"),
        **tok,
    )
    return info, first.tokens or []


def _nextn_bytes(kv: dict[str, Any], arch: str, tensors: Sequence[_TensorInfo]) -> int:
    """Bytes of the multi-token-prediction (nextn) layers' tensors: llama.cpp counts them
    in ``block_count`` after the trunk (``blk.{n}.…`` for n ≥ block_count − nextn)."""
    nextn = _int_kv(kv, f"{arch}.nextn_predict_layers") or 0
    blocks = _int_kv(kv, f"{arch}.block_count") or 0
    if nextn <= 0 or blocks <= 0:
        return 0
    prefixes = tuple(f"blk.{i}." for i in range(max(0, blocks - nextn), blocks))
    return sum(t.n_bytes for t in tensors if t.name.startswith(prefixes))


# --------------------------------------------------------------------------- split files


def split_parts(path: Path) -> tuple[Path, int, int] | None:
    """``(part 1 path, this part's number, part count)`` when ``path`` is named like a split.

    Names follow llama.cpp's ``<stem>-00001-of-00003.gguf``; None for other names.
    """
    m = SPLIT_NAME_RE.match(path.name)
    if not m:
        return None
    count = int(m["count"])
    no = int(m["no"])
    if count < 1 or not 1 <= no <= count:
        return None
    first = path.with_name(f"{m['stem']}-{1:05d}-of-{count:05d}.gguf")
    return first, no, count


def split_part_names(first_name: str, count: int) -> list[str]:
    """All part file names of a split model given part 1's name (which must match)."""
    m = SPLIT_NAME_RE.match(first_name)
    if not m:
        return [first_name]
    return [f"{m['stem']}-{i:05d}-of-{count:05d}.gguf" for i in range(1, count + 1)]


def model_parts(path: Path) -> list[Path]:
    """Part 1 first; every part that a split name promises (missing ones included)."""
    sp = split_parts(path)
    if sp is None:
        return [path]
    first, _no, count = sp
    return [first.with_name(n) for n in split_part_names(first.name, count)]


# --------------------------------------------------------------------------- cache


#: raised whenever the fields cached for a file (GGUFInfo's, the token blob) change
_CACHE_VERSION = 4
_cache_lock = threading.Lock()


def _cache_path() -> Path:
    from app.store.paths import cache_dir

    return cache_dir() / "gguf-meta.sqlite3"


def _connect() -> sqlite3.Connection:
    con = sqlite3.connect(_cache_path(), timeout=10)
    con.execute(
        "CREATE TABLE IF NOT EXISTS gguf_meta ("
        " path TEXT PRIMARY KEY, signature TEXT NOT NULL, version INTEGER NOT NULL,"
        " info TEXT NOT NULL, tokens BLOB NOT NULL)"
    )
    return con


def _signature(parts: list[Path]) -> str:
    sig = []
    for p in parts:
        st = p.stat()
        sig.append(f"{p.name}:{st.st_size}:{st.st_mtime_ns}")
    return "|".join(sig)


def _cache_get(key: str, signature: str, want_tokens: bool) -> tuple[GGUFInfo, PackedTokens | None] | None:
    key, signature = valid_text(key), valid_text(signature)  # SQLite text
    try:
        with _cache_lock:
            con = _connect()
            try:
                row = con.execute(
                    "SELECT info, " + ("tokens" if want_tokens else "NULL")
                    + " FROM gguf_meta WHERE path = ? AND signature = ? AND version = ?",
                    (key, signature, _CACHE_VERSION),
                ).fetchone()
            finally:
                con.close()
        if row is None:
            return None
        info = GGUFInfo.from_dict(loads_json(row[0]))
        tokens = PackedTokens.from_compressed(row[1]) if want_tokens else None
        return info, tokens
    except (sqlite3.Error, OSError, ValueError, KeyError, TypeError, zlib.error, struct.error) as exc:
        log.warning("GGUF metadata cache unreadable (%s); reading the file instead", exc)
        return None


def _cache_put(key: str, signature: str, info: GGUFInfo, tokens: PackedTokens) -> None:
    key, signature = valid_text(key), valid_text(signature)  # SQLite text
    try:
        blob = tokens.to_compressed()
        with _cache_lock:
            con = _connect()
            try:
                with con:
                    con.execute(
                        "INSERT OR REPLACE INTO gguf_meta (path, signature, version, info, tokens)"
                        " VALUES (?, ?, ?, ?, ?)",
                        (key, signature, _CACHE_VERSION, json.dumps(info.to_dict()), blob),
                    )
            finally:
                con.close()
    except (sqlite3.Error, OSError) as exc:
        log.warning("could not write the GGUF metadata cache: %s", exc)


# --------------------------------------------------------------------------- public API


def _fail(path: Path | str, why: str) -> GGUFError:
    name = Path(path).name if isinstance(path, Path) else path
    return GGUFError(f"{name} is not a usable GGUF file: {why}.")


def _inspect(path: str | os.PathLike[str], *, use_cache: bool, want_tokens: bool) -> tuple[GGUFInfo, PackedTokens | None]:
    # Absolute but not resolved: in the Hugging Face cache a model is a symlink to a blob
    # named by its hash, and the link's name is what tells the parts of a split model.
    given = Path(os.path.abspath(Path(path).expanduser()))
    # a readable regular file, or what it is instead in words (a folder, a pipe, a
    # dangling link…); imported here: model_file reads split names from this module
    from app.catalog.model_file import check_model_file

    check_model_file(given)
    parts = model_parts(given)
    missing = [p for p in parts if not p.is_file()]
    if missing:
        raise _fail(
            parts[0],
            f"it is split into {len(parts)} parts and part {parts.index(missing[0]) + 1}"
            f" ({missing[0].name}) is missing",
        )
    key = str(parts[0])
    try:
        signature = _signature(parts)
    except OSError as exc:
        raise GGUFError(f"Cannot read {parts[0]}: {exc.strerror or exc}.") from exc
    if use_cache:
        hit = _cache_get(key, signature, want_tokens)
        if hit is not None:
            return hit
    info, tokens = _parse_local(parts)
    packed = PackedTokens.from_list(tokens)
    if use_cache:
        _cache_put(key, signature, info, packed)
    return info, packed


def _parse_local(parts: list[Path]) -> tuple[GGUFInfo, list[bytes]]:
    headers: list[_Header] = []
    sizes: list[int] = []
    for p in parts:
        try:
            size = p.stat().st_size
            headers.append(_read_file_header(p, size))
        except _Malformed as exc:
            raise _fail(p, str(exc)) from None
        except IncompleteHeaderError:  # pragma: no cover - a whole file is never a prefix
            raise _fail(p, "the header is truncated") from None
        except OSError as exc:
            raise GGUFError(f"Cannot read {p}: {exc.strerror or exc}.") from exc
        sizes.append(size)
    first = headers[0]
    declared = _int_kv(first.kv, "split.count") or 1
    if declared != len(parts):
        if declared > 1 and len(parts) == 1:
            raise _fail(
                parts[0],
                f"it is part of a model split into {declared} files, but its name does not"
                " follow the '-00001-of-0000N.gguf' pattern, so the other parts cannot be found",
            )
        raise _fail(parts[0], f"its name says {len(parts)} parts but its header says {declared}")
    tensors = [t for h in headers for t in h.tensors]
    try:
        return _build_info(
            str(parts[0]),
            parts[0].name.removesuffix(".gguf"),
            first,
            file_size=sum(sizes),
            split_paths=tuple(str(p) for p in parts),
            all_tensors=tensors,
        )
    except _Malformed as exc:
        raise _fail(parts[0], str(exc)) from None


def inspect_gguf(path: str | os.PathLike[str], *, use_cache: bool = True) -> GGUFInfo:
    """Read a GGUF file's metadata without loading the model.

    For a split model any part may be given; the result describes the whole model
    (``path`` is part 1, sizes and parameter counts cover every part).

    Args:
        path: a ``.gguf`` file.
        use_cache: consult and fill the SQLite cache (keyed by absolute path, size and
            mtime of every part).

    Returns:
        The :class:`GGUFInfo`.

    Raises:
        GGUFError: the file is missing, unreadable, not a GGUF, or malformed (truncated,
            wrong magic, absurd string length or count, tensor data outside the file),
            or a part of a split model is missing. The message names the file and says why.
    """
    info, _ = _inspect(path, use_cache=use_cache, want_tokens=False)
    return info


def load_vocab(path: str | os.PathLike[str], *, use_cache: bool = True) -> GGUFVocab:
    """The tokenizer of a GGUF file for :func:`app.catalog.pairing.check_pair`.

    Same arguments and errors as :func:`inspect_gguf`. From the cache this costs a few
    milliseconds even for a 262,144-token vocabulary.
    """
    info, tokens = _inspect(path, use_cache=use_cache, want_tokens=True)
    assert tokens is not None
    return GGUFVocab(info, tokens)


def parse_gguf_head(head: bytes, total_size: int, source: str) -> GGUFVocab:
    """Parse the first bytes of a (remote) GGUF file whose full size is ``total_size``.

    Used by :mod:`app.catalog.hub` for the pairing check before a download.
    ``parameter_count`` is that of this file's tensors only when the model is split
    (None then), and ``file_size`` is ``total_size`` (the caller may replace it).

    Args:
        head: the first bytes of the remote file (any number).
        total_size: the remote file's size in bytes.
        source: how to name the file in messages and in ``GGUFInfo.path``.

    Raises:
        IncompleteHeaderError: ``head`` ends inside the header; fetch ``needed`` bytes.
        GGUFError: the bytes are not a usable GGUF header.
    """
    try:
        header = _read_header(head, total_size)
        split = _int_kv(header.kv, "split.count") or 1
        stem = source.rsplit("/", 1)[-1].removesuffix(".gguf")
        info, tokens = _build_info(
            source, stem, header, file_size=total_size, split_paths=(source,),
            all_tensors=header.tensors if split == 1 else None,
        )
    except _Malformed as exc:
        raise _fail(source, str(exc)) from None
    return GGUFVocab(info, PackedTokens.from_list(tokens))
