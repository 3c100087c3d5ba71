"""Turn a GGUF into a Hugging Face folder that vLLM can serve (vLLM 0.32 loads no GGUF).

Run with the vLLM virtual environment's Python (``transformers``, ``torch``, ``accelerate``
and ``gguf`` installed there; bench/vllm_contract.sh sets it up):

    /work/vllm-venv/bin/python bench/vllm_gguf_to_hf.py MODEL.gguf OUT_FOLDER

``transformers`` dequantizes the GGUF into float32 weights; the model is then made again
from its configuration without the GGUF quantization entry (so ``save_pretrained`` writes
plain safetensors that vLLM reads), the weights are loaded into it, and model and
tokenizer are saved. A folder that already holds ``config.json`` and weights is left as it is.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path


def convert(gguf: Path, out: Path) -> None:
    """Write ``out`` (config.json, model.safetensors, tokenizer files) from ``gguf``.

    Raises:
        FileNotFoundError: ``gguf`` does not exist.
    """
    import torch
    from transformers import AutoConfig, AutoModelForCausalLM, AutoTokenizer

    if not gguf.is_file():
        raise FileNotFoundError(gguf)
    if (out / "config.json").is_file() and any(out.glob("*.safetensors")):
        print(f"{out} already holds a model; left as it is")
        return
    folder, name = str(gguf.parent), gguf.name
    loaded = AutoModelForCausalLM.from_pretrained(folder, gguf_file=name, dtype=torch.float32)
    config = AutoConfig.from_pretrained(folder, gguf_file=name)
    if hasattr(config, "quantization_config"):
        del config.quantization_config
    plain = AutoModelForCausalLM.from_config(config, dtype=torch.float32)
    plain.load_state_dict(loaded.state_dict())
    out.mkdir(parents=True, exist_ok=True)
    plain.save_pretrained(out)
    AutoTokenizer.from_pretrained(folder, gguf_file=name).save_pretrained(out)
    print(f"wrote {out}")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("gguf", type=Path)
    parser.add_argument("out", type=Path)
    args = parser.parse_args(argv)
    convert(args.gguf, args.out)
    return 0


if __name__ == "__main__":
    sys.exit(main())
