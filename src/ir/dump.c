/* dump.c — the IR as text, one line per symbol, input, weight, constant, live node, output,
 * state and module, in graph order. Deterministic (no addresses, no weights' data), so golden files can
 * pin what a builder or a lowering produces:
 *
 *   symbol batch min 1 max - traced 1
 *   input input_ids i64 [batch, sequence]
 *   weight model.norm.weight f32 [64] <- model.norm.weight (BF16)
 *   const const_7 i64 [4] = [0, 0, 4, 16]
 *   /model/norm = rms_norm(/model/x_output_0, model.norm.weight) {eps=1e-05}
 *       -> /model/norm_output_0 f32 [batch, sequence, 64]          (one line in the dump)
 *   output logits
 *   state past_key_values.0.key (key, layer 0): past_key_values.0.key -> present.0.key
 *   module /model/layers.0/self_attn/q_proj torch.nn.modules.linear.Linear (leaf linear) */
#include <stdio.h>
#include <string.h>

#include "ir/ir.h"
#include "util/dtype.h"
#include "util/strbuf.h"

static const char *dtype_str(ferry_dtype dt)
{
    switch (dt) {
    case FERRY_F32: return "f32";
    case FERRY_F16: return "f16";
    case FERRY_BF16: return "bf16";
    case FERRY_F64: return "f64";
    case FERRY_I64: return "i64";
    case FERRY_I32: return "i32";
    case FERRY_BOOL: return "bool";
    case FERRY_U8: return "u8";
    case FERRY_I8: return "i8";
    case FERRY_U4: return "u4";
    case FERRY_I4: return "i4";
    default: return dt_st_name(dt);
    }
}

static void put_shape(strbuf *b, const g_shape *s, const g_symtab *syms)
{
    sb_puts(b, "[");
    for (int i = 0; i < s->rank; i++) {
        char dim[128];
        g_dim_print(s->d[i], syms, dim, sizeof dim);
        sb_printf(b, "%s%s", i ? ", " : "", dim);
    }
    sb_puts(b, "]");
}

static void put_ints(strbuf *b, const char *key, const int64_t *v, int n)
{
    sb_printf(b, "%s=[", key);
    for (int i = 0; i < n; i++)
        sb_printf(b, "%s%lld", i ? "," : "", (long long)v[i]);
    sb_puts(b, "]");
}

static void put_end(strbuf *b, const char *key, int64_t v)
{
    if (v == G_END)
        sb_printf(b, "%s=end", key);
    else
        sb_printf(b, "%s=%lld", key, (long long)v);
}

/* FNV-1a over a factor set's bits: a line names which set a rope reads without printing 2 x 64
 * numbers for every rope node. */
static uint32_t factors_hash(const float *f, int n)
{
    uint32_t h = 2166136261u;
    for (int i = 0; i < n; i++) {
        uint32_t bits;
        memcpy(&bits, &f[i], sizeof bits);
        for (int k = 0; k < 4; k++)
            h = (h ^ ((bits >> (8 * k)) & 0xffu)) * 16777619u;
    }
    return h;
}

/* What the rope types and layouts added after the first graphs were pinned carry; the options of
 * those graphs print nothing more, so their text stays as it was. */
static void put_rope_extra(strbuf *b, const rope_config *r)
{
    if (r->type == ROPE_LONGROPE) {
        int n = r->n_factors < ROPE_MAX_FACTORS ? r->n_factors : ROPE_MAX_FACTORS;
        sb_printf(b, " original_max=%lld", (long long)r->original_max_position_embeddings);
        if (r->attention_factor >= 0)
            sb_printf(b, " attention_factor=%.9g", r->attention_factor);
        sb_printf(b, " factors=%d short#%08x long#%08x", r->n_factors,
                  (unsigned)factors_hash(r->short_factor, n),
                  (unsigned)factors_hash(r->long_factor, n));
    }
    if (r->layout == ROPE_MROPE)
        sb_printf(b, " mrope_section=%lld,%lld,%lld", (long long)r->mrope_section[0],
                  (long long)r->mrope_section[1], (long long)r->mrope_section[2]);
    else if (r->layout == ROPE_VISION_2D)
        sb_puts(b, " positions=hw");
}

static void put_attrs(strbuf *b, const g_graph *g, const g_node *n)
{
    unsigned m = g_op_info_of(n->op)->attrs;
    const g_attrs *a = &n->a;
    if (!m || (m == GA_TRANSB && !a->transpose_b))
        return;
    sb_puts(b, " {");
    const char *sep = "";
#define SEP() (sb_puts(b, sep), sep = ", ")
    if (m & GA_AXIS)
        SEP(), sb_printf(b, "axis=%lld", (long long)a->axis);
    if (m & GA_INTS)
        SEP(), put_ints(b, n->op == G_TRANSPOSE ? "perm" : "axes", a->ints, a->n_ints);
    if (m & GA_SHAPE)
        SEP(), sb_puts(b, "shape="), put_shape(b, &a->shape, &g->syms);
    if (m & GA_RANGE)
        SEP(), put_end(b, "start", a->start), sb_puts(b, ", "), put_end(b, "end", a->end);
    if (m & GA_EPS)
        SEP(), sb_printf(b, "eps=%.9g", a->eps);
    if ((m & GA_OFFSET) && a->offset != 0)
        SEP(), sb_printf(b, "offset=%.9g", a->offset);
    if ((m & GA_F32W) && a->f32_weight)
        SEP(), sb_puts(b, "f32_weight");
    if (m & GA_CAP)
        SEP(), sb_printf(b, "cap=%.9g", a->cap);
    if (m & GA_TO)
        SEP(), sb_printf(b, "to=%s", dtype_str(a->to));
    if (m & GA_KEEPDIMS)
        SEP(), sb_printf(b, "keepdims=%d", a->keepdims);
    if ((m & GA_TRANSB) && a->transpose_b)
        SEP(), sb_puts(b, "transpose_b");
    if ((m & GA_ROPE) && a->rope) {
        const g_rope_opts *r = a->rope;
        SEP(), sb_printf(b, "rope=%s theta=%.9g factor=%.9g head_dim=%lld rotary_dim=%lld",
                         r->rope.type_name, r->rope.theta, r->rope.factor,
                         (long long)r->head_dim, (long long)r->rotary_dim);
        put_rope_extra(b, &r->rope);
    }
    if ((m & GA_ATTN) && a->attn) {
        static const char *const masks[] = {"causal", "padding", "given", "none"};
        static const char *const caches[] = {"none", "append", "static", "cross"};
        const g_attn_opts *o = a->attn;
        SEP(), sb_printf(b, "heads=%lld kv_heads=%lld head_dim=%lld scale=%.9g mask=%s cache=%s",
                         (long long)o->num_heads, (long long)o->num_kv_heads,
                         (long long)o->head_dim, o->scale, masks[o->mask], caches[o->cache]);
        if (o->sliding_window)
            sb_printf(b, " window=%lld", (long long)o->sliding_window);
        if (o->softcap)
            sb_printf(b, " softcap=%.9g", o->softcap);
    }
    if ((m & GA_EXTERN) && a->ext) {
        const g_extern *e = a->ext;
        SEP(), sb_printf(b, "%s%s%s", e->domain, e->domain[0] ? "." : "", e->op_type);
        for (int i = 0; i < e->n_attr && i < G_EXT_MAX_ATTRS; i++) {
            if (e->attr[i].kind == 's')
                sb_printf(b, " %s=%s", e->attr[i].name, e->attr[i].s);
            else if (e->attr[i].kind != 'f')
                sb_printf(b, " %s=%lld", e->attr[i].name, (long long)e->attr[i].i);
            else
                sb_printf(b, " %s=%.9g", e->attr[i].name, e->attr[i].f);
        }
        for (int k = 0; k < G_MAX_IN; k++)
            if (e->part[k] >= 0)
                sb_printf(b, " in%d=%s", k, e->part[k] == W_PART_CODES ? "codes" :
                                                 e->part[k] == W_PART_SCALES ? "scales" : "zeros");
    }
    if (m & GA_BOUNDS)
        SEP(), sb_printf(b, "lo=%.9g, hi=%.9g", a->lo, a->hi);
    if (m & GA_PADS) {
        int rank = g->values[n->in[0]].shape.rank;
        SEP(), put_ints(b, "begin", a->pad_begin, rank);
        sb_puts(b, ", "), put_ints(b, "end", a->pad_end, rank);
        sb_printf(b, ", value=%.9g", a->pad_value);
    }
    if ((m & GA_CONV) && a->conv) {
        const g_conv_opts *o = a->conv;
        int k = o->spatial >= 1 && o->spatial <= G_CONV_MAX_SPATIAL ? o->spatial : 0;
        SEP(), put_ints(b, "strides", o->strides, k);
        sb_puts(b, ", "), put_ints(b, "pads_begin", o->pads_begin, k);
        sb_puts(b, ", "), put_ints(b, "pads_end", o->pads_end, k);
        sb_puts(b, ", "), put_ints(b, "dilations", o->dilations, k);
        sb_printf(b, ", groups=%lld", (long long)o->groups);
    }
    if ((m & GA_MOE) && a->moe) {
        const g_moe_opts *o = a->moe;
        SEP(), sb_printf(b, "experts=%lld top_k=%lld norm_topk_prob=%d scale_f32=%d act=%s",
                         (long long)o->num_experts, (long long)o->top_k, o->norm_topk_prob,
                         o->scale_f32, g_op_name(o->act));
    }
#undef SEP
    sb_puts(b, "}");
}

static void put_weight(strbuf *b, const g_value *v)
{
    const g_weight *w = &v->weight;
    char src[512];
    w_describe(w, src, sizeof src);
    sb_printf(b, "weight %s %s ", v->name, dtype_str(v->dtype));
    put_shape(b, &v->shape, NULL);
    sb_printf(b, " <- %s (%s)", src, dt_st_name(w->src[0]->dtype));
    if (w->n_src > 1 && !w->stack)
        sb_printf(b, " concat axis %d", w->concat_axis);
    if (w->src_transposed)
        sb_puts(b, " stored [in, out]");
    if (w->flatten)
        sb_puts(b, " flattened");
    if (w->perm != W_PERM_NONE)
        sb_printf(b, " rows %s in groups of %lld",
                  w->perm == W_PERM_INTERLEAVE_HALVES ? "interleaved" : "split in halves",
                  (long long)w->perm_group);
    if (w->transpose)
        sb_puts(b, " transposed");
    if (w->offset != 0)
        sb_printf(b, " offset %.9g", w->offset);
    if (w->quant.bits)
        sb_printf(b, " quant int%d block %d %s%s%s", w->quant.bits, w->quant.block,
                  w->quant.symmetric ? "symmetric" : "asymmetric",
                  w->quant.packing == W_PACK_CONTIGUOUS && w->quant.symmetric
                      ? " explicit-zeros" : "",
                  w->quant.packing == W_PACK_CONTIGUOUS && !w->quant.symmetric
                      ? " packed-zeros" : "");
    sb_puts(b, "\n");
}

static void put_const(strbuf *b, const g_value *v)
{
    sb_printf(b, "const %s %s ", v->name, dtype_str(v->dtype));
    put_shape(b, &v->shape, NULL);
    size_t esz = dt_size(v->dtype), n = esz ? v->nbytes / esz : 0;
    sb_puts(b, " = [");
    for (size_t i = 0; i < n && i < 8; i++) {
        const unsigned char *p = (const unsigned char *)v->data + i * esz;
        if (v->dtype == FERRY_I64) {
            int64_t x;
            memcpy(&x, p, 8);
            if (x == INT64_MAX)
                sb_printf(b, "%smax", i ? ", " : "");
            else
                sb_printf(b, "%s%lld", i ? ", " : "", (long long)x);
        } else if (v->dtype == FERRY_F32) {
            float x;
            memcpy(&x, p, 4);
            sb_printf(b, "%s%.9g", i ? ", " : "", (double)x);
        } else if (v->dtype == FERRY_F16) {
            uint16_t h;
            memcpy(&h, p, 2);
            sb_printf(b, "%s%.9g", i ? ", " : "", (double)dt_f16_to_f32(h));
        } else if (v->dtype == FERRY_BF16) {
            uint16_t h;
            memcpy(&h, p, 2);
            sb_printf(b, "%s%.9g", i ? ", " : "", (double)dt_bf16_to_f32(h));
        } else {
            sb_printf(b, "%s%u", i ? ", " : "", p[0]);
        }
    }
    sb_puts(b, n > 8 ? ", ...]\n" : "]\n");
}

char *g_dump(const g_graph *g)
{
    static const char *const kinds[GS_KIND_COUNT] = {"key", "value", "length", "cross key",
                                                     "cross value"};
    static const char *const forms[GS_FORM_COUNT] = {"", ", in place", ", variable",
                                                     ", written into its input",
                                                     ", program buffer"};
    strbuf b = {0};
    for (int i = 0; i < g->syms.n; i++) {
        const g_sym *s = &g->syms.s[i];
        sb_printf(&b, "symbol %s min %lld max ", s->name, (long long)s->min);
        if (s->max > 0)
            sb_printf(&b, "%lld", (long long)s->max);
        else
            sb_puts(&b, "-");
        sb_printf(&b, " traced %lld\n", (long long)s->example);
    }
    for (size_t i = 0; i < g->n_inputs; i++) {
        const g_value *v = &g->values[g->inputs[i]];
        sb_printf(&b, "input %s %s ", v->name, dtype_str(v->dtype));
        put_shape(&b, &v->shape, &g->syms);
        sb_puts(&b, "\n");
    }
    for (size_t i = 0; i < g->n_values; i++) {
        const g_value *v = &g->values[i];
        if (v->n_uses == 0)
            continue;
        if (v->kind == GV_WEIGHT)
            put_weight(&b, v);
        else if (v->kind == GV_CONST)
            put_const(&b, v);
    }
    for (size_t i = 0; i < g->n_nodes; i++) {
        const g_node *n = &g->nodes[i];
        if (n->dead)
            continue;
        sb_printf(&b, "%s = %s(", n->name, g_op_name(n->op));
        for (int k = 0; k < n->n_in; k++)
            sb_printf(&b, "%s%s", k ? ", " : "",
                      n->in[k] == G_NONE ? "-" : g->values[n->in[k]].name);
        sb_puts(&b, ")");
        put_attrs(&b, g, n);
        for (int k = 0; k < n->n_out; k++) {
            const g_value *v = &g->values[n->out[k]];
            sb_printf(&b, "%s%s %s ", k ? ", " : " -> ", v->name, dtype_str(v->dtype));
            put_shape(&b, &v->shape, &g->syms);
        }
        sb_puts(&b, "\n");
    }
    for (size_t i = 0; i < g->n_outputs; i++)
        sb_printf(&b, "output %s\n", g->values[g->outputs[i]].name);
    for (size_t i = 0; i < g->n_states; i++) {
        const g_state *s = &g->states[i];
        sb_printf(&b, "state %s (%s, layer %d%s): %s -> %s\n", s->name,
                  (unsigned)s->kind < GS_KIND_COUNT ? kinds[s->kind] : "?", s->layer,
                  (unsigned)s->form < GS_FORM_COUNT ? forms[s->form] : ", ?",
                  s->in == G_NONE ? "(empty)" : g->values[s->in].name, g->values[s->out].name);
    }
    static const char *const roles[GM_ROLE_COUNT] = {"", "head", "router", "expert",
                                                     "patch embed", "cross kv"};
    for (size_t i = 0; i < g->n_modules; i++) {
        const g_module *m = &g->modules[i];
        const char *notes[3];
        int n_notes = 0;
        char leaf[48];
        if (m->leaf_op != G_OP_COUNT) {
            snprintf(leaf, sizeof leaf, "leaf %s", g_op_name(m->leaf_op));
            notes[n_notes++] = leaf;
        }
        if (m->list_item)
            notes[n_notes++] = "list item";
        if (m->role != GM_ROLE_NONE)
            notes[n_notes++] = (unsigned)m->role < GM_ROLE_COUNT ? roles[m->role] : "?";
        sb_printf(&b, "module %s %s", m->scope[0] ? m->scope : "/", m->cls);
        for (int k = 0; k < n_notes; k++)
            sb_printf(&b, "%s%s", k ? ", " : " (", notes[k]);
        sb_puts(&b, n_notes ? ")\n" : "\n");
    }
    return sb_take(&b);
}
