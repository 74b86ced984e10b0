"""SmolLM2's GGUF (Q4_1) as a Hugging Face folder vLLM loads: float32 weights in model.safetensors, config.json
without the GGUF quantization block, the tokenizer and its chat template. Run with the vLLM tier's Python (it has
transformers, gguf and accelerate): `python scripts/gguf-to-safetensors.py MODEL.gguf OUT_DIR`.

`save_pretrained` refuses a model loaded from a quantized GGUF, so the state dict is written with safetensors
directly; tied embeddings keep one copy, as the checkpoint on the hub does.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

from safetensors.torch import save_file
from transformers import AutoModelForCausalLM, AutoTokenizer


def main() -> None:
    src, out = Path(sys.argv[1]), Path(sys.argv[2])
    part = out.with_name(out.name + ".part")
    part.mkdir(parents=True, exist_ok=True)
    tokenizer = AutoTokenizer.from_pretrained(src.parent, gguf_file=src.name)
    model = AutoModelForCausalLM.from_pretrained(src.parent, gguf_file=src.name, torch_dtype="float32")
    weights = {k: v.contiguous() for k, v in model.state_dict().items()}
    if model.config.tie_word_embeddings:
        weights.pop("lm_head.weight", None)
    save_file(weights, part / "model.safetensors", metadata={"format": "pt"})
    config = model.config.to_dict()
    config.pop("quantization_config", None)
    (part / "config.json").write_text(json.dumps(config, indent=1), encoding="utf-8")
    tokenizer.save_pretrained(part)
    part.rename(out)  # whole, or not there: a cut conversion is redone
    print(f"{out}: {sum(v.numel() for v in weights.values()):,} parameters")


if __name__ == "__main__":
    main()
