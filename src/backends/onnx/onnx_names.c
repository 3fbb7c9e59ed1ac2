/* onnx_names.c — what ONNX calls ferry's things: the op type of each IR primitive, the
 * TensorProto data type of each dtype, and the IR version an opset needs. */
#include "backends/onnx/onnx.h"

/* ONNX op types of the primitives, by IR op (NULL: not printable, must have been lowered). */
const char *onnx_op(g_op op)
{
    switch (op) {
    case G_ADD: return "Add";
    case G_SUB: return "Sub";
    case G_MUL: return "Mul";
    case G_DIV: return "Div";
    case G_POW: return "Pow";
    case G_MAX: return "Max";
    case G_MIN: return "Min";
    case G_AND: return "And";
    case G_OR: return "Or";
    case G_EQUAL: return "Equal";
    case G_LESS: return "Less";
    case G_LESS_EQUAL: return "LessOrEqual";
    case G_GREATER: return "Greater";
    case G_GREATER_EQUAL: return "GreaterOrEqual";
    case G_SQRT: return "Sqrt";
    case G_RECIPROCAL: return "Reciprocal";
    case G_EXP: return "Exp";
    case G_COS: return "Cos";
    case G_SIN: return "Sin";
    case G_SIGMOID: return "Sigmoid";
    case G_TANH: return "Tanh";
    case G_ERF: return "Erf";
    case G_NEG: return "Neg";
    case G_NOT: return "Not";
    case G_WHERE: return "Where";
    case G_MATMUL: return "MatMul";
    case G_GATHER: return "Gather";
    case G_RESHAPE: return "Reshape";
    case G_TRANSPOSE: return "Transpose";
    case G_CONCAT: return "Concat";
    case G_SLICE: return "Slice";
    case G_UNSQUEEZE: return "Unsqueeze";
    case G_CAST: return "Cast";
    case G_SOFTMAX: return "Softmax";
    case G_REDUCE_MEAN: return "ReduceMean";
    case G_REDUCE_MAX: return "ReduceMax";
    case G_REDUCE_SUM: return "ReduceSum";
    case G_ABS: return "Abs";
    case G_LOG: return "Log";
    case G_FLOOR: return "Floor";
    case G_SHAPE_OF: return "Shape";
    case G_RANGE: return "Range";
    case G_EXPAND: return "Expand";
    case G_SCATTER_ELEMENTS: case G_SCATTER_ADD: return "ScatterElements";
    case G_GATHER_ELEMENTS: return "GatherElements";
    case G_TOPK: return "TopK";
    case G_CUMSUM: return "CumSum";
    case G_DEQUANTIZE: return "DequantizeLinear";
    case G_CLIP: return "Clip";
    case G_PAD: return "Pad";
    case G_CONV: return "Conv";
    default: return NULL;
    }
}

int onnx_ir_version(int opset)
{
    if (opset <= 18)
        return 8;
    if (opset <= 20)
        return 9;
    if (opset <= 22)
        return 10;
    return 11;
}

/* TensorProto.DataType of a dtype (0: none). */
int onnx_dtype(ferry_dtype dt)
{
    switch (dt) {
    case FERRY_F32: return 1;
    case FERRY_U8: return 2;
    case FERRY_I8: return 3;
    case FERRY_U16: return 4;
    case FERRY_I16: return 5;
    case FERRY_I32: return 6;
    case FERRY_I64: return 7;
    case FERRY_BOOL: return 9;
    case FERRY_F16: return 10;
    case FERRY_F64: return 11;
    case FERRY_U32: return 12;
    case FERRY_U64: return 13;
    case FERRY_BF16: return 16;
    case FERRY_F8_E4M3: return 17;
    case FERRY_F8_E5M2: return 19;
    case FERRY_U4: return 21;
    case FERRY_I4: return 22;
    default: return 0;
    }
}
