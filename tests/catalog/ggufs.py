"""Synthetic GGUF files for catalog tests, written with the ``gguf`` package.

:func:`write_vocab_gguf` writes a metadata-only file (tokenizer keys and, with
``hparams=True``, the llama hyper-parameters llama.cpp needs to load the vocabulary with
``vocab_only``), so each pairing rule can be exercised with exact control over the keys.
:func:`write_split_model` writes a small real model split into parts the way llama.cpp's
``gguf-split`` names them. :func:`patch` and friends corrupt a valid file in one place.
"""

from __future__ import annotations

import struct
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np
from gguf import GGUFEndian, GGUFReader, GGUFValueType, GGUFWriter, TokenType


def token_list(n: int, *, prefix: str = "▁t", specials: Sequence[str] = ("<unk>", "<s>", "</s>")) -> list[bytes]:
    """``n`` distinct token texts: the special tokens, then ``▁t0``, ``▁t1``, …"""
    toks = [s.encode() for s in specials]
    i = 0
    while len(toks) < n:
        toks.append(f"{prefix}{i}".encode())
        i += 1
    return toks[:n]


def write_vocab_gguf(
    path: Path,
    tokens: Sequence[bytes] | int = 512,
    *,
    model: str | None = "llama",
    pre: str | None = None,
    bos: int | None = None,
    eos: int | None = None,
    add_bos: bool | None = None,
    add_eos: bool | None = None,
    arch: str = "llama",
    name: str | None = "synthetic",
    chat_template: str | None = None,
    context_length: int | None = 4096,
    file_type: int | None = None,
    general_type: str | None = None,
    hparams: bool = False,
    merges: Sequence[str] | None = None,
    extra: dict[str, tuple[Any, GGUFValueType]] | None = None,
    endian: GGUFEndian = GGUFEndian.LITTLE,
) -> Path:
    """A GGUF with tokenizer metadata and no tensors. Keys left None are not written."""
    toks = token_list(tokens) if isinstance(tokens, int) else list(tokens)
    w = GGUFWriter(str(path), arch, endianess=endian)
    if name is not None:
        w.add_name(name)
    if general_type is not None:
        w.add_type(general_type)
    if context_length is not None:
        w.add_context_length(context_length)
    if hparams:
        w.add_embedding_length(64)
        w.add_block_count(1)
        w.add_feed_forward_length(128)
        w.add_head_count(4)
        w.add_head_count_kv(4)
        w.add_layer_norm_rms_eps(1e-5)
        w.add_rope_dimension_count(16)
    if file_type is not None:
        w.add_file_type(file_type)
    if model is not None:
        w.add_tokenizer_model(model)
        if pre is not None:
            w.add_tokenizer_pre(pre)
        w.add_token_list(toks)
        w.add_token_scores([0.0] * len(toks))
        types = [TokenType.CONTROL if t.startswith(b"<") and t.endswith(b">") else TokenType.NORMAL for t in toks]
        w.add_token_types([int(t) for t in types])
        if model == "gpt2":
            w.add_token_merges(list(merges) if merges is not None else ["▁ t"])
    if bos is not None:
        w.add_bos_token_id(bos)
    if eos is not None:
        w.add_eos_token_id(eos)
    if add_bos is not None:
        w.add_add_bos_token(add_bos)
    if add_eos is not None:
        w.add_add_eos_token(add_eos)
    if chat_template is not None:
        w.add_chat_template(chat_template)
    for key, (value, vtype) in (extra or {}).items():
        w.add_key_value(key, value, vtype)
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()
    return path


def write_small_model(path: Path, *, n_layer: int = 3, split_max_tensors: int = 0, seed: int = 0) -> list[Path]:
    """A small llama GGUF with real F32 tensors; split into parts when
    ``split_max_tensors`` > 0. Returns the files written (part 1 first)."""
    rng = np.random.default_rng(seed)
    w = GGUFWriter(str(path), "llama", split_max_tensors=split_max_tensors)
    w.add_name("small-split-test")
    w.add_context_length(1024)
    w.add_embedding_length(32)
    w.add_block_count(n_layer)
    w.add_feed_forward_length(64)
    w.add_head_count(4)
    w.add_head_count_kv(4)
    w.add_layer_norm_rms_eps(1e-5)
    w.add_file_type(0)
    w.add_tokenizer_model("llama")
    toks = token_list(300)
    w.add_token_list(toks)
    w.add_token_scores([0.0] * len(toks))
    w.add_token_types([int(TokenType.NORMAL)] * len(toks))
    w.add_tensor("token_embd.weight", rng.standard_normal((300, 32)).astype(np.float32))
    for i in range(n_layer):
        w.add_tensor(f"blk.{i}.attn_q.weight", rng.standard_normal((32, 32)).astype(np.float32))
        w.add_tensor(f"blk.{i}.ffn_up.weight", rng.standard_normal((64, 32)).astype(np.float32))
    w.add_tensor("output_norm.weight", np.ones(32, dtype=np.float32))
    names = w.format_shard_names(path) if split_max_tensors else [path]
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()
    return sorted(p for p in path.parent.glob(path.stem + "*.gguf")) if split_max_tensors else names


# --------------------------------------------------------------------------- corruption


def patch(path: Path, offset: int, data: bytes) -> Path:
    """Overwrite bytes of a file in place."""
    with path.open("r+b") as f:
        f.seek(offset)
        f.write(data)
    return path


def first_kv_offset() -> int:
    """Byte offset of the first metadata key's length (after magic, version, counts)."""
    return 24


def tensor_offset_field(path: Path, index: int = 0) -> int:
    """Byte offset of tensor ``index``'s data-offset field in the tensor info section."""
    r = GGUFReader(path)
    t = r.tensors[index]
    f = t.field
    end = f.offset + sum(int(p.nbytes) for p in f.parts)
    del r
    return end - 8


def u64(v: int) -> bytes:
    return struct.pack("<Q", v)
