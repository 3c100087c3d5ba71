"""Synthetic GGUF models written with the ``gguf`` package, for fast exact tests.

:func:`write_tiny_llama` writes a complete, loadable llama-architecture model with a tiny
SPM vocabulary (control tokens, the 256 byte-fallback tokens, then words) and random F32
weights. F32 keeps the numerics of one-token and batched passes as close as they get,
so "speculation on equals off" can be tested exactly. The same seed gives the same
weights; ``perturb`` adds noise to every weight, which makes a draft model that agrees
with the target most of the time but not always (0 < α < 1).
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

import numpy as np
from gguf import GGUFWriter, TokenType

BOS, EOS, UNK = 1, 2, 0
N_SPECIAL = 3
BYTE0 = N_SPECIAL  # id of <0x00>

WORDS = [
    "▁the", "▁a", "▁and", "▁of", "▁to", "▁in", "▁is", "▁it", "▁you", "▁that",
    "▁def", "▁return", "▁class", "▁self", "▁import", "▁for", "▁if", "▁else", "▁print",
    "▁hello", "▁world", "▁model", "▁draft", "▁target", "▁token", "▁fast", "▁slow",
    "(", ")", ":", ",", ".", "=", "+", "-", "▁x", "▁y", "▁z", "▁1", "▁2", "▁3",
]


def tiny_vocab(n_vocab: int) -> tuple[list[bytes], list[float], list[int]]:
    """Tokens, scores and types: <unk> <s> </s>, 256 byte tokens, words, then fillers."""
    tokens: list[bytes] = [b"<unk>", b"<s>", b"</s>"]
    types = [TokenType.UNKNOWN, TokenType.CONTROL, TokenType.CONTROL]
    for b in range(256):
        tokens.append(f"<0x{b:02X}>".encode())
        types.append(TokenType.BYTE)
    for w in WORDS:
        tokens.append(w.encode())
        types.append(TokenType.NORMAL)
    i = 0
    while len(tokens) < n_vocab:
        tokens.append(f"▁w{i}".encode())
        types.append(TokenType.NORMAL)
        i += 1
    tokens = tokens[:n_vocab]
    types = types[:n_vocab]
    scores = [0.0] * 3 + [-1000.0] * 256 + [-float(i) for i in range(n_vocab - 259)]
    return tokens, scores[:n_vocab], [int(t) for t in types]


def write_tiny_llama(
    path: Path,
    *,
    n_vocab: int = 512,
    n_embd: int = 64,
    n_layer: int = 2,
    n_head: int = 4,
    n_ff: int = 128,
    n_ctx_train: int = 2048,
    seed: int = 0,
    perturb: float = 0.0,
    perturb_seed: int = 1,
    eos_id: int = EOS,
    chat_template: str | None = None,
    tokens: Sequence[bytes] | None = None,
    token_types: Sequence[int] | None = None,
    weight_scale: float = 0.3,
) -> Path:
    """Write a loadable tiny llama GGUF (F32) and return its path.

    Args:
        perturb: standard deviation of noise added to every weight (0: exact copy of the
            model for this seed).
        eos_id: which token id the vocabulary calls EOS (an end-of-generation token).
        tokens, token_types: replace the vocabulary's texts and types (``n_vocab`` each).
    """
    rng = np.random.default_rng(seed)
    noise = np.random.default_rng(perturb_seed)

    def w(*shape: int, scale: float = weight_scale) -> np.ndarray:
        a = (rng.standard_normal(shape) * scale / np.sqrt(shape[-1])).astype(np.float32)
        if perturb:
            a = a + (noise.standard_normal(shape) * perturb * scale / np.sqrt(shape[-1])).astype(np.float32)
        return a

    writer = GGUFWriter(str(path), "llama")
    writer.add_name("tiny-llama-test")
    writer.add_context_length(n_ctx_train)
    writer.add_embedding_length(n_embd)
    writer.add_block_count(n_layer)
    writer.add_feed_forward_length(n_ff)
    writer.add_head_count(n_head)
    writer.add_head_count_kv(n_head)
    writer.add_layer_norm_rms_eps(1e-5)
    writer.add_rope_dimension_count(n_embd // n_head)
    writer.add_file_type(0)  # ALL_F32
    vocab, scores, types = tiny_vocab(n_vocab)
    if tokens is not None:
        vocab = list(tokens)
    if token_types is not None:
        types = [int(t) for t in token_types]
    writer.add_tokenizer_model("llama")
    writer.add_token_list(vocab)
    writer.add_token_scores(scores)
    writer.add_token_types(types)
    writer.add_bos_token_id(BOS)
    writer.add_eos_token_id(eos_id)
    writer.add_add_bos_token(True)
    if chat_template is not None:
        writer.add_chat_template(chat_template)

    writer.add_tensor("token_embd.weight", w(n_vocab, n_embd, scale=1.0))
    writer.add_tensor("output_norm.weight", np.ones(n_embd, dtype=np.float32))
    writer.add_tensor("output.weight", w(n_vocab, n_embd, scale=4.0))
    for i in range(n_layer):
        p = f"blk.{i}."
        writer.add_tensor(p + "attn_norm.weight", np.ones(n_embd, dtype=np.float32))
        writer.add_tensor(p + "attn_q.weight", w(n_embd, n_embd))
        writer.add_tensor(p + "attn_k.weight", w(n_embd, n_embd))
        writer.add_tensor(p + "attn_v.weight", w(n_embd, n_embd))
        writer.add_tensor(p + "attn_output.weight", w(n_embd, n_embd))
        writer.add_tensor(p + "ffn_norm.weight", np.ones(n_embd, dtype=np.float32))
        writer.add_tensor(p + "ffn_gate.weight", w(n_ff, n_embd))
        writer.add_tensor(p + "ffn_up.weight", w(n_ff, n_embd))
        writer.add_tensor(p + "ffn_down.weight", w(n_embd, n_ff))
    writer.write_header_to_file()
    writer.write_kv_data_to_file()
    writer.write_tensors_to_file()
    writer.close()
    return path


def byte_token(b: int) -> int:
    """Id of the byte-fallback token for byte value ``b``."""
    return BYTE0 + b
