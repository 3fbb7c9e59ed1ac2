"""ferry's block quantizer against onnxruntime's own (the one MatMulNBits' tools use,
quantize_matmul_4bits / quantize_matmul_8bits): the same codes, scales and zero points byte for
byte, for int4 and int8, symmetric and asymmetric, fp32 and fp16 scales, and blocks that test
the rounding points (ties between +v and -v, halves, zeros, one-signed blocks).

rtn_quantize is libferry's internal function (src/quant/rtn.h), called through ctypes: the
export path that streams it is covered by tests/c/test_weights.c; this file pins the arithmetic
to onnxruntime's.
"""

import ctypes
import os

import numpy as np
import pytest

from quant_ref import ort_quantize

FERRY_F32, FERRY_F16 = 1, 2   # include/ferry.h


@pytest.fixture(scope="module")
def rtn():
    lib = ctypes.CDLL(os.environ["FERRY_LIB"])
    fn = lib.rtn_quantize
    fn.restype = None
    fn.argtypes = [ctypes.c_void_p, ctypes.c_size_t, ctypes.c_size_t, ctypes.c_int, ctypes.c_int,
                   ctypes.c_int, ctypes.c_int, ctypes.c_void_p, ctypes.c_void_p, ctypes.c_void_p]
    return fn


def weights(rows, cols, seed):
    """[out, in] rows: random, then blocks built to hit every rounding point."""
    rng = np.random.default_rng(seed)
    w = (rng.standard_normal((rows, cols)) * 0.05).astype(np.float32)
    w[1] = np.tile(np.float32([1, -1, 0.5, -0.5]), cols // 4)          # symmetric ties
    w[2] = np.abs(w[2])                                                  # one-signed
    w[3] = -np.abs(w[3])
    w[4, : cols // 2] = 0                                                # zero blocks
    w[5] = np.round(w[5] * 64) / 64                                      # exact halves
    return w


def ferry_quantize(rtn, w, bits, block, symmetric, scale_dtype):
    rows, cols = w.shape
    blocks = -(-cols // block)
    codes = np.zeros(rows * cols * bits // 8, np.uint8)
    scales = np.zeros(rows * blocks, np.float16 if scale_dtype == FERRY_F16 else np.float32)
    zeros = np.zeros(rows * ((blocks * bits + 7) // 8), np.uint8)
    x = np.ascontiguousarray(w, np.float32)
    rtn(x.ctypes.data, rows, cols, bits, block, int(symmetric), scale_dtype, codes.ctypes.data,
        scales.ctypes.data, None if symmetric else zeros.ctypes.data)
    return codes, scales, zeros


def valid_codes(o_codes, shape, bits, block):
    """onnxruntime's rows of whole blocks cut to the row's own codes (ferry's unpadded rows)."""
    rows, cols = shape
    per_row = -(-cols // block) * block * bits // 8
    return o_codes.reshape(rows, per_row)[:, :cols * bits // 8].reshape(-1)


@pytest.mark.parametrize("bits", [4, 8])
@pytest.mark.parametrize("block", [32, 128])
@pytest.mark.parametrize("symmetric", [True, False], ids=["sym", "asym"])
@pytest.mark.parametrize("fp16", [False, True], ids=["fp32-scales", "fp16-scales"])
@pytest.mark.parametrize("cols", [384, 576], ids=["whole-blocks", "short-last-block"])
def test_same_bytes_as_onnxruntime(rtn, bits, block, symmetric, fp16, cols):
    """576 = SmolLM2's hidden size: 4.5 blocks of 128, 18 of 32."""
    w = weights(8, cols, seed=bits * 1000 + block)
    if fp16:
        w = w.astype(np.float16).astype(np.float32)   # onnxruntime quantizes fp16 weights
    codes, scales, zeros = ferry_quantize(rtn, w, bits, block, symmetric,
                                          FERRY_F16 if fp16 else FERRY_F32)
    o_codes, o_scales, o_zeros = ort_quantize(w, bits, block, symmetric, fp16)
    assert np.array_equal(scales.view(np.uint8), o_scales.view(np.uint8)), "scales differ"
    bad = np.flatnonzero(codes != valid_codes(o_codes, w.shape, bits, block))
    assert bad.size == 0, f"{bad.size} code bytes differ, first at {bad[:5]}"
    if not symmetric:
        assert np.array_equal(zeros, o_zeros), "zero points differ"
