"""GGUF metadata: real files, llama.cpp's tokenizer defaults, split models, the cache, and
malformed files (each must give a clear GGUFError, never a crash or a silent misread)."""

from __future__ import annotations

import os
import shutil
import struct
from pathlib import Path

import pytest
from gguf import GGUFReader, GGUFValueType

from app.catalog import gguf_meta
from app.catalog.gguf_meta import GGUFInfo, inspect_gguf, load_vocab
from app.errors import GGUFError
from tests.catalog.ggufs import (
    patch,
    tensor_offset_field,
    token_list,
    u64,
    write_small_model,
    write_vocab_gguf,
)
from tests.synthetic import write_tiny_llama


def test_gemma_metadata(gemma_path: Path) -> None:
    info = inspect_gguf(gemma_path)
    assert info.name == "Gemma 3 270m"
    assert info.architecture == "gemma3"
    assert info.model_type == "model"
    assert info.quantization == "Q4_K_M"
    assert info.file_size == gemma_path.stat().st_size
    assert info.context_length == 32768
    assert (info.tokenizer_model, info.vocab_type, info.n_vocab) == ("llama", "SPM", 262144)
    assert (info.bos_id, info.eos_id, info.add_bos, info.add_eos) == (2, 1, True, False)
    assert info.has_chat_template is False
    assert info.split_count == 1 and info.split_paths == (str(gemma_path),)
    assert info.size_label == "270M"
    assert 260e6 < (info.parameter_count or 0) < 280e6


def test_smollm_metadata(smollm_path: Path) -> None:
    info = inspect_gguf(smollm_path)
    assert info.architecture == "llama"
    assert info.quantization == "Q4_1"
    assert (info.tokenizer_model, info.tokenizer_pre, info.vocab_type, info.n_vocab) == ("gpt2", "smollm", "BPE", 49152)
    assert (info.bos_id, info.eos_id, info.add_bos, info.add_eos) == (1, 2, False, False)
    assert info.has_chat_template is True
    assert info.context_length == 8192


def test_token_texts_and_fields_match_the_stock_reader(smollm_path: Path) -> None:
    """Our header reader must read exactly what gguf's own GGUFReader reads."""
    stock = GGUFReader(smollm_path)
    tokens = [t.encode("utf-8") for t in stock.fields["tokenizer.ggml.tokens"].contents()]
    vocab = load_vocab(smollm_path, use_cache=False)
    assert vocab.token_texts(0, len(tokens)) == tokens
    assert vocab.info.n_tensors == len(stock.tensors)
    assert vocab.info.parameter_count == sum(int(t.n_elements) for t in stock.tensors)
    assert vocab.info.context_length == stock.fields["llama.context_length"].contents()


def test_gemma_vocab_is_fast_from_the_cache(gemma_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    first = load_vocab(gemma_path)
    calls: list[object] = []
    monkeypatch.setattr(gguf_meta, "_parse_local", lambda parts: calls.append(parts) or pytest.fail("parsed again"))
    again = load_vocab(gemma_path)
    assert calls == []
    assert again.info == first.info
    assert again.token_texts(0, 262144) == first.token_texts(0, 262144)
    assert again.token_texts(0, 3) == [b"<pad>", b"<eos>", b"<bos>"]


def test_cache_is_invalidated_when_the_file_changes(tmp_path: Path) -> None:
    path = write_vocab_gguf(tmp_path / "m.gguf", 300)
    assert load_vocab(path).n_vocab == 300
    os.utime(path, ns=(1_000_000_000, 1_000_000_000))
    write_vocab_gguf(path, 400)
    os.utime(path, ns=(2_000_000_000, 2_000_000_000))
    assert load_vocab(path).n_vocab == 400
    assert inspect_gguf(path).n_vocab == 400


def test_a_broken_cache_database_is_ignored(tmp_path: Path) -> None:
    path = write_vocab_gguf(tmp_path / "m.gguf", 300)
    cache = gguf_meta._cache_path()
    cache.write_bytes(b"this is not sqlite" * 100)
    assert inspect_gguf(path).n_vocab == 300


@pytest.mark.parametrize(
    ("kwargs", "expected"),
    [
        # llama.cpp defaults per tokenizer model when no BOS/EOS/add keys are present
        (dict(model="llama"), ("SPM", 1, 2, True, False)),
        (dict(model="gpt2", pre="default"), ("BPE", 11, 11, False, False)),
        (dict(model="gpt2", pre="llama-bpe"), ("BPE", 11, 11, True, False)),
        (dict(model="gpt2", pre="tekken"), ("BPE", 11, 11, True, False)),
        (dict(model="gpt2", pre="chatglm-bpe"), ("BPE", None, 11, False, False)),
        (dict(model="bert"), ("WPM", 101, None, True, False)),
        (dict(model="t5"), ("UGM", None, 1, False, True)),
        (dict(model="rwkv"), ("RWKV", None, None, False, False)),
        (dict(model="plamo2"), ("PLaMo2", 1, 2, False, False)),
        # keys override the defaults
        (dict(model="llama", bos=7, eos=9, add_bos=False, add_eos=True), ("SPM", 7, 9, False, True)),
        # an out-of-range id in a key keeps the default
        (dict(model="gpt2", pre="qwen2", bos=151643, eos=151645), ("BPE", 11, 11, False, False)),
        (dict(model="llama", bos=99999), ("SPM", 1, 2, True, False)),
        # Gemma 4's override turns add_bos on whatever the key says
        (dict(model="gemma4", add_bos=False), ("BPE", None, None, True, False)),
    ],
)
def test_tokenizer_defaults_follow_llama_cpp(tmp_path: Path, kwargs: dict[str, object], expected: tuple[object, ...]) -> None:
    path = write_vocab_gguf(tmp_path / "v.gguf", 512, **kwargs)  # type: ignore[arg-type]
    info = inspect_gguf(path)
    assert (info.vocab_type, info.bos_id, info.eos_id, info.add_bos, info.add_eos) == expected


def test_qwen_like_ids_inside_the_vocabulary_are_kept(tmp_path: Path) -> None:
    path = write_vocab_gguf(tmp_path / "q.gguf", 151936, model="gpt2", pre="qwen2", bos=151643, eos=151645, add_bos=False)
    info = inspect_gguf(path)
    assert (info.bos_id, info.eos_id, info.add_bos) == (151643, 151645, False)


def test_default_ids_outside_a_tiny_vocabulary_are_disabled(tmp_path: Path) -> None:
    info = inspect_gguf(write_vocab_gguf(tmp_path / "t.gguf", 2, model="llama"))
    assert (info.bos_id, info.eos_id) == (1, None)


def test_no_vocab_and_missing_tokenizer(tmp_path: Path) -> None:
    info = inspect_gguf(
        write_vocab_gguf(tmp_path / "n.gguf", 0, model="no_vocab", extra={"llama.vocab_size": (1000, GGUFValueType.UINT32)})
    )
    assert (info.vocab_type, info.n_vocab, info.bos_id, info.add_bos) == ("none", 1000, None, False)
    bare = inspect_gguf(write_vocab_gguf(tmp_path / "b.gguf", 0, model=None))
    assert (bare.vocab_type, bare.n_vocab) == ("none", 0)


def test_empty_token_reads_as_llama_cpp_shows_it(tmp_path: Path) -> None:
    toks = token_list(16)
    toks[9] = b""
    vocab = load_vocab(write_vocab_gguf(tmp_path / "e.gguf", toks))
    assert vocab.token_texts(8, 11) == [toks[8], b"[EMPTY_9]", toks[10]]


def test_metadata_fields(tmp_path: Path) -> None:
    path = write_vocab_gguf(
        tmp_path / "f.gguf", 64, name="My Model", chat_template="{{ messages }}", context_length=131072,
        file_type=15, general_type="model",
    )
    info = inspect_gguf(path)
    assert (info.name, info.quantization, info.context_length, info.has_chat_template) == (
        "My Model", "Q4_K_M", 131072, True)
    assert GGUFInfo.from_dict(info.to_dict()) == info


def test_quantization_without_file_type_is_the_dominant_tensor_type(tmp_path: Path) -> None:
    path = write_tiny_llama(tmp_path / "tiny.gguf")
    with_key = inspect_gguf(path)
    assert with_key.quantization == "F32"  # ALL_F32 in general.file_type


def test_split_model_is_one_model(tmp_path: Path) -> None:
    (tmp_path / "one").mkdir()
    whole = write_small_model(tmp_path / "one" / "small.gguf")
    parts = write_small_model(tmp_path / "small.gguf", split_max_tensors=3)
    assert [p.name for p in parts] == [f"small-0000{i}-of-00003.gguf" for i in (1, 2, 3)]
    info = inspect_gguf(parts[0])
    assert info.split_count == 3
    assert info.split_paths == tuple(str(p) for p in parts)
    assert info.file_size == sum(p.stat().st_size for p in parts)
    assert info.parameter_count == inspect_gguf(whole[0]).parameter_count
    assert inspect_gguf(parts[1]) == info  # any part names the whole model
    parts[2].unlink()
    with pytest.raises(GGUFError, match=r"part 3 \(small-00003-of-00003.gguf\) is missing"):
        inspect_gguf(parts[0], use_cache=False)


def test_renamed_split_part_is_reported(tmp_path: Path) -> None:
    parts = write_small_model(tmp_path / "small.gguf", split_max_tensors=3)
    renamed = parts[0].rename(tmp_path / "renamed.gguf")
    with pytest.raises(GGUFError, match="split into 3 files"):
        inspect_gguf(renamed)


# --------------------------------------------------------------------------- malformed files


@pytest.fixture
def tiny(tmp_path: Path) -> Path:
    return write_tiny_llama(tmp_path / "tiny.gguf", n_vocab=300)


def _tokens_array_len_offset(path: Path) -> int:
    r = GGUFReader(path)
    f = r.fields["tokenizer.ggml.tokens"]
    key_len = int(f.parts[0][0])
    off = f.offset + 8 + key_len + 4 + 4  # key, value type, item type → array length
    del r
    return off


def _malformed_cases() -> list[tuple[str, object, str]]:
    def empty(p: Path) -> None:
        p.write_bytes(b"")

    def short(p: Path) -> None:
        p.write_bytes(b"GGU")

    def truncated_header(p: Path) -> None:
        p.write_bytes(p.read_bytes()[:300])

    def truncated_in_vocab(p: Path) -> None:
        p.write_bytes(p.read_bytes()[:2000])

    def truncated_data(p: Path) -> None:
        data = p.read_bytes()
        p.write_bytes(data[: len(data) - 1000])

    def wrong_magic(p: Path) -> None:
        patch(p, 0, b"GGML")

    def bad_version(p: Path) -> None:
        patch(p, 4, struct.pack("<I", 1))

    def absurd_string(p: Path) -> None:
        patch(p, 24, u64(2**62))

    def absurd_tensor_count(p: Path) -> None:
        patch(p, 8, u64(2**40))

    def absurd_kv_count(p: Path) -> None:
        patch(p, 16, u64(2**40))

    def absurd_array(p: Path) -> None:
        patch(p, _tokens_array_len_offset(p), u64(2**50))

    def tensor_outside(p: Path) -> None:
        patch(p, tensor_offset_field(p, 3), u64(1 << 30))

    def tensor_misaligned(p: Path) -> None:
        off = tensor_offset_field(p, 3)
        value = struct.unpack("<Q", p.read_bytes()[off:off + 8])[0]
        patch(p, off, u64(value + 4))

    def tensor_overlap(p: Path) -> None:
        first = struct.unpack("<Q", p.read_bytes()[tensor_offset_field(p, 0):][:8])[0]
        patch(p, tensor_offset_field(p, 1), u64(first))

    def bad_value_type(p: Path) -> None:
        # the first key is general.architecture: its value type follows the key text
        key_len = struct.unpack("<Q", p.read_bytes()[24:32])[0]
        patch(p, 32 + key_len, struct.pack("<I", 77))

    return [
        ("empty", empty, "empty"),
        ("short", short, "only 3 bytes"),
        ("truncated header", truncated_header, "truncated or corrupt"),
        ("truncated in the vocabulary", truncated_in_vocab, "truncated or corrupt"),
        ("truncated data", truncated_data, "lies outside the file"),
        ("wrong magic", wrong_magic, "GGUF magic"),
        ("unsupported version", bad_version, "version 1"),
        ("absurd string length", absurd_string, "claims 4611686018427387904 bytes, past the end"),
        ("absurd tensor count", absurd_tensor_count, "claims 1099511627776 tensors"),
        ("absurd key count", absurd_kv_count, "claims 1099511627776 metadata keys"),
        ("absurd array length", absurd_array, "claims 1125899906842624 items"),
        ("tensor offset outside", tensor_outside, "lies outside the file"),
        ("tensor offset misaligned", tensor_misaligned, "not a multiple of the alignment"),
        ("tensor offsets overlap", tensor_overlap, "overlap"),
        ("unknown value type", bad_value_type, "unknown value type 77"),
    ]


@pytest.mark.parametrize(("label", "corrupt", "message"), _malformed_cases(), ids=[c[0] for c in _malformed_cases()])
def test_malformed_files_raise_a_clear_error(tiny: Path, label: str, corrupt: object, message: str) -> None:
    corrupt(tiny)  # type: ignore[operator]
    with pytest.raises(GGUFError) as err:
        inspect_gguf(tiny, use_cache=False)
    text = str(err.value)
    assert text.startswith("tiny.gguf is not a usable GGUF file:"), text
    assert message in text, text
    with pytest.raises(GGUFError):
        load_vocab(tiny)


def test_the_stock_reader_misses_what_we_catch(tiny: Path) -> None:
    """Why the checks exist: gguf's GGUFReader reads a misaligned tensor without a word
    (llama.cpp refuses such a file)."""
    off = tensor_offset_field(tiny, 3)
    value = struct.unpack("<Q", tiny.read_bytes()[off:off + 8])[0]
    patch(tiny, off, u64(value + 4))
    assert len(GGUFReader(tiny).tensors) == 21  # no error
    with pytest.raises(GGUFError, match="alignment"):
        inspect_gguf(tiny)


def test_missing_file_and_directory(tmp_path: Path) -> None:
    with pytest.raises(GGUFError, match="not found"):
        inspect_gguf(tmp_path / "nope.gguf")
    with pytest.raises(GGUFError, match="is a folder, not a GGUF file"):
        inspect_gguf(tmp_path)  # what it is instead, as generate says


def test_remote_prefix_parse_asks_for_more(smollm_path: Path, tmp_path: Path) -> None:
    """parse_gguf_head on a prefix says how much it needs; on enough bytes it parses."""
    total = smollm_path.stat().st_size
    size = 64 << 10
    rounds = 0
    while True:
        with smollm_path.open("rb") as f:
            head = f.read(size)  # bytes: no temporary file
        try:
            vocab = gguf_meta.parse_gguf_head(head, total, "acme/smol/smol.gguf")
            break
        except gguf_meta.IncompleteHeaderError as more:
            assert more.needed > size
            size = more.needed + (32 << 10)
            rounds += 1
    assert rounds <= 6
    assert size < 0.05 * total
    local = load_vocab(smollm_path)
    assert vocab.info.n_vocab == local.n_vocab
    assert vocab.token_texts(0, local.n_vocab) == local.token_texts(0, local.n_vocab)
    assert vocab.info.path == "acme/smol/smol.gguf"


def test_copy_with_other_name_has_its_own_cache_entry(tmp_path: Path) -> None:
    small = write_vocab_gguf(tmp_path / "a.gguf", 100)
    other = tmp_path / "b.gguf"
    shutil.copy(small, other)
    assert inspect_gguf(small).path == str(small)
    assert inspect_gguf(other).path == str(other)


def test_a_big_endian_file_reads_like_its_little_endian_twin(tmp_path: Path) -> None:
    """The header reader follows the byte order the file announces, as gguf's does."""
    from gguf import GGUFEndian

    little = load_vocab(write_vocab_gguf(tmp_path / "le.gguf", 300, bos=1), use_cache=False)
    big = load_vocab(write_vocab_gguf(tmp_path / "be.gguf", 300, bos=1, endian=GGUFEndian.BIG),
                     use_cache=False)
    assert big.info.context_length == little.info.context_length == 4096
    assert (big.bos_id, big.n_vocab, big.info.vocab_type) == (little.bos_id, little.n_vocab, "SPM")
    assert big.token_texts(0, 300) == little.token_texts(0, 300) == token_list(300)


@pytest.mark.parametrize(("head", "words"), [
    (b"version https://git-lfs.github.com/spec/v1\noid sha256:", "Git LFS pointer"),
    (b"<!DOCTYPE html><html>", "web page"),
    (b"PK\x03\x04\x14\x00", "zip archive"),
    (b'{"architectures": ["LlamaForCausalLM"]}', "JSON text"),
    (b"\x10\x02\x00\x00\x00\x00\x00\x00{\"__metadata__\"", "safetensors"),
    (b"this is a text file, and more", "it is text (it starts \u201cthis is a text file, and\u201d)"),
    (b"\x00\x01\x02\x03rest", "starts with the bytes 00 01 02 03"),
    (b"\x89PNG\r\n", "starts with the bytes 89 50 4e 47"),
    (b'{\x00\x00\x00\x00\x00\x00\x00{"__metadata__"', "safetensors"),  # its length's low byte "{"
])
def test_a_file_that_is_no_gguf_is_named_for_what_it_is(tmp_path: Path, head: bytes,
                                                         words: str) -> None:
    """A model folder often holds what is mistaken for the model: the error says what
    the file seems to be instead of showing its first bytes as Python bytes."""
    p = tmp_path / "model.gguf"
    p.write_bytes(head + b"\x00" * 64)
    with pytest.raises(GGUFError) as exc:
        inspect_gguf(p, use_cache=False)
    message = str(exc.value)
    assert message.startswith("model.gguf is not a usable GGUF file: it does not start with")
    assert words in message and "b'" not in message
