/* act.c — lowering of the activations and soft-capping, as transformers computes them:
 *   silu(x)      = x * sigmoid(x)
 *   gelu(x)      = 0.5 * x * (1 + erf(x / sqrt(2)))
 *   gelu_tanh(x) = 0.5 * x * (1 + tanh(sqrt(2 / pi) * (x + 0.044715 * x^3)))
 *   softcap(x)   = tanh(x / cap) * cap */
#include <math.h>

#include "ir/legalize.h"

ferry_status lower_activation(g_lower_ctx *c, const g_node *n, int *outs)
{
    g_graph *g = c->dst;
    int x = lw_in(c, n, 0);
    ferry_dtype dt = g->values[x].dtype;
    switch (n->op) {
    case G_SILU:
        outs[0] = g_binary(g, G_MUL, "Mul", x, g_unary(g, G_SIGMOID, "Sigmoid", x));
        break;
    case G_GELU: {
        int e = g_unary(g, G_ERF, "Erf",
                        g_binary(g, G_MUL, "Mul_scale", x, g_scalar_f(g, dt, M_SQRT1_2)));
        int one_plus = g_binary(g, G_ADD, "Add", e, g_scalar_f(g, dt, 1.0));
        int half = g_binary(g, G_MUL, "Mul_half", x, g_scalar_f(g, dt, 0.5));
        outs[0] = g_binary(g, G_MUL, "Mul", half, one_plus);
        break;
    }
    case G_GELU_TANH: {
        int x3 = g_binary(g, G_MUL, "Cube", g_binary(g, G_MUL, "Square", x, x), x);
        int inner = g_binary(g, G_ADD, "Add_inner", x,
                             g_binary(g, G_MUL, "Mul_c", x3, g_scalar_f(g, dt, 0.044715)));
        int t = g_unary(g, G_TANH, "Tanh",
                        g_binary(g, G_MUL, "Mul_k", inner, g_scalar_f(g, dt, sqrt(2.0 / M_PI))));
        int one_plus = g_binary(g, G_ADD, "Add", t, g_scalar_f(g, dt, 1.0));
        int half = g_binary(g, G_MUL, "Mul_half", x, g_scalar_f(g, dt, 0.5));
        outs[0] = g_binary(g, G_MUL, "Mul", half, one_plus);
        break;
    }
    case G_SOFTCAP: {
        int t = g_unary(g, G_TANH, "Tanh",
                        g_binary(g, G_DIV, "Div", x, g_scalar_f(g, dt, n->a.cap)));
        outs[0] = g_binary(g, G_MUL, "Mul", t, g_scalar_f(g, dt, n->a.cap));
        break;
    }
    default:
        return g_fail(g, FERRY_ERR_INTERNAL, "no activation lowering for %s", g_op_name(n->op)),
               FERRY_ERR_INTERNAL;
    }
    return g->err.status;
}
