#!/usr/bin/env python3
"""Turn a golden F32 GGUF (tests/data/golden) back into a Hugging Face checkpoint folder, without
torch: config.json (from the manifest's config), model.safetensors (or 2 shards + index), a tiny
byte-level BPE tokenizer (tokenizer.json, tokenizer_config.json) and generation_config.json.

The GGUF tensors are renamed to HF names and the llama Q/K row permutation is undone, so
`lmfuse convert` of the folder must reproduce the golden GGUF's tensors byte for byte (the golden
quantized files were made from the same float32 values with the gguf package's quantizers).

usage: gguf_to_hf.py GGUF OUT_DIR [--manifest M] [--shards 2] [--dtype f32|f16|bf16] [--no-tokenizer]
needs: numpy, gguf, safetensors (PyPI)
"""
import argparse
import collections
import json
import pathlib
import sys

import numpy as np
import gguf
from safetensors.numpy import save_file

HF_ARCH = {"qwen3": ("Qwen3ForCausalLM", "qwen3"), "qwen2": ("Qwen2ForCausalLM", "qwen2"),
           "llama": ("LlamaForCausalLM", "llama")}
GGUF_TO_HF_BLOCK = {  # llama.cpp per-block names -> HF suffixes
    "attn_norm.weight": "input_layernorm.weight",
    "attn_q.weight": "self_attn.q_proj.weight", "attn_q.bias": "self_attn.q_proj.bias",
    "attn_k.weight": "self_attn.k_proj.weight", "attn_k.bias": "self_attn.k_proj.bias",
    "attn_v.weight": "self_attn.v_proj.weight", "attn_v.bias": "self_attn.v_proj.bias",
    "attn_q_norm.weight": "self_attn.q_norm.weight", "attn_k_norm.weight": "self_attn.k_norm.weight",
    "attn_output.weight": "self_attn.o_proj.weight", "ffn_norm.weight": "post_attention_layernorm.weight",
    "ffn_gate.weight": "mlp.gate_proj.weight", "ffn_up.weight": "mlp.up_proj.weight",
    "ffn_down.weight": "mlp.down_proj.weight",
}
GGUF_TO_HF_TOP = {"token_embd.weight": "model.embed_tokens.weight", "output_norm.weight": "model.norm.weight",
                  "output.weight": "lm_head.weight"}
SPECIALS = ["<|endoftext|>", "<|im_start|>", "<|im_end|>"]
CHAT_TEMPLATE = ("{% for message in messages %}<|im_start|>{{ message['role'] }}\n{{ message['content'] }}"
                 "<|im_end|>\n{% endfor %}{% if add_generation_prompt %}<|im_start|>assistant\n{% endif %}")
TRAIN_TEXT = ("the quick brown fox jumps over the lazy dog. the cat sat on the mat, and the dog sat on "
              "the log. hello world! this is a test of the tokenizer: there are then these and those. ") * 4


def hf_name(g: str) -> str:
    if g in GGUF_TO_HF_TOP:
        return GGUF_TO_HF_TOP[g]
    _, layer, rest = g.split(".", 2)
    return f"model.layers.{layer}.{GGUF_TO_HF_BLOCK[rest]}"


def llama_unpermute(w: np.ndarray, n_head: int) -> np.ndarray:
    """Inverse of convert_hf_to_gguf's LlamaModel.permute: rows (2i, 2i+1) of each head go back
    to HF's rotate-half rows (i, i + d/2)."""
    return w.reshape(n_head, w.shape[0] // n_head // 2, 2, *w.shape[1:]).swapaxes(1, 2).reshape(w.shape)


def bytes_to_unicode() -> dict[int, str]:
    """GPT-2's byte -> printable character table used by byte-level BPE."""
    bs = list(range(ord("!"), ord("~") + 1)) + list(range(ord("¡"), ord("¬") + 1)) + list(range(ord("®"), ord("ÿ") + 1))
    cs = bs[:]
    n = 0
    for b in range(256):
        if b not in bs:
            bs.append(b)
            cs.append(256 + n)
            n += 1
    return {b: chr(c) for b, c in zip(bs, cs)}


def train_merges(n_merges: int) -> list[tuple[str, str]]:
    """A few BPE merges learned greedily on a fixed text (words with their leading space, as the
    GPT-2 pre-tokenizer splits them), so the tokenizer has real multi-byte tokens."""
    b2u = bytes_to_unicode()
    words = collections.Counter()
    for i, w in enumerate(TRAIN_TEXT.split(" ")):
        if w:
            words[tuple(b2u[b] for b in ((" " if i else "") + w).encode())] += 1
    merges = []
    for _ in range(n_merges):
        pairs = collections.Counter()
        for w, c in words.items():
            for a, b in zip(w, w[1:]):
                pairs[(a, b)] += c
        if not pairs:
            break
        best = max(sorted(pairs), key=lambda p: pairs[p])  # ties: lexicographically first
        merges.append(best)
        new = collections.Counter()
        for w, c in words.items():
            out, i = [], 0
            while i < len(w):
                if i + 1 < len(w) and (w[i], w[i + 1]) == best:
                    out.append(w[i] + w[i + 1])
                    i += 2
                else:
                    out.append(w[i])
                    i += 1
            new[tuple(out)] += c
        words = new
    return merges


def write_tokenizer(out: pathlib.Path, n_vocab: int) -> dict:
    """Byte-level BPE with 256 byte tokens, merges, and up to 3 special tokens, leaving 4 ids of
    the embedding unused when there is room (the converter pads the vocabulary to n_vocab)."""
    room = n_vocab - 256
    specials = SPECIALS if room >= len(SPECIALS) else []
    n_merges = max(0, room - len(specials) - 4)
    b2u = bytes_to_unicode()
    vocab = {b2u[b]: b for b in range(256)}
    merges = train_merges(n_merges)
    for a, b in merges:
        vocab.setdefault(a + b, len(vocab))
    added = [{"id": len(vocab) + i, "content": s, "single_word": False, "lstrip": False, "rstrip": False,
              "normalized": False, "special": True} for i, s in enumerate(specials)]
    byte_level = {"type": "ByteLevel", "add_prefix_space": False, "trim_offsets": True, "use_regex": True}
    tok = {
        "version": "1.0", "truncation": None, "padding": None, "added_tokens": added, "normalizer": None,
        "pre_tokenizer": byte_level, "post_processor": dict(byte_level, trim_offsets=False),
        "decoder": byte_level,
        "model": {"type": "BPE", "dropout": None, "unk_token": None, "continuing_subword_prefix": "",
                  "end_of_word_suffix": "", "fuse_unk": False, "byte_fallback": False, "ignore_merges": False,
                  "vocab": vocab, "merges": [[a, b] for a, b in merges]},
    }
    (out / "tokenizer.json").write_text(json.dumps(tok, ensure_ascii=False, indent=1))
    cfg = {"add_bos_token": False, "bos_token": None, "model_max_length": 512, "tokenizer_class": "PreTrainedTokenizerFast"}
    if specials:
        cfg.update(eos_token="<|im_end|>", pad_token="<|endoftext|>", chat_template=CHAT_TEMPLATE)
    (out / "tokenizer_config.json").write_text(json.dumps(cfg, indent=1))
    return {"n_tokens": len(vocab) + len(added), "specials": {s: a["id"] for s, a in zip(specials, added)}}


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("gguf")
    ap.add_argument("out")
    ap.add_argument("--manifest", help="manifest.json (default: next to the GGUF)")
    ap.add_argument("--shards", type=int, default=1, help="number of safetensors files (1 or more)")
    ap.add_argument("--dtype", default="f32", choices=["f32", "f16", "bf16"])
    ap.add_argument("--no-tokenizer", action="store_true")
    a = ap.parse_args(argv)

    src = pathlib.Path(a.gguf)
    manifest = json.loads(pathlib.Path(a.manifest or src.parent / "manifest.json").read_text())
    case = next(c for c in manifest["cases"] if c["gguf"] == src.name)
    s = case["config"]
    if case["weight_type"] != "f32":
        sys.exit(f"{src}: expected an f32 golden file, got {case['weight_type']}")

    r = gguf.GGUFReader(str(src))
    tensors = {}
    for t in r.tensors:
        if t.name == "rope_freqs.weight":  # derived from config.json's rope_scaling, not a checkpoint tensor
            continue
        w = np.array(t.data, dtype=np.float32).reshape([int(x) for x in reversed(t.shape)])
        name = hf_name(t.name)
        if s["arch"] == "llama" and name.endswith(("q_proj.weight", "q_proj.bias")):
            w = llama_unpermute(w, s["n_head"])
        if s["arch"] == "llama" and name.endswith(("k_proj.weight", "k_proj.bias")):
            w = llama_unpermute(w, s["n_head_kv"])
        if a.dtype == "f16":
            w = w.astype(np.float16)
        elif a.dtype == "bf16":  # round to nearest even, as the gguf package and torch do
            u = w.view(np.uint32).astype(np.uint64)
            w = ((u + 0x7FFF + ((u >> 16) & 1)) >> 16).astype(np.uint16)
        tensors[name] = np.ascontiguousarray(w)

    out = pathlib.Path(a.out)
    out.mkdir(parents=True, exist_ok=True)
    hf, mt = HF_ARCH[s["arch"]]
    torch_dtype = {"f32": "float32", "f16": "float16", "bf16": "bfloat16"}[a.dtype]
    cfg = {
        "architectures": [hf], "model_type": mt, "vocab_size": s["n_vocab"], "hidden_size": s["n_embd"],
        "num_hidden_layers": s["n_layer"], "num_attention_heads": s["n_head"], "num_key_value_heads": s["n_head_kv"],
        "intermediate_size": s["n_ff"], "max_position_embeddings": s["n_ctx"], "rms_norm_eps": s["rms_eps"],
        "rope_theta": s["rope_theta"], "rope_scaling": None, "tie_word_embeddings": s["tied"], "hidden_act": "silu",
        "torch_dtype": torch_dtype, "bos_token_id": None, "eos_token_id": 0,
    }
    if s.get("rope_llama3"):  # Llama 3.1's config.json form (transformers 4.x)
        factor, low, high, old_ctx = s["rope_llama3"]
        cfg["rope_scaling"] = {"rope_type": "llama3", "factor": factor, "low_freq_factor": low,
                               "high_freq_factor": high, "original_max_position_embeddings": old_ctx}
    if s["config_has_head_dim"]:
        cfg["head_dim"] = s["head_dim"]
    if s["arch"] != "qwen2":
        cfg["attention_bias"] = False
    (out / "config.json").write_text(json.dumps(cfg, indent=1))
    (out / "generation_config.json").write_text(json.dumps({"eos_token_id": [0, 1], "do_sample": False}, indent=1))

    if not a.no_tokenizer:
        write_tokenizer(out, s["n_vocab"])

    # safetensors numpy has no bfloat16: write BF16 as uint16 bits, then patch the header dtype.
    names = list(tensors)
    if a.shards <= 1:
        parts = [("model.safetensors", names)]
    else:
        k = (len(names) + a.shards - 1) // a.shards
        parts = [(f"model-{i + 1:05d}-of-{a.shards:05d}.safetensors", names[i * k:(i + 1) * k]) for i in range(a.shards)]
    weight_map = {}
    for fname, part in parts:
        save_file({n: tensors[n] for n in part}, str(out / fname), metadata={"format": "pt"})
        if a.dtype == "bf16":
            patch_dtype(out / fname, "U16", "BF16")
        weight_map.update({n: fname for n in part})
    if a.shards > 1:
        total = sum(t.nbytes for t in tensors.values())
        (out / "model.safetensors.index.json").write_text(
            json.dumps({"metadata": {"total_size": total}, "weight_map": weight_map}, indent=1))
    return 0


def patch_dtype(path: pathlib.Path, old: str, new: str) -> None:
    """Rewrite the dtype strings in a safetensors header. Data offsets are relative to the data
    section, so the header may change length (it is re-padded to 8 bytes with spaces)."""
    b = path.read_bytes()
    n = int.from_bytes(b[:8], "little")
    h = json.loads(b[8:8 + n])
    for k, v in h.items():
        if k != "__metadata__" and v["dtype"] == old:
            v["dtype"] = new
    hb = json.dumps(h, separators=(",", ":")).encode()
    hb += b" " * (-len(hb) % 8)
    path.write_bytes(len(hb).to_bytes(8, "little") + hb + b[8 + n:])


if __name__ == "__main__":
    sys.exit(main())
