"""The reference for quantized exports: onnxruntime's own block quantizer (quantize_matmul_4bits /
_8bits, the tool behind MatMulNBits) and a numpy dequantization of its output. A quantized
export is checked against transformers' eager model whose weights are replaced by these
dequantized values, so ferry's quantization is judged by onnxruntime's arithmetic and
transformers' model, not by itself."""

import json
import shutil
from pathlib import Path

import numpy as np
from onnxruntime.capi import _pybind_state as ort_c

from conftest import read_safetensors, write_safetensors


def ort_quantize(w, bits, block, symmetric, fp16=False):
    """onnxruntime's MatMulNBits layout: B [N, k_blocks, blob], scales [N, k_blocks],
    zero points [N, ceil(k_blocks * bits / 8)], from the MatMul weight [K, N] = w.T; k_blocks =
    ceil(K / block) (a short last block's padding codes are left as zeros)."""
    n, k = w.shape
    k_blocks = -(-k // block)
    dt = np.float16 if fp16 else np.float32
    packed = np.zeros((n, k_blocks, block * bits // 8), np.uint8)
    scales = np.zeros((n, k_blocks), dt)
    zeros = np.zeros((n, (k_blocks * bits + 7) // 8), np.uint8)
    fn = ort_c.quantize_matmul_4bits if bits == 4 else ort_c.quantize_matmul_8bits
    fn(packed, np.ascontiguousarray(w.T.astype(dt)), scales, zeros, block, n, k, symmetric)
    return packed.reshape(-1), scales.reshape(-1), zeros.reshape(-1)


def _unpack(packed, bits, count):
    if bits == 8:
        return packed[:count].astype(np.float32)
    out = np.empty(packed.size * 2, np.float32)
    out[0::2] = packed & 0x0F
    out[1::2] = packed >> 4
    return out[:count]


def ort_dequantized(w, bits, block, symmetric):
    """w [out, in] float32 -> what onnxruntime's quantizer makes of it, dequantized."""
    n, k = w.shape
    k_blocks = -(-k // block)
    packed, scales, zeros = ort_quantize(np.asarray(w, np.float32), bits, block, symmetric)
    codes = _unpack(packed, bits, n * k_blocks * block).reshape(n, k_blocks, block)
    if symmetric:
        zp = np.full((n, k_blocks), 2 ** (bits - 1), np.float32)
    else:
        row = (k_blocks * bits + 7) // 8
        zp = np.stack([_unpack(zeros[r * row:(r + 1) * row], bits, k_blocks) for r in range(n)])
    full = ((codes - zp[..., None]) * scales.reshape(n, k_blocks, 1)).reshape(n, k_blocks * block)
    return full[:, :k]


def dequantized_checkpoint(src, dst, bits, block, symmetric, *, embeddings=False, lm_head=True,
                           whole_block_min=0):
    """Copies checkpoint `src` to `dst` with every weight ferry's quantizer takes replaced by its
    onnxruntime-dequantized value: the 2-D weights of linears (each expert's too, but no
    router; with `whole_block_min`, the format's, only those whose rows are whole blocks of
    it), the lm_head (unless lm_head is
    False) and the embedding table (if embeddings). A tied lm_head that is quantized while the
    embedding stays float becomes its own lm_head.weight, the tie cut in config.json."""
    src, dst = Path(src), Path(dst)
    shutil.copytree(src, dst)
    config = json.loads((src / "config.json").read_text())
    tensors = _read_f32(src / "model.safetensors")
    gpt2 = config["model_type"] == "gpt2"
    tied = config.get("tie_word_embeddings", gpt2)   # GPT2Config ties by default
    embed = "transformer.wte.weight" if gpt2 else "model.embed_tokens.weight"
    out = {}
    for name, t in tensors.items():
        # GPT-2's position table is an embedding, its Conv1Ds [in, out] (blocked along in); a
        # mixture's routers (its gate, Mixtral's block_sparse_moe.gate, Qwen2-MoE's shared
        # expert gate) stay float
        router = name.endswith((".mlp.gate.weight", ".block_sparse_moe.gate.weight",
                                ".shared_expert_gate.weight"))
        linear = t.ndim == 2 and not router and \
            name not in (embed, "lm_head.weight", "transformer.wpe.weight")
        conv1d = gpt2 and linear
        if whole_block_min:  # rows of no whole blocks stay float in such formats
            linear = linear and t.shape[0 if conv1d else 1] % whole_block_min == 0
        take = linear or (name == embed and embeddings) or (name == "lm_head.weight" and lm_head)
        out[name] = t if not take else ort_dequantized(t.T, bits, block, symmetric).T.copy() \
            if conv1d else ort_dequantized(t, bits, block, symmetric)
    if tied and lm_head != embeddings:
        out["lm_head.weight"] = (ort_dequantized(tensors[embed], bits, block, symmetric)
                                 if lm_head else tensors[embed])
        config["tie_word_embeddings"] = False
        (dst / "config.json").write_text(json.dumps(config))
    _write_f32(dst / "model.safetensors", out)
    return dst


def _read_f32(path):
    header, data = read_safetensors(path)
    tensors = {}
    for name, info in header.items():
        if name == "__metadata__":
            continue
        start, end = info["data_offsets"]
        assert info["dtype"] == "F32", "the reference works on fp32 checkpoints"
        tensors[name] = np.frombuffer(data[start:end], np.float32).reshape(info["shape"])
    return tensors


def _write_f32(path, tensors):
    new_header, blob, offset = {}, bytearray(), 0
    for name, t in tensors.items():
        raw = np.ascontiguousarray(t, np.float32).tobytes()
        new_header[name] = {"dtype": "F32", "shape": list(t.shape),
                            "data_offsets": [offset, offset + len(raw)]}
        blob += raw
        offset += len(raw)
    write_safetensors(path, new_header, bytes(blob))


def exported_weights(model_path):
    """{checkpoint key: fp32 values} of every weight a standard-ONNX export quantized, read
    from its DequantizeLinear inputs (codes named after the key, scales and zero points) and
    dequantized by numpy: what the graph computes with, whatever chose the scales."""
    import onnx
    from onnx import numpy_helper
    model = onnx.load(str(model_path))
    inits = {t.name: t for t in model.graph.initializer}
    out = {}
    for node in model.graph.node:
        if node.op_type != "DequantizeLinear":
            continue
        block = next(a.i for a in node.attribute if a.name == "block_size")
        codes, scales, zeros = (numpy_helper.to_array(inits[i]).astype(np.float32)
                                for i in node.input)
        scales = np.repeat(scales, block, axis=1)[:, :codes.shape[1]]
        zeros = np.repeat(zeros, block, axis=1)[:, :codes.shape[1]]
        out[node.input[0]] = (codes - zeros) * scales
    return out


def checkpoint_with(src, dst, weights):
    """A copy of checkpoint `src` at `dst` with the tensors in `weights` replaced."""
    src, dst = Path(src), Path(dst)
    shutil.copytree(src, dst)
    tensors = _read_f32(src / "model.safetensors")
    for name, w in weights.items():
        assert tensors[name].shape == w.shape, name
        tensors[name] = w
    _write_f32(dst / "model.safetensors", tensors)
    return dst
