/* weights.h — weight recipes: how one stored weight is made from checkpoint tensors while it
 * streams out. A recipe never holds data; src/store/ runs it a band of rows at a time.
 *
 * The logical layout of a matrix is transformers', [out, in] (rows, cols). A recipe:
 *   sources   one or more checkpoint tensors of one shape but along the join, joined along
 *             `concat_axis` (fused QKV or gate/up: rows of q, k, v one after the other), or
 *             stacked along a new first axis (`stack`: the experts of a mixture, [E, out, in]);
 *             as many as a model has (the first W_INLINE_SOURCES in the recipe, all of them in
 *             a list the graph keeps: w_src)
 *   layout    `src_transposed`: each 2-D source is stored [in, out] (GPT-2's Conv1D), its
 *             transpose being the logical matrix
 *   rank      a source of rank 3 to 5 (a convolution's [out, in, k...]) keeps its shape, or
 *             with `flatten` is the matrix [out, in * k...] (a patch embedding as a linear)
 *   rows      an optional row range [row_begin, row_end) of the joined tensor (a split fused
 *             weight, e.g. Phi-3's qkv_proj into q, k, v), and an optional permutation of the
 *             rows within groups (`perm`: q/k rows between rope layouts)
 *   offset    added to every element in fp32 before conversion (Gemma's "1 + weight" norms)
 *   dtype     the element type written (for a quantized weight: the type scales are in and
 *             what the codes dequantize to)
 *   transpose 2-D only: the stored layout is [in, out] (a backend's MatMul wants it so)
 *   quant     optional block quantization along `in` (w_quant below), of a matrix or of a stack
 *             of them (each expert's rows blocked alike: [E, out, in] codes, [E, out, blocks]
 *             scales)
 * Streamed, every recipe is a matrix of rows and cols (w_matrix): a stack's rows are its
 * experts' rows one after the other, an N-D weight's cols are the product of its trailing dims;
 * the bytes are the row-major bytes of its logical shape either way.
 *
 * The int4 / int8 block packing (onnxruntime's MatMulNBits layout, made by quant/rtn.c):
 *   codes   unsigned, row-major over the logical [out, in] matrix; 4-bit codes two per byte,
 *           element 2j in the low nibble and 2j+1 in the high nibble (the other way round with
 *           high_nibble_first); 8-bit codes one per byte.
 *           Each row holds ceil(in/block) blocks; a short last block is quantized over what it
 *           has, and its codes are padded to a whole block only with W_PACK_PAD_BLOCKS. 4-bit rows
 *           need an even `in`.
 *   scales  [out, ceil(in/block)] in `dtype` (fp32 or fp16); in/block below means ceil
 *   zeros   asymmetric only: [out, in/block] codes packed like the codes, each row padded to
 *           whole bytes (a pad nibble is 8), or packed across rows (W_PACK_CONTIGUOUS); symmetric
 *           weights have the implicit zero point
 *           2^(bits-1) (8 or 128) and no zeros part.
 *   value = (code - zero) * scale.
 * What each consumer takes (the codes and scales are always used as they are):
 *   MatMulNBits (B [out, in/block, block*bits/8], scales, zero_points): all three as they are.
 *   ONNX DequantizeLinear (uint4/uint8, axis 1, block_size): codes and scales as they are; its
 *     zero point is a uint4/uint8 tensor [out, in/block] packed contiguously, which the zeros
 *     part is when in/block is even (4-bit) or always (8-bit), and with W_PACK_CONTIGUOUS; a
 *     symmetric weight needs an explicit zero-point tensor of 8s (128s), since
 *     DequantizeLinear's default zero point is 0: W_PACK_CONTIGUOUS writes one,
 *     packed contiguously (every nibble alike).
 *   OpenVINO (u4/u8 constant [out, in/block, block], Convert, Subtract zero, Multiply scale):
 *     codes and scales as they are; zeros as a u4/u8 [out, in/block, 1] constant, or u8 one a
 *     byte (W_PACK_ZERO_BYTES) where 4-bit rows hold an odd number of blocks, or the scalar mid
 *     code when symmetric. */
#ifndef FERRY_IR_WEIGHTS_H
#define FERRY_IR_WEIGHTS_H

#include <stdbool.h>
#include <stdint.h>

#include "ferry.h"
#include "model/safetensors.h"
#include "util/err.h"

/* Sources a recipe holds itself; a recipe of more points to the list of all of them. */
#define W_INLINE_SOURCES 4
/* The most sources a recipe may join or stack (experts of one layer). */
#define W_MAX_SOURCES 4096
/* The most dims of a recipe's logical shape: a stack of 5-D tensors (conv3d). */
#define W_MAX_RANK 6

/* How the rows of a joined matrix are reordered, within each group of `perm_group` rows (a
 * head's head_dim rows of q or k): transformers' rotate-half rope pairs row i with row
 * group/2 + i; an interleaved rope (GGUF's, llama.cpp's) pairs rows 2i and 2i + 1. */
typedef enum w_row_perm {
    W_PERM_NONE,
    W_PERM_INTERLEAVE_HALVES, /* row 2i <- i, row 2i + 1 <- group/2 + i */
    W_PERM_SPLIT_HALVES,      /* the inverse: row i <- 2i, row group/2 + i <- 2i + 1 */
    W_PERM_COUNT
} w_row_perm;

/* The byte layout of a quantized weight's zero points (the codes' nibble order is
 * w_quant.high_nibble_first), as each consumer reads them; store/packing.c writes them. A
 * backend asks for a layout only where its bytes differ from W_PACK_ROWS', so that a weight
 * two formats read alike is one recipe, stored once. */
typedef enum w_packing {
    /* code rows of `in` codes; zero points (asymmetric only) each row from a whole byte, a
     * pad nibble 8 (MatMulNBits' zero_points, OpenVINO's u4 zero points) */
    W_PACK_ROWS,
    /* the same, code rows padded to whole blocks (MatMulNBits' B, when `in` is not a multiple
     * of `block`) */
    W_PACK_PAD_BLOCKS,
    /* zero points packed across rows, as an ONNX uint4 tensor [out, in/block] is, and written
     * out as the mid code for a symmetric weight (DequantizeLinear has no implicit zero
     * point) */
    W_PACK_CONTIGUOUS,
    /* one zero point a byte, u8 [out, in/block] (asymmetric 4-bit: OpenVINO, where a row has an
     * odd number of blocks, which a u4 constant cannot read a byte per row) */
    W_PACK_ZERO_BYTES,
    W_PACK_COUNT
} w_packing;

typedef struct w_quant {
    int bits;                /* 0 = not quantized; 4 or 8 */
    int block;               /* a power of two from 16 to 256 (32, 64, 128 in practice) */
    bool symmetric;          /* no zero points: the mid code is zero */
    bool search;             /* scales searched per block (quant/rtn.h), not RTN's */
    bool positive_scales;    /* symmetric, every scale positive (XNNPACK's int4: rtn.h's
                                RTN_SYMMETRIC_POSITIVE) */
    bool high_nibble_first;  /* 4-bit codes with element 2j in the high nibble, 2j+1 in the
                                low one (ExecuTorch's embedding_4bit) */
    w_packing packing;
} w_quant;

/* Whether the zeros part is written: asymmetric weights, and symmetric ones whose consumer has
 * no implicit zero point (W_PACK_CONTIGUOUS). */
static inline bool w_has_zeros(const w_quant *q)
{
    return !q->symmetric || q->packing == W_PACK_CONTIGUOUS;
}

/* The pieces a recipe streams into: a plain weight has one; a quantized one has codes, scales
 * and (asymmetric) zeros. */
typedef enum w_part { W_PART_DATA = 0, W_PART_SCALES = 1, W_PART_ZEROS = 2 } w_part;
#define W_PART_CODES W_PART_DATA

typedef struct g_weight {
    const st_tensor *src[W_INLINE_SOURCES]; /* the first sources (w_src reads any) */
    const st_tensor *const *more; /* every source, when there are more than W_INLINE_SOURCES:
                                     a list the graph holding the recipe owns (g_weight_value
                                     keeps a copy of the builder's) */
    int n_src;
    int concat_axis;         /* logical axis the sources are joined along */
    bool stack;              /* the sources, of one shape, stacked along a new first axis */
    int stack_group;         /* with stack, 2 or more: each entry of the stack is that many
                                consecutive sources joined along their rows (an expert's gate
                                and up as transformers' gate_up_proj [E, 2*ff, h]); 0: one
                                source each. The bytes are the same either way */
    bool src_transposed;     /* 2-D sources stored [in, out]: the logical matrix is their
                                transpose */
    bool flatten;            /* an N-D source as the matrix [d0, d1 * ... * dn] */
    w_row_perm perm;         /* rows reordered within groups of perm_group */
    int64_t perm_group;
    int64_t row_begin, row_end; /* of the joined tensor; row_end 0 = all rows */
    double offset;
    ferry_dtype dtype;
    bool transpose;
    bool saturate;           /* a value beyond an fp16 `dtype`'s range becomes its largest
                                finite one (OpenVINO's compress_to_fp16 does so), not ±inf as a
                                plain cast gives */
    w_quant quant;
} g_weight;

/* A recipe of one tensor converted to `dtype`. */
g_weight w_plain(const st_tensor *t, ferry_dtype dtype);
/* A recipe of `n` tensors (`list`, kept by reference: it must live as long as the recipe, or
 * be copied by g_weight_value), joined along axis 0 (stack false) or stacked. */
g_weight w_join(const st_tensor *const *list, int n, bool stack, ferry_dtype dtype);
/* Source k of a recipe. */
static inline const st_tensor *w_src(const g_weight *w, int k)
{
    return w->more ? w->more[k] : w->src[k];
}
/* Which row of the row-ranged joined matrix holds row `r` of the recipe's matrix (its
 * permutation). */
int64_t w_permuted_row(const g_weight *w, int64_t r);
/* Rows and cols of source `t` as recipe `w` reads it (its layout; an N-D tensor as
 * [d0, d1 * ... * dn]; a vector as one row). */
int64_t w_source_rows(const g_weight *w, const st_tensor *t);
int64_t w_source_cols(const g_weight *w, const st_tensor *t);
/* Whether the sources lie one after the other along the matrix's rows (a join along axis 0 of
 * matrices or N-D tensors, or a stack), not side by side or end to end (vectors). */
bool w_rows_joined(const g_weight *w);
/* Validates a recipe (sources agree, ranges inside, quantization divides) and yields its
 * logical shape (after join or stack, layout, row range, flatten and transpose; at most
 * W_MAX_RANK dims). Errors name the tensors. */
ferry_status w_check(const g_weight *w, int *rank, int64_t *shape, fy_err *err);
/* Same recipe (so the same bytes): used to store a weight once across graphs. */
bool w_equal(const g_weight *a, const g_weight *b);
/* The parts this recipe writes (1; or 3 with zeros, 2 without). */
int w_n_parts(const g_weight *w);
/* Shape (at most W_MAX_RANK dims), element type and byte size of one part. For codes the
 * element type is FERRY_U4 or FERRY_U8 and the shape is logical ([out, in], a stack's
 * [E, out, in]); zeros of 4 bits are [out, in/block] U4 with rows padded to whole bytes. */
void w_part_info(const g_weight *w, w_part part, int *rank, int64_t *shape, ferry_dtype *dtype,
                 uint64_t *nbytes);
/* Rows x cols of the matrix the recipe streams as (a 1-D weight is 1 x n; a stack's rows are
 * every source's; an N-D weight's cols the product of its trailing dims). */
void w_matrix(const g_weight *w, int64_t *rows, int64_t *cols);
/* "model.layers.0.self_attn.q_proj.weight", or "a+b+c" for a join; rows "[0:64]" appended for a
 * row range. For messages and dumps. */
void w_describe(const g_weight *w, char *buf, size_t size);

#endif
