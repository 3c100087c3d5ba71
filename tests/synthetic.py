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


def add_tiny_tokenizer(writer: GGUFWriter, n_vocab: int) -> None:
    """Write :func:`tiny_vocab`'s tokenizer (SPM, BOS added, BOS/EOS ids) into ``writer``."""
    vocab, scores, types = tiny_vocab(n_vocab)
    writer.add_tokenizer_model("llama")
    writer.add_token_list(vocab)
    writer.add_token_scores(scores)
    writer.add_token_types(types)
    writer.add_bos_token_id(BOS)
    writer.add_eos_token_id(EOS)
    writer.add_add_bos_token(True)


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
    tensor_types: dict[str, str] | None = None,
    add_bos: bool = True,
    split_max_tensors: int = 0,
    name: str = "tiny-llama-test",
) -> Path:
    """Write a loadable tiny llama GGUF (F32) and return its path.

    Args:
        perturb: standard deviation of noise added to every weight (0: exact copy of the
            model for this seed).
        eos_id: which token id the vocabulary calls EOS (an end-of-generation token).
        tokens, token_types: replace the vocabulary's texts and types (``n_vocab`` each).
        add_bos: ``tokenizer.ggml.add_bos_token`` (whether tokenizing adds BOS).
        name: ``general.name`` (llama.cpp gives every control token of a model named
            like Phi-3 its RSTRIP attribute).
        split_max_tensors: split into parts of at most this many tensors, named as
            llama.cpp's gguf-split names them (``path`` then names part 1's stem).
        tensor_types: store the named tensors (``"output_norm.weight"``, or a suffix such
            as ``"attn_norm.weight"`` for every layer) in another GGML type: ``F16``,
            ``BF16``, ``F64``, ``I8``, ``I16``, ``I32``, ``I64`` or a quantization such as
            ``Q8_0`` — a well-formed file whose types llama.cpp may not expect.
    """
    rng = np.random.default_rng(seed)
    noise = np.random.default_rng(perturb_seed)

    def w(*shape: int, scale: float = weight_scale) -> np.ndarray:
        a = (rng.standard_normal(shape) * scale / np.sqrt(shape[-1])).astype(np.float32)
        if perturb:
            a = a + (noise.standard_normal(shape) * perturb * scale / np.sqrt(shape[-1])).astype(np.float32)
        return a

    writer = GGUFWriter(str(path), "llama", split_max_tensors=split_max_tensors)
    writer.add_name(name)
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
    writer.add_add_bos_token(add_bos)
    if chat_template is not None:
        writer.add_chat_template(chat_template)

    def add(name: str, data: np.ndarray) -> None:
        kind = None
        for key, k in (tensor_types or {}).items():
            if name == key or name.endswith("." + key):
                kind = k
        add_typed_tensor(writer, name, data, kind)

    add("token_embd.weight", w(n_vocab, n_embd, scale=1.0))
    add("output_norm.weight", np.ones(n_embd, dtype=np.float32))
    add("output.weight", w(n_vocab, n_embd, scale=4.0))
    for i in range(n_layer):
        p = f"blk.{i}."
        add(p + "attn_norm.weight", np.ones(n_embd, dtype=np.float32))
        add(p + "attn_q.weight", w(n_embd, n_embd))
        add(p + "attn_k.weight", w(n_embd, n_embd))
        add(p + "attn_v.weight", w(n_embd, n_embd))
        add(p + "attn_output.weight", w(n_embd, n_embd))
        add(p + "ffn_norm.weight", np.ones(n_embd, dtype=np.float32))
        add(p + "ffn_gate.weight", w(n_ff, n_embd))
        add(p + "ffn_up.weight", w(n_ff, n_embd))
        add(p + "ffn_down.weight", w(n_embd, n_ff))
    parts = writer.format_shard_names(path) if split_max_tensors else [path]
    writer.write_header_to_file()
    writer.write_kv_data_to_file()
    writer.write_tensors_to_file()
    writer.close()
    return Path(parts[0])


_NUMPY_TYPES = {"F32": np.float32, "F16": np.float16, "F64": np.float64, "I8": np.int8,
                "I16": np.int16, "I32": np.int32, "I64": np.int64}


def add_typed_tensor(writer: GGUFWriter, name: str, data: np.ndarray, kind: str | None) -> None:
    """Add ``data`` (F32) to ``writer`` stored as GGML type ``kind`` (None: F32).

    Integer types hold the values rounded (norm weights of ones stay ones); ``BF16`` and
    quantized types are written with :func:`gguf.quants.quantize`.
    """
    if kind is None or kind == "F32":
        writer.add_tensor(name, data.astype(np.float32))
        return
    if kind in _NUMPY_TYPES:
        dtype = _NUMPY_TYPES[kind]
        arr = np.rint(data).astype(dtype) if np.issubdtype(dtype, np.integer) else data.astype(dtype)
        writer.add_tensor(name, arr)
        return
    from gguf import GGMLQuantizationType
    from gguf.quants import quantize

    qtype = GGMLQuantizationType[kind]
    writer.add_tensor(name, quantize(data.astype(np.float32), qtype), raw_dtype=qtype)


def byte_token(b: int) -> int:
    """Id of the byte-fallback token for byte value ``b``."""
    return BYTE0 + b


def write_tiny_lfm2(
    path: Path,
    *,
    layers: str = "ccacca",
    n_vocab: int = 512,
    n_embd: int = 64,
    n_head: int = 4,
    n_ff: int = 128,
    l_cache: int = 3,
    n_ctx_train: int = 2048,
    seed: int = 0,
    perturb: float = 0.0,
    perturb_seed: int = 1,
    weight_scale: float = 0.3,
) -> Path:
    """Write a loadable tiny LFM2 GGUF (F32): a hybrid of short-convolution layers, which
    carry recurrent state, and attention layers; return its path.

    LFM2 is the simplest architecture in llama.cpp's recurrent-state rollback list
    (``llm_arch_supports_rs_rollback``). What llama.cpp reads (``src/llama-model.cpp``,
    ``src/models/lfm2.cpp``): ``lfm2.shortconv.l_cache``, a per-layer
    ``lfm2.attention.head_count_kv`` whose 0 marks a short-convolution layer, RMS-norm
    epsilon; per layer ``attn_norm``, ``ffn_norm``, ``ffn_gate/up/down``, and either
    ``shortconv.conv`` {l_cache, n_embd}, ``shortconv.in_proj`` {n_embd, 3·n_embd},
    ``shortconv.out_proj`` or attention with ``attn_q_norm``/``attn_k_norm`` per head;
    the final norm is ``token_embd_norm``.

    Args:
        layers: one letter per block, ``c`` short convolution or ``a`` attention.
        perturb: standard deviation of noise on every weight (a draft that mostly agrees).
    """
    rng = np.random.default_rng(seed)
    noise = np.random.default_rng(perturb_seed)

    def w(*shape: int, scale: float = weight_scale) -> np.ndarray:
        a = (rng.standard_normal(shape) * scale / np.sqrt(shape[-1])).astype(np.float32)
        if perturb:
            a = a + (noise.standard_normal(shape) * perturb * scale / np.sqrt(shape[-1])).astype(np.float32)
        return a

    writer = GGUFWriter(str(path), "lfm2")
    writer.add_name("tiny-lfm2-test")
    writer.add_context_length(n_ctx_train)
    writer.add_embedding_length(n_embd)
    writer.add_block_count(len(layers))
    writer.add_feed_forward_length(n_ff)
    writer.add_head_count(n_head)
    writer.add_head_count_kv([n_head if c == "a" else 0 for c in layers])
    writer.add_layer_norm_rms_eps(1e-5)
    writer.add_rope_dimension_count(n_embd // n_head)
    writer.add_uint32("lfm2.shortconv.l_cache", l_cache)
    writer.add_file_type(0)  # ALL_F32
    add_tiny_tokenizer(writer, n_vocab)
    ones = np.ones(n_embd, dtype=np.float32)
    writer.add_tensor("token_embd.weight", w(n_vocab, n_embd, scale=1.0))
    writer.add_tensor("token_embd_norm.weight", ones)
    writer.add_tensor("output.weight", w(n_vocab, n_embd, scale=4.0))
    head = n_embd // n_head
    for i, kind in enumerate(layers):
        p = f"blk.{i}."
        writer.add_tensor(p + "attn_norm.weight", ones)
        writer.add_tensor(p + "ffn_norm.weight", ones)
        writer.add_tensor(p + "ffn_gate.weight", w(n_ff, n_embd))
        writer.add_tensor(p + "ffn_up.weight", w(n_ff, n_embd))
        writer.add_tensor(p + "ffn_down.weight", w(n_embd, n_ff))
        if kind == "a":
            writer.add_tensor(p + "attn_q_norm.weight", np.ones(head, dtype=np.float32))
            writer.add_tensor(p + "attn_k_norm.weight", np.ones(head, dtype=np.float32))
            for name in ("attn_q", "attn_k", "attn_v", "attn_output"):
                writer.add_tensor(p + name + ".weight", w(n_embd, n_embd))
        elif kind == "c":
            writer.add_tensor(p + "shortconv.conv.weight", w(n_embd, l_cache, scale=1.0))
            writer.add_tensor(p + "shortconv.in_proj.weight", w(3 * n_embd, n_embd))
            writer.add_tensor(p + "shortconv.out_proj.weight", w(n_embd, n_embd))
        else:
            raise ValueError(f"layer kinds are 'a' and 'c', not {kind!r}")
    writer.write_header_to_file()
    writer.write_kv_data_to_file()
    writer.write_tensors_to_file()
    writer.close()
    return path


def write_tiny_glm4moe_mtp(
    path: Path,
    *,
    n_vocab: int = 512,
    n_embd: int = 64,
    n_head: int = 4,
    n_ff: int = 128,
    n_expert: int = 2,
    n_ctx_train: int = 2048,
    seed: int = 0,
    weight_scale: float = 1.0,
    mtp_perturb: float = 0.3,
    trunk_layers: int = 1,
) -> Path:
    """Write a loadable tiny GLM-4.5 (``glm4moe``) GGUF (F32): one trunk layer and one
    multi-token-prediction (nextn) layer; return its path.

    Of the architectures with an MTP graph in this llama.cpp, GLM-4.5's needs the fewest
    tensors: plain attention (no recurrent state, no MLA), a dense trunk when
    ``leading_dense_block_count`` covers it, and one MoE block after it that carries the
    nextn tensors (``src/models/glm4-moe.cpp``: ``nextn.eh_proj`` {2·n_embd, n_embd},
    ``nextn.enorm``, ``nextn.hnorm``; the MTP graph asserts the MoE router and takes the
    LM head and final norm from the trunk). ``block_count`` counts both layers;
    ``nextn_predict_layers`` is 1.

    The nextn layer is built to imitate the trunk: token embeddings have an RMS of
    exactly 1, so ``enorm`` leaves them as the trunk's layer sees them; ``eh_proj``
    passes that half through and drops the hidden state; its attention and shared
    expert are the trunk layer's weights and its routed experts are zero. Unperturbed,
    the head then predicts what the target will (its cache holds the same layer inputs
    at the same positions), so every draft is accepted; ``mtp_perturb`` (relative noise
    on the head's copied weights) makes it agree often but not always (0 < α < 1).
    ``weight_scale`` sets the trunk's attention and feed-forward weights: at 1 the
    context moves the logits by several units, so a stale KV entry shows.
    ``trunk_layers`` > 1 repeats the trunk layer (the same weights), which makes one
    target step cost more against one head step (a smaller draft cost ratio c).
    """
    rng = np.random.default_rng(seed)

    def w(*shape: int, scale: float = weight_scale) -> np.ndarray:
        return (rng.standard_normal(shape) * scale / np.sqrt(shape[-1])).astype(np.float32)

    def noisy(a: np.ndarray) -> np.ndarray:
        return (a + rng.standard_normal(a.shape) * mtp_perturb * a.std()).astype(np.float32)

    arch = "glm4moe"
    writer = GGUFWriter(str(path), arch)
    writer.add_name("tiny-glm4moe-mtp-test")
    writer.add_context_length(n_ctx_train)
    writer.add_embedding_length(n_embd)
    writer.add_block_count(trunk_layers + 1)
    writer.add_feed_forward_length(n_ff)
    writer.add_head_count(n_head)
    writer.add_head_count_kv(n_head)
    writer.add_layer_norm_rms_eps(1e-6)
    writer.add_rope_dimension_count(n_embd // n_head)
    writer.add_expert_count(n_expert)
    writer.add_expert_used_count(1)
    writer.add_expert_shared_count(1)
    writer.add_expert_feed_forward_length(n_ff)
    writer.add_uint32(f"{arch}.leading_dense_block_count", trunk_layers)
    writer.add_float32(f"{arch}.expert_weights_scale", 1.0)
    writer.add_uint32(f"{arch}.nextn_predict_layers", 1)
    writer.add_file_type(0)  # ALL_F32
    add_tiny_tokenizer(writer, n_vocab)
    ones = np.ones(n_embd, dtype=np.float32)
    embd = rng.standard_normal((n_vocab, n_embd))
    embd = (embd / np.sqrt((embd**2).mean(axis=1, keepdims=True))).astype(np.float32)
    writer.add_tensor("token_embd.weight", embd)
    writer.add_tensor("output_norm.weight", ones)
    writer.add_tensor("output.weight", w(n_vocab, n_embd, scale=4.0))
    attn = {name: w(n_embd, n_embd) for name in ("attn_q", "attn_k", "attn_v", "attn_output")}
    ffn = {"gate": w(n_ff, n_embd), "up": w(n_ff, n_embd), "down": w(n_embd, n_ff)}
    blocks = [(i, lambda a: a) for i in range(trunk_layers)] + [(trunk_layers, noisy)]
    for i, change in blocks:
        p = f"blk.{i}."
        writer.add_tensor(p + "attn_norm.weight", ones)
        writer.add_tensor(p + "post_attention_norm.weight", ones)
        for name, a in attn.items():
            writer.add_tensor(p + name + ".weight", change(a))
        if i < trunk_layers:
            for name, a in ffn.items():
                writer.add_tensor(p + f"ffn_{name}.weight", a)
            continue
        writer.add_tensor(p + "ffn_gate_inp.weight", w(n_expert, n_embd, scale=1.0))
        writer.add_tensor(p + "exp_probs_b.bias", np.zeros(n_expert, dtype=np.float32))
        for name in ("gate", "up", "down"):
            writer.add_tensor(p + f"ffn_{name}_shexp.weight", change(ffn[name]))
            shape = (n_expert, *ffn[name].shape)
            writer.add_tensor(p + f"ffn_{name}_exps.weight", np.zeros(shape, dtype=np.float32))
        eh = np.zeros((n_embd, 2 * n_embd), dtype=np.float32)
        eh[:, :n_embd] = np.eye(n_embd, dtype=np.float32)  # [enorm(token); hnorm(h)] → token
        writer.add_tensor(p + "nextn.eh_proj.weight", eh)
        writer.add_tensor(p + "nextn.enorm.weight", ones)
        writer.add_tensor(p + "nextn.hnorm.weight", ones)
    writer.write_header_to_file()
    writer.write_kv_data_to_file()
    writer.write_tensors_to_file()
    writer.close()
    return path


def write_tiny_qwen35_mtp(
    path: Path,
    *,
    n_vocab: int = 512,
    n_embd: int = 64,
    n_head: int = 4,
    n_head_kv: int = 2,
    n_ff: int = 128,
    ssm_state: int = 16,
    ssm_groups: int = 2,
    ssm_heads: int = 4,
    ssm_conv: int = 4,
    layers: str = "ra",
    n_ctx_train: int = 2048,
    seed: int = 0,
    weight_scale: float = 1.0,
    ssm_scale: float = 1.0,
    mtp_perturb: float = 0.3,
) -> Path:
    """Write a loadable tiny Qwen3.5 (``qwen35``) GGUF (F32): a hybrid trunk of Gated
    DeltaNet (recurrent) and gated-attention layers plus one multi-token-prediction
    (nextn) layer; return its path.

    Qwen3.5 is the family people run with both recurrent state and an MTP head. What
    llama.cpp reads (``src/models/qwen35.cpp``, ``src/llama-arch.cpp``;
    ``tests/test-llama-archs.cpp`` builds one the same way): RMS-norm epsilon, four
    ``rope.dimension_sections`` (interleaved M-RoPE), ``ssm.conv_kernel``,
    ``ssm.inner_size`` (= ``ssm.state_size`` × ``ssm.time_step_rank``: square state per
    value head), ``ssm.state_size`` (key head size), ``ssm.time_step_rank`` (value
    heads), ``ssm.group_count`` (key heads), ``attention.recurrent_layers`` (one flag per
    block, the nextn block included and false), ``nextn_predict_layers``; ``block_count``
    counts the nextn block. A recurrent block has ``attn_qkv`` {n_embd, 2·key + value},
    ``attn_gate`` {n_embd, value}, ``ssm_conv1d`` {conv, 2·key + value}, ``ssm_dt`` bias,
    ``ssm_a`` (negative), ``ssm_beta``/``ssm_alpha`` {n_embd, value heads}, ``ssm_norm``
    {state}, ``ssm_out`` {value, n_embd}; an attention block has ``attn_q`` producing
    query and gate (2 × n_head × head), ``attn_k``/``attn_v``, ``attn_output``, per-head
    ``attn_q_norm``/``attn_k_norm``; every block has ``attn_norm``,
    ``post_attention_norm`` and a SwiGLU feed-forward. The nextn block is an attention
    block with ``nextn.eh_proj`` {2·n_embd, n_embd}, ``nextn.enorm``, ``nextn.hnorm``; it
    takes the LM head and final norm from the trunk.

    As in :func:`write_tiny_glm4moe_mtp`, the head imitates the trunk: token
    embeddings have an RMS of 1, ``eh_proj`` passes the token half through, and its
    attention and feed-forward are the last attention block's weights with relative
    noise ``mtp_perturb``, so it agrees with the target often but not always.
    ``ssm_scale`` scales the recurrent blocks' output projections (how much the
    recurrent state moves the logits).

    Args:
        layers: one letter per trunk block, ``r`` Gated DeltaNet or ``a`` attention.
    """
    if set(layers) - {"r", "a"} or "a" not in layers:
        raise ValueError(f"layers are 'r' and 'a' with at least one 'a', not {layers!r}")
    rng = np.random.default_rng(seed)

    def w(*shape: int, scale: float = weight_scale) -> np.ndarray:
        return (rng.standard_normal(shape) * scale / np.sqrt(shape[-1])).astype(np.float32)

    def noisy(a: np.ndarray) -> np.ndarray:
        return (a + rng.standard_normal(a.shape) * mtp_perturb * a.std()).astype(np.float32)

    arch = "qwen35"
    head = n_embd // n_head
    key_dim, value_dim = ssm_state * ssm_groups, ssm_state * ssm_heads
    writer = GGUFWriter(str(path), arch)
    writer.add_name("tiny-qwen35-mtp-test")
    writer.add_context_length(n_ctx_train)
    writer.add_embedding_length(n_embd)
    writer.add_block_count(len(layers) + 1)
    writer.add_feed_forward_length(n_ff)
    writer.add_head_count(n_head)
    writer.add_head_count_kv(n_head_kv)
    writer.add_layer_norm_rms_eps(1e-6)
    writer.add_rope_dimension_count(head)
    writer.add_array(f"{arch}.rope.dimension_sections", [head // 4] * 4)
    writer.add_uint32(f"{arch}.ssm.conv_kernel", ssm_conv)
    writer.add_uint32(f"{arch}.ssm.inner_size", value_dim)
    writer.add_uint32(f"{arch}.ssm.state_size", ssm_state)
    writer.add_uint32(f"{arch}.ssm.time_step_rank", ssm_heads)
    writer.add_uint32(f"{arch}.ssm.group_count", ssm_groups)
    writer.add_array(f"{arch}.attention.recurrent_layers",
                     [c == "r" for c in layers] + [False])
    writer.add_uint32(f"{arch}.nextn_predict_layers", 1)
    writer.add_file_type(0)  # ALL_F32
    add_tiny_tokenizer(writer, n_vocab)
    ones = np.ones(n_embd, dtype=np.float32)
    embd = rng.standard_normal((n_vocab, n_embd))
    embd = (embd / np.sqrt((embd**2).mean(axis=1, keepdims=True))).astype(np.float32)
    writer.add_tensor("token_embd.weight", embd)
    writer.add_tensor("output_norm.weight", ones)
    writer.add_tensor("output.weight", w(n_vocab, n_embd, scale=4.0))
    attn: dict[str, np.ndarray] = {}
    ffn: dict[str, np.ndarray] = {}
    for i, kind in enumerate(layers):
        p = f"blk.{i}."
        writer.add_tensor(p + "attn_norm.weight", ones)
        writer.add_tensor(p + "post_attention_norm.weight", ones)
        ffn = {"gate": w(n_ff, n_embd), "up": w(n_ff, n_embd), "down": w(n_embd, n_ff)}
        for name, a in ffn.items():
            writer.add_tensor(p + f"ffn_{name}.weight", a)
        if kind == "a":
            attn = {"attn_q": w(2 * n_head * head, n_embd), "attn_k": w(n_head_kv * head, n_embd),
                    "attn_v": w(n_head_kv * head, n_embd), "attn_output": w(n_embd, n_head * head)}
            for name, a in attn.items():
                writer.add_tensor(p + name + ".weight", a)
            writer.add_tensor(p + "attn_q_norm.weight", np.ones(head, dtype=np.float32))
            writer.add_tensor(p + "attn_k_norm.weight", np.ones(head, dtype=np.float32))
            continue
        writer.add_tensor(p + "attn_qkv.weight", w(2 * key_dim + value_dim, n_embd))
        writer.add_tensor(p + "attn_gate.weight", w(value_dim, n_embd))
        writer.add_tensor(p + "ssm_conv1d.weight", w(2 * key_dim + value_dim, ssm_conv, scale=1.0))
        writer.add_tensor(p + "ssm_dt.bias", np.zeros(ssm_heads, dtype=np.float32))
        writer.add_tensor(p + "ssm_a", -np.abs(rng.standard_normal(ssm_heads)).astype(np.float32))
        writer.add_tensor(p + "ssm_beta.weight", w(ssm_heads, n_embd))
        writer.add_tensor(p + "ssm_alpha.weight", w(ssm_heads, n_embd))
        writer.add_tensor(p + "ssm_norm.weight", np.ones(ssm_state, dtype=np.float32))
        writer.add_tensor(p + "ssm_out.weight", w(n_embd, value_dim, scale=ssm_scale))
    p = f"blk.{len(layers)}."
    writer.add_tensor(p + "attn_norm.weight", ones)
    writer.add_tensor(p + "post_attention_norm.weight", ones)
    for name, a in attn.items():
        writer.add_tensor(p + name + ".weight", noisy(a))
    writer.add_tensor(p + "attn_q_norm.weight", np.ones(head, dtype=np.float32))
    writer.add_tensor(p + "attn_k_norm.weight", np.ones(head, dtype=np.float32))
    for name, a in ffn.items():
        writer.add_tensor(p + f"ffn_{name}.weight", noisy(a))
    eh = np.zeros((n_embd, 2 * n_embd), dtype=np.float32)
    eh[:, :n_embd] = np.eye(n_embd, dtype=np.float32)  # [enorm(token); hnorm(h)] → token
    writer.add_tensor(p + "nextn.eh_proj.weight", eh)
    writer.add_tensor(p + "nextn.enorm.weight", ones)
    writer.add_tensor(p + "nextn.hnorm.weight", ones)
    writer.write_header_to_file()
    writer.write_kv_data_to_file()
    writer.write_tensors_to_file()
    writer.close()
    return path


#: The assistant's layers: one sliding-window and one full-attention layer, which read
#: the target's last two layers' KV cache (llama.cpp's ``share`` rule for
#: ``gemma4-assistant``: its sliding-window layers read the target's layer n − 2, its
#: full-attention layers layer n − 1)
ASSISTANT_LAYERS = ("swa", "full")


def _gemma4_common(writer: GGUFWriter, arch: str, layers: Sequence[str], *, n_vocab: int,
                   n_embd: int, n_head: int, head: int, n_ff: int, n_ctx_train: int,
                   n_swa: int) -> None:
    """The hyperparameters and vocabulary a Gemma 4 target and its assistant share (head
    sizes, rope, sliding window and the per-layer pattern, norm epsilon)."""
    writer.add_context_length(n_ctx_train)
    writer.add_embedding_length(n_embd)
    writer.add_block_count(len(layers))
    writer.add_feed_forward_length(n_ff)
    writer.add_head_count(n_head)
    writer.add_head_count_kv(n_head)
    writer.add_key_length(head)
    writer.add_value_length(head)
    writer.add_uint32(f"{arch}.attention.key_length_swa", head)
    writer.add_uint32(f"{arch}.attention.value_length_swa", head)
    writer.add_layer_norm_rms_eps(1e-6)
    writer.add_rope_freq_base(10000.0)
    writer.add_float32(f"{arch}.rope.freq_base_swa", 10000.0)
    writer.add_sliding_window(n_swa)
    writer.add_array(f"{arch}.attention.sliding_window_pattern", [k == "swa" for k in layers])
    writer.add_file_type(0)  # ALL_F32
    add_tiny_tokenizer(writer, n_vocab)


def _gemma4_weights(n_vocab: int, n_embd: int, n_head: int, n_ff: int, n_layer: int,
                    seed: int, weight_scale: float) -> dict[str, np.ndarray]:
    """The tiny Gemma 4 target's weights by tensor name (numpy shapes, rows first); the
    layers before the last two are inert (see :func:`write_tiny_gemma4`)."""
    rng = np.random.default_rng(seed)
    head = n_embd // n_head

    def w(*shape: int, scale: float = 1.0) -> np.ndarray:
        return (rng.standard_normal(shape) * scale / np.sqrt(shape[-1])).astype(np.float32)

    embd = rng.standard_normal((n_vocab, n_embd))
    ones = np.ones(n_embd, dtype=np.float32)
    t: dict[str, np.ndarray] = {
        "token_embd.weight": (embd / np.sqrt((embd**2).mean(axis=1, keepdims=True))).astype(np.float32),
        "output_norm.weight": ones,
        "output.weight": w(n_vocab, n_embd, scale=4.0),
        # proportional rope's frequency factors, one tensor for every full-attention layer
        "rope_freqs.weight": np.ones(head // 2, dtype=np.float32),
    }
    for i in range(n_layer):
        p = f"blk.{i}."
        inert = i < n_layer - len(ASSISTANT_LAYERS)
        t[p + "attn_norm.weight"] = t[p + "ffn_norm.weight"] = ones
        # the post-norms set how far attention and the feed-forward move the residual
        # stream (whose token embedding has an RMS of sqrt(n_embd)); zero: not at all
        t[p + "post_attention_norm.weight"] = ones * (0.0 if inert else weight_scale)
        t[p + "post_ffw_norm.weight"] = ones * (0.0 if inert else 1.0)
        t[p + "attn_q_norm.weight"] = t[p + "attn_k_norm.weight"] = np.ones(head, dtype=np.float32)
        for name in ("attn_q", "attn_k", "attn_v"):
            t[p + name + ".weight"] = w(n_head * head, n_embd)
        t[p + "attn_output.weight"] = w(n_embd, n_head * head)
        t[p + "ffn_gate.weight"] = w(n_ff, n_embd)
        t[p + "ffn_up.weight"] = w(n_ff, n_embd)
        t[p + "ffn_down.weight"] = w(n_embd, n_ff)
        t[p + "layer_output_scale.weight"] = np.ones(1, dtype=np.float32)
    return t


def _write(writer: GGUFWriter, tensors: dict[str, np.ndarray]) -> None:
    for name, a in tensors.items():
        writer.add_tensor(name, a)
    writer.write_header_to_file()
    writer.write_kv_data_to_file()
    writer.write_tensors_to_file()
    writer.close()


def write_tiny_gemma4(
    path: Path,
    *,
    n_vocab: int = 512,
    n_embd: int = 64,
    n_head: int = 4,
    n_ff: int = 128,
    n_layer: int = 6,
    n_ctx_train: int = 2048,
    n_swa: int = 1024,
    seed: int = 0,
    weight_scale: float = 0.5,
) -> Path:
    """Write a loadable tiny Gemma 4 (``gemma4``) GGUF (F32); return its path.

    What llama.cpp reads (``src/models/gemma4.cpp``): the sliding-window pattern as one
    bool per layer, ``key_length``/``value_length`` and their ``_swa`` twins,
    ``embedding_length_per_layer_input`` (0: no per-layer embeddings), per layer
    ``attn_q/k/v/output``, ``attn_q_norm``/``attn_k_norm`` per head, the post-attention
    and post-feed-forward norms, ``layer_output_scale``, and one ``rope_freqs`` for the
    full-attention layers. Attention is unscaled (scale 1) on RMS-normed queries and keys.

    Layers: ``n_layer − 2`` sliding-window layers that compute (and fill the KV cache)
    but leave the residual stream as it was (post-norm weights 0), so that a target
    step costs what ``n_layer`` layers cost, then the sliding-window and full-attention
    layers that do the work (the two an assistant reads). ``weight_scale`` is their
    post-attention norm's weight: how far attention moves the residual stream (RMS
    sqrt(n_embd)); small, the next token depends mostly on the current one.
    """
    arch = "gemma4"
    if n_layer < len(ASSISTANT_LAYERS):
        raise ValueError("a Gemma 4 target needs at least two layers")
    layers = ["swa"] * (n_layer - 1) + ["full"]
    writer = GGUFWriter(str(path), arch)
    writer.add_name("tiny-gemma4-test")
    _gemma4_common(writer, arch, layers, n_vocab=n_vocab, n_embd=n_embd, n_head=n_head,
                   head=n_embd // n_head, n_ff=n_ff, n_ctx_train=n_ctx_train, n_swa=n_swa)
    writer.add_uint32(f"{arch}.embedding_length_per_layer_input", 0)
    writer.add_uint32(f"{arch}.attention.shared_kv_layers", 0)
    _write(writer, _gemma4_weights(n_vocab, n_embd, n_head, n_ff, n_layer, seed, weight_scale))
    return path


def write_tiny_gemma4_assistant(
    path: Path,
    *,
    n_vocab: int = 512,
    n_embd_target: int = 64,
    n_head: int = 4,
    n_ff: int = 128,
    n_layer_target: int = 6,
    n_ctx_train: int = 2048,
    n_swa: int = 1024,
    seed: int = 0,
    weight_scale: float = 0.5,
    perturb: float = 0.3,
    perturb_seed: int = 1,
    extra_width: int = 8,
) -> Path:
    """Write a loadable tiny Gemma 4 assistant (``gemma4-assistant``) GGUF (F32) for the
    target :func:`write_tiny_gemma4` writes with the same arguments; return its path.

    What llama.cpp reads (``src/models/gemma4-assistant.cpp``): every block is a nextn
    layer (``nextn_predict_layers`` = ``block_count``); ``embedding_length_out`` is the
    target's hidden size and must differ from its own ``embedding_length``;
    ``nextn.pre_projection`` {2·n_embd_target, n_embd} maps [the target's scaled token
    embedding; the target's hidden state] to the assistant's width and
    ``nextn.post_projection`` {n_embd, n_embd_target} maps back (the next step's hidden
    state); per layer only queries (``attn_q``, ``attn_q_norm``): keys and values are the
    target's cache; the output head is the assistant's own ``token_embd``.

    The assistant imitates the target's last two layers: its width is the target's plus
    ``extra_width`` zeros (norm weights sqrt(n_target / n) make an RMS norm over the
    padded stream equal the target's over its own); each layer's weights are the target
    layer's, padded; the pre-projection passes the token embedding and drops the hidden
    state (the target's inert layers pass the embedding on unchanged). It computes what
    the target computes at the draft position except that it cannot attend to that
    position's own key (not yet in the target's cache), so it agrees with the target
    when attention is weak (small ``weight_scale``). ``perturb`` is relative noise on the
    copied weights (0 < α < 1).
    """
    arch = "gemma4-assistant"
    n_t = n_embd_target
    n_a = n_t + extra_width
    rng = np.random.default_rng(perturb_seed)

    def noisy(a: np.ndarray) -> np.ndarray:
        if not perturb:
            return a
        return (a + rng.standard_normal(a.shape) * perturb * a.std()).astype(np.float32)

    def pad(a: np.ndarray, rows: int | None = None, cols: int | None = None) -> np.ndarray:
        out = np.zeros((rows or a.shape[0], cols or a.shape[1]), dtype=np.float32)
        out[:a.shape[0], :a.shape[1]] = a
        return out

    def norm(a: np.ndarray) -> np.ndarray:
        return pad(a[None] * np.float32(np.sqrt(n_t / n_a)), cols=n_a)[0]

    src = _gemma4_weights(n_vocab, n_t, n_head, n_ff, n_layer_target, seed, weight_scale)
    writer = GGUFWriter(str(path), arch)
    writer.add_name("tiny-gemma4-assistant-test")
    _gemma4_common(writer, arch, ASSISTANT_LAYERS, n_vocab=n_vocab, n_embd=n_a,
                   n_head=n_head, head=n_t // n_head, n_ff=n_ff, n_ctx_train=n_ctx_train,
                   n_swa=n_swa)
    writer.add_uint32(f"{arch}.embedding_length_out", n_t)
    writer.add_uint32(f"{arch}.nextn_predict_layers", len(ASSISTANT_LAYERS))
    eye = np.eye(n_t, dtype=np.float32)
    t: dict[str, np.ndarray] = {
        "token_embd.weight": pad(noisy(src["output.weight"]), cols=n_a),
        "output_norm.weight": norm(src["output_norm.weight"]),
        "nextn.pre_projection.weight": pad(eye, n_a, 2 * n_t),
        "nextn.post_projection.weight": pad(eye, n_t, n_a),
        "rope_freqs.weight": src["rope_freqs.weight"],
    }
    first = n_layer_target - len(ASSISTANT_LAYERS)
    for i in range(len(ASSISTANT_LAYERS)):
        p, q = f"blk.{i}.", f"blk.{first + i}."
        for name in ("attn_norm", "post_attention_norm", "ffn_norm", "post_ffw_norm"):
            t[p + name + ".weight"] = norm(src[q + name + ".weight"])
        t[p + "attn_q_norm.weight"] = src[q + "attn_q_norm.weight"]
        t[p + "attn_q.weight"] = pad(noisy(src[q + "attn_q.weight"]), cols=n_a)
        t[p + "attn_output.weight"] = pad(noisy(src[q + "attn_output.weight"]), rows=n_a)
        t[p + "ffn_gate.weight"] = pad(noisy(src[q + "ffn_gate.weight"]), cols=n_a)
        t[p + "ffn_up.weight"] = pad(noisy(src[q + "ffn_up.weight"]), cols=n_a)
        t[p + "ffn_down.weight"] = pad(noisy(src[q + "ffn_down.weight"]), rows=n_a)
        t[p + "layer_output_scale.weight"] = src[q + "layer_output_scale.weight"]
    _write(writer, t)
    return path


def write_tiny_hyv3_mtp(
    path: Path,
    *,
    n_heads: int = 2,
    n_vocab: int = 512,
    n_embd: int = 64,
    n_head: int = 4,
    n_ff: int = 128,
    n_ctx_train: int = 2048,
    seed: int = 0,
    weight_scale: float = 1.0,
    mtp_perturb: float = 0.3,
) -> Path:
    """Write a loadable tiny Hunyuan V3 (``hy_v3``) GGUF (F32): one dense trunk layer
    and ``n_heads`` chained multi-token-prediction (nextn) layers; return its path.

    Of the architectures whose MTP graph runs the head that
    ``llama_set_nextn_layer_offset`` selects (step35, deepseek32/4, bailingmoe3,
    glm-dsa, hy_v3), Hunyuan V3's needs the fewest tensors (``src/models/hy-v3.cpp``):
    plain attention with per-head ``attn_q_norm``/``attn_k_norm`` (NEOX RoPE), a dense
    SwiGLU feed-forward wherever a block has no ``ffn_gate_inp`` (the MTP blocks
    included), and per nextn block ``nextn.eh_proj`` {2·n_embd, n_embd},
    ``nextn.enorm``, ``nextn.hnorm`` (the final norm and LM head come from the trunk).
    ``block_count`` counts the nextn blocks; ``nextn_predict_layers`` is ``n_heads``;
    ``expert_feed_forward_length`` is read even for a dense model.

    Every head imitates the trunk as in :func:`write_tiny_glm4moe_mtp` (token
    embeddings of RMS 1, ``eh_proj`` passing the token half through, the trunk layer's
    attention and feed-forward weights), each with its own relative noise
    ``mtp_perturb``: unperturbed, every head predicts what the target will when its own
    layer's KV cache holds the trunk's layer inputs at the same positions.
    """
    if n_heads < 1:
        raise ValueError(f"n_heads must be at least 1, not {n_heads}")
    rng = np.random.default_rng(seed)

    def w(*shape: int, scale: float = weight_scale) -> np.ndarray:
        return (rng.standard_normal(shape) * scale / np.sqrt(shape[-1])).astype(np.float32)

    def noisy(a: np.ndarray) -> np.ndarray:
        return (a + rng.standard_normal(a.shape) * mtp_perturb * a.std()).astype(np.float32)

    arch = "hy_v3"
    head = n_embd // n_head
    writer = GGUFWriter(str(path), arch)
    writer.add_name("tiny-hyv3-mtp-test")
    writer.add_context_length(n_ctx_train)
    writer.add_embedding_length(n_embd)
    writer.add_block_count(1 + n_heads)
    writer.add_feed_forward_length(n_ff)
    writer.add_expert_feed_forward_length(n_ff)
    writer.add_head_count(n_head)
    writer.add_head_count_kv(n_head)
    writer.add_layer_norm_rms_eps(1e-6)
    writer.add_rope_dimension_count(head)
    writer.add_uint32(f"{arch}.nextn_predict_layers", n_heads)
    writer.add_file_type(0)  # ALL_F32
    add_tiny_tokenizer(writer, n_vocab)
    ones = np.ones(n_embd, dtype=np.float32)
    embd = rng.standard_normal((n_vocab, n_embd))
    embd = (embd / np.sqrt((embd**2).mean(axis=1, keepdims=True))).astype(np.float32)
    writer.add_tensor("token_embd.weight", embd)
    writer.add_tensor("output_norm.weight", ones)
    writer.add_tensor("output.weight", w(n_vocab, n_embd, scale=4.0))
    trunk = {name: w(n_embd, n_embd) for name in ("attn_q", "attn_k", "attn_v", "attn_output")}
    trunk |= {"ffn_gate": w(n_ff, n_embd), "ffn_up": w(n_ff, n_embd), "ffn_down": w(n_embd, n_ff)}
    for i in range(1 + n_heads):
        p = f"blk.{i}."
        for name in ("attn_norm", "ffn_norm"):
            writer.add_tensor(p + name + ".weight", ones)
        for name in ("attn_q_norm", "attn_k_norm"):
            writer.add_tensor(p + name + ".weight", np.ones(head, dtype=np.float32))
        for name, a in trunk.items():
            writer.add_tensor(p + name + ".weight", a if i == 0 else noisy(a))
        if i == 0:
            continue
        eh = np.zeros((n_embd, 2 * n_embd), dtype=np.float32)
        eh[:, :n_embd] = np.eye(n_embd, dtype=np.float32)  # [enorm(token); hnorm(h)] → token
        writer.add_tensor(p + "nextn.eh_proj.weight", eh)
        writer.add_tensor(p + "nextn.enorm.weight", ones)
        writer.add_tensor(p + "nextn.hnorm.weight", ones)
    writer.write_header_to_file()
    writer.write_kv_data_to_file()
    writer.write_tensors_to_file()
    writer.close()
    return path


def write_header_only(path: Path, arch: str = "llama") -> Path:
    """A GGUF with a header and no tensors: the model file a fake engine's test loads
    (it passes the checks the chat service makes before it unloads a model)."""
    writer = GGUFWriter(str(path), arch)
    writer.write_header_to_file()
    writer.write_kv_data_to_file()
    writer.write_tensors_to_file()
    writer.close()
    return path
