/* mask.c — the bool attention mask [b, 1, 1, s, t] (kv-head and group axes broadcast) that the
 * attention lowering applies, built once per (mask input, kind, window, offset) and shared by
 * every layer that asks for the same.
 *
 *   causal (int64 [b, t], 1 = token): query i sits at cache index t - s + i; it sees key j when
 *       j <= its index and key j is not padding (transformers' causal + padding masks)
 *   padding (int64 [b, t]): every non-padding key (bidirectional encoders, cross attention)
 *   given (bool [b, 1, s, t]): as given; query i sits at index offset + i
 *   window w: also fewer than w real tokens in slots (j, i] (int64 masks: padding may sit
 *       between a row's tokens), or j > index - w (a given mask: its slots are positions)
 * and, for targets whose attention kernel adds a bias, the same mask as an additive float
 * [b, 1, s, t] (lw_attention_bias). */
#include <stdio.h>
#include <string.h>

#include "ir/legalize.h"

int lw_attention_mask(g_lower_ctx *c, int mask, int q, int offset, g_mask_kind kind,
                      int64_t window)
{
    int64_t key = window * 4 + (int64_t)kind;
    /* The query offset only places a given mask's window; elsewhere it changes nothing. */
    if (kind != G_MASK_GIVEN || window == 0)
        offset = G_NONE;
    int same_kind = 0;
    for (size_t i = 0; i < c->n_memo; i++) {
        const lw_memo *m = &c->memo[i];
        if (m->kind != LW_MEMO_MASK || m->key != key)
            continue;
        if (m->in_a == mask && m->in_b == offset)
            return m->out_a;
        same_kind++;
    }
    g_graph *g = c->dst;
    char saved[sizeof g->scope], scope[96];
    if (kind == G_MASK_PADDING)
        snprintf(scope, sizeof scope, "padding_mask");
    else if (window)
        snprintf(scope, sizeof scope, "sliding_mask_%lld", (long long)window);
    else
        snprintf(scope, sizeof scope, "causal_mask");
    if (same_kind)
        snprintf(scope + strlen(scope), sizeof scope - strlen(scope), "_%d", same_kind);
    lw_shared_scope_push(c, saved, sizeof saved, "%s", scope);
    bool given = kind == G_MASK_GIVEN;
    int64_t zero = 0, one = 1, pad_axes[3] = {1, 2, 3};
    /* one call's arguments are evaluated in an unspecified order, and each makes a value:
     * made one statement at a time, the graph is the same whichever compiler built ferry */
    int t_axis = g_scalar_i64(g, given ? 3 : 1);
    int t = g_gather(g, "Gather_t", g_shape_of(g, "Shape_t", mask, 0, G_END), t_axis, 0);
    int one_i = g_scalar_i64(g, 1);
    int s = g_gather(g, "Gather_s", g_shape_of(g, "Shape_s", q, 0, G_END), one_i, 0);
    int first = given ? (offset != G_NONE
                             ? g_gather(g, "Gather_offset", offset, g_scalar_i64(g, 0), 0)
                             : g_scalar_i64(g, 0))
                      : g_binary(g, G_SUB, "Sub", t, s);
    int m;
    if (given) {
        m = g_unsqueeze(g, "Unsqueeze_mask", mask, 1, &one); /* [b, 1, 1, s, t] */
    } else {
        /* [b, 1, 1, 1, t] */
        m = g_unsqueeze(g, "Unsqueeze_pad", g_cast(g, "Cast", mask, FERRY_BOOL), 3, pad_axes);
        if (kind == G_MASK_CAUSAL) {
            int kv_idx = g_range(g, "Range_kv", g_scalar_i64(g, 0), t, one_i);
            int q_idx = g_range(g, "Range_q", first, t, one_i);
            int kv_row = g_unsqueeze(g, "Unsqueeze_kv", kv_idx, 1, &zero); /* [1, t] */
            int q_col = g_unsqueeze(g, "Unsqueeze_q", q_idx, 1, &one);     /* [s, 1] */
            int allowed = g_binary(g, G_LESS_EQUAL, "LessOrEqual", kv_row, q_col);
            m = g_binary(g, G_AND, "And", allowed, m);                    /* [b, 1, 1, s, t] */
        }
    }
    if (window > 0 && !given) {
        /* The window counts real tokens, not cache slots: a row may have padding between its
         * tokens (onnxruntime-genai pads batches on the right and appends after the pads), and
         * transformers' window over that row alone spans w tokens. Key j is in query i's window
         * when fewer than w real tokens lie in slots (j, i]: n(i) - n(j) < w, n = running count
         * of the mask. Left padding alone gives the slot distance, as before. */
        int filled = g_cumsum(g, "CumSum_filled", mask, 1);                 /* [b, t] */
        int q_idx = g_range(g, "Range_q_window", first, t, one_i);
        int q_filled = g_gather(g, "Gather_q_filled", filled, q_idx, 1);    /* [b, s] */
        int64_t kv_axes[3] = {1, 2, 3}, q_axes[3] = {1, 2, 4};
        int kv = g_unsqueeze(g, "Unsqueeze_kv_window", filled, 3, kv_axes); /* [b, 1, 1, 1, t] */
        int qc = g_unsqueeze(g, "Unsqueeze_q_window", q_filled, 3, q_axes); /* [b, 1, 1, s, 1] */
        int lo = g_binary(g, G_SUB, "Sub_window", qc, g_scalar_i64(g, window));
        int in_window = g_binary(g, G_GREATER, "Greater", kv, lo);
        m = g_binary(g, G_AND, "And_window", m, in_window);
    } else if (window > 0) {
        int kv_idx = g_range(g, "Range_kv_window", g_scalar_i64(g, 0), t, one_i);
        int q_end = g_binary(g, G_ADD, "Add_q_end", first, s);
        int q_idx = g_range(g, "Range_q_window", first, q_end, one_i);
        int kv_row = g_unsqueeze(g, "Unsqueeze_kv_window", kv_idx, 1, &zero);
        int q_col = g_unsqueeze(g, "Unsqueeze_q_window", q_idx, 1, &one);
        int lo = g_binary(g, G_SUB, "Sub_window", q_col, g_scalar_i64(g, window));
        int in_window = g_binary(g, G_GREATER, "Greater", kv_row, lo);
        m = g_binary(g, G_AND, "And_window", m, in_window);
    }
    lw_scope_pop(c, saved);
    lw_memo_add(c, &(lw_memo){.kind = LW_MEMO_MASK, .in_a = mask, .in_b = offset, .key = key,
                              .out_a = m});
    return m;
}

double lw_lowest(ferry_dtype dt)
{
    return dt == FERRY_F16 ? -65504.0 : dt == FERRY_BF16 ? -3.3895313892515355e38
                                                         : -3.4028234663852886e38;
}

/* ferry's attention mask for `n` as an additive bias [b, 1, s, t] ([b, 1, 1, t] for a padding
 * mask; G_NONE, no bias, for an attention without a mask) in `dt`, made once per
 * graph for each mask (every layer with the same mask and window shares it). `q` (dst id)
 * is any value whose axis 1 is the query length: not a rotated q that nothing else reads, or
 * the rotation would be computed for its shape alone. */
int lw_attention_bias(g_lower_ctx *c, const g_node *n, int q, ferry_dtype dt)
{
    g_graph *g = c->dst;
    const g_attn_opts *o = n->a.attn;
    if (o->mask == G_MASK_NONE)
        return G_NONE; /* every key visible: nothing to add */
    int offset = lw_in(c, n, 6), mask = lw_in(c, n, 3);
    int m = lw_attention_mask(c, mask, q, offset, o->mask, o->sliding_window);
    if (!g_ok(g))
        return G_NONE;
    for (size_t i = 0; i < c->n_memo; i++)
        if (c->memo[i].kind == LW_MEMO_BIAS && c->memo[i].in_a == m &&
            c->memo[i].key == (int64_t)dt)
            return c->memo[i].out_a;
    char saved[sizeof g->scope];
    lw_shared_scope_push(c, saved, sizeof saved, "attention_bias_%d", m);
    /* [b, 1, 1, s, t] -> [b, 1, s, t], the dims from the semantic graph (q [b, s, h, d]; the
     * mask input [b, t] or, given, [b, 1, s, t]): the mask's own may be unknown. A padding
     * mask is the same for every query: [b, 1, 1, 1, t] -> [b, 1, 1, t], broadcast. */
    const g_shape *qs = &c->src->values[n->in[0]].shape, *ms = &c->src->values[n->in[3]].shape;
    g_dim d4[4] = {qs->d[0], g_dim_const(1),
                   o->mask == G_MASK_PADDING ? g_dim_const(1) : qs->d[1],
                   ms->d[o->mask == G_MASK_GIVEN ? 3 : 1]};
    int m4 = g_reshape(g, "Reshape_mask", m, 4, d4);
    int lowest = g_scalar_f(g, dt, lw_lowest(dt));
    int bias = g_where(g, "Where_bias", m4, g_scalar_f(g, dt, 0.0), lowest);
    lw_scope_pop(c, saved);
    lw_memo_add(c, &(lw_memo){.kind = LW_MEMO_BIAS, .in_a = m, .key = (int64_t)dt,
                              .out_a = bias});
    return bias;
}
