#!/usr/bin/env python3
"""Reference (de)quantization through the `gguf` PyPI package, for lmfuse's bit-exactness tests.

  quant_ref.py check                                  exit 0 if `import gguf` works, else 3
  quant_ref.py quantize   TYPE IN.f32 OUT.bin         raw little-endian f32 in, GGUF row bytes out
  quant_ref.py dequantize TYPE IN.bin N OUT.f32       GGUF row bytes of N elements in, f32 out
TYPE is one of f32, f16, bf16, q8_0, q4_0, q4_1, q5_0, q5_1, q2_k, q3_k, q4_k, q5_k, q6_k,
iq4_nl, iq4_xs (any case). gguf has no quantizer for the K-quants and IQ4 types: for those only
`dequantize` works (quantize exits 4). Rows are split per block (32 or 256 elements).
"""
import sys

try:
    import numpy as np
    from gguf import GGMLQuantizationType as T
    from gguf.constants import GGML_QUANT_SIZES
    from gguf.quants import quantize, dequantize
except Exception as e:  # the test skips on this code
    print(f"quant_ref.py: cannot import gguf: {e}", file=sys.stderr)
    sys.exit(3)

TYPES = {"f32": T.F32, "f16": T.F16, "bf16": T.BF16, "q8_0": T.Q8_0, "q4_0": T.Q4_0, "q4_1": T.Q4_1,
         "q5_0": T.Q5_0, "q5_1": T.Q5_1, "q2_k": T.Q2_K, "q3_k": T.Q3_K, "q4_k": T.Q4_K,
         "q5_k": T.Q5_K, "q6_k": T.Q6_K, "iq4_nl": T.IQ4_NL, "iq4_xs": T.IQ4_XS}
# Types whose quantization is not in gguf (lmfuse's own quantizer is tested by error bounds).
NO_QUANTIZER = {T.Q2_K, T.Q3_K, T.Q4_K, T.Q5_K, T.Q6_K, T.IQ4_NL, T.IQ4_XS}


def main(argv):
    if argv[1] == "check":
        return 0
    op, qt = argv[1], TYPES[argv[2].lower()]
    block = GGML_QUANT_SIZES[qt][0] if qt not in (T.F32, T.F16) else 1
    if op == "quantize":
        if qt in NO_QUANTIZER:
            print(f"quant_ref.py: gguf has no quantizer for {qt.name}", file=sys.stderr)
            return 4
        x = np.fromfile(argv[3], dtype=np.float32)
        # One row per 32 elements (or per block) keeps the layout independent of the row length.
        q = quantize(x.reshape(-1, max(block, 32)), qt)
        np.ascontiguousarray(q).view(np.uint8).tofile(argv[4])
    elif op == "dequantize":
        raw = np.fromfile(argv[3], dtype=np.uint8)
        n = int(argv[4])
        if qt == T.F32:
            y = raw.view(np.float32)
        elif qt == T.F16:
            y = raw.view(np.float16).astype(np.float32)
        else:
            y = dequantize(raw.reshape(n // max(block, 32), -1), qt)
        np.asarray(y, dtype=np.float32).reshape(-1).tofile(argv[5])
    else:
        raise SystemExit(f"unknown op {op}")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
