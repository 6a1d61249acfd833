#!/usr/bin/env python3
"""Reference (de)quantization through the `gguf` PyPI package, for lmfuse's bit-exactness tests.

  quant_ref.py check                                  exit 0 if `import gguf` works, else 3
  quant_ref.py quantize   TYPE IN.f32 OUT.bin         raw little-endian f32 in, GGUF row bytes out
  quant_ref.py dequantize TYPE IN.bin N OUT.f32       GGUF row bytes of N elements in, f32 out
TYPE is one of f32, f16, bf16, q8_0, q4_0, q4_1.
"""
import sys

try:
    import numpy as np
    from gguf import GGMLQuantizationType as T
    from gguf.quants import quantize, dequantize
except Exception as e:  # the test skips on this code
    print(f"quant_ref.py: cannot import gguf: {e}", file=sys.stderr)
    sys.exit(3)

TYPES = {"f32": T.F32, "f16": T.F16, "bf16": T.BF16, "q8_0": T.Q8_0, "q4_0": T.Q4_0, "q4_1": T.Q4_1}


def main(argv):
    if argv[1] == "check":
        return 0
    op, qt = argv[1], TYPES[argv[2]]
    if op == "quantize":
        x = np.fromfile(argv[3], dtype=np.float32)
        # One row per 32 elements keeps the layout independent of the caller's row length.
        q = quantize(x.reshape(-1, 32), qt)
        np.ascontiguousarray(q).view(np.uint8).tofile(argv[4])
    elif op == "dequantize":
        raw = np.fromfile(argv[3], dtype=np.uint8)
        n = int(argv[4])
        if qt == T.F32:
            y = raw.view(np.float32)
        elif qt == T.F16:
            y = raw.view(np.float16).astype(np.float32)
        else:
            y = dequantize(raw.reshape(n // 32, -1), qt)
        np.asarray(y, dtype=np.float32).reshape(-1).tofile(argv[5])
    else:
        raise SystemExit(f"unknown op {op}")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
