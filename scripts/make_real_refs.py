#!/usr/bin/env python3
"""Reference logits of the real demo model (SmolLM2-135M-Instruct Q4_1 GGUF) from Hugging Face
transformers, which loads the GGUF and dequantizes it to float32. Run by hand (needs torch,
transformers, accelerate, gguf); the output is committed:
  tests/data/real/smollm2_ref.json   prompt, token ids, argmax per position, and the logits of
                                     the last position (float16, base64)."""
import base64, json, os, sys
import numpy as np
import torch
from transformers import AutoModelForCausalLM, AutoTokenizer

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
d = os.path.join(ROOT, "models")
f = "smollm2-135m-instruct-q4_1.gguf"
tok = AutoTokenizer.from_pretrained(d, gguf_file=f)
m = AutoModelForCausalLM.from_pretrained(d, gguf_file=f, torch_dtype=torch.float32)
prompt = "The capital of France is"
ids = tok(prompt)["input_ids"]
with torch.no_grad():
    logits = m(torch.tensor([ids])).logits[0].numpy().astype("<f4")
out = {
    "prompt": prompt,
    "tokens": ids,
    "argmax": [int(x) for x in logits.argmax(1)],
    "last_logits_f16_b64": base64.b64encode(logits[-1].astype("<f2").tobytes()).decode(),
    "n_vocab": int(logits.shape[1]),
    "versions": {"transformers": __import__("transformers").__version__, "torch": torch.__version__},
}
os.makedirs(os.path.join(ROOT, "tests/data/real"), exist_ok=True)
json.dump(out, open(os.path.join(ROOT, "tests/data/real/smollm2_ref.json"), "w"))
print(ids, out["argmax"])
