/* seq2seq.c — what encoder-decoder families share (seq2seq.h). */
#include "models/seq2seq.h"

#include <stdio.h>
#include <string.h>

#include "generate/generation.h"

ferry_status s2s_plan(const model_plan_request *rq, const s2s_layout *layout,
                      g_dim encoder_sequence, model_plan *out, fy_err *err)
{
    const char *arch = rq->arch->architecture;
    if (!rq->gen)
        return fy_fail(err, FERRY_ERR_UNSUPPORTED, "%s: export it for generation "
                       "(--for-generation; export_for_generation), which writes its encoder, "
                       "prefill and decode components", arch);
    if (gen_check_cache_form(rq, err) != FERRY_OK)
        return err->status;
    g_dim batch = model_plan_axis(rq, "batch"), sequence = model_plan_axis(rq, "sequence");
    out->gen = gen_resolve(rq->gen, sequence, &rq->syms[0]);
    gen_component dec[MODEL_MAX_COMPONENTS];
    int n = 0;
    if (gen_plan(rq->cfg, &out->gen, rq->single_graph, batch, sequence, rq->syms, dec, &n,
                 err) != FERRY_OK)
        return err->status;
    if (n < 1 || n + 1 > MODEL_MAX_COMPONENTS)
        return fy_fail(err, FERRY_ERR_INTERNAL, "%s: planned %d decoder graphs", arch, n);
    /* each component's index is its symbol table's: the encoder's comes first */
    for (int i = n; i > 0; i--)
        rq->syms[i] = rq->syms[i - 1];
    model_io encoder = {.batch = batch, .sequence = encoder_sequence, .cache = CACHE_NONE,
                        .dtype = rq->cfg->dtype, .component = layout->encoder_component,
                        .keep_float = layout->encoder_float};
    out->comps[0] = (model_component){layout->encoder_name, layout->encoder_name, encoder,
                                      layout->encoder_output};
    for (int i = 0; i < n; i++) {
        model_io io = dec[i].io;
        io.takes = FERRY_INPUT_IDS;
        io.component = layout->decoder_component;
        /* named (and so given roles) as the files a runtime loads are, where it names them */
        const char *name = layout->decoder_name ? layout->decoder_name : dec[i].name;
        const char *role = layout->decoder_name ? layout->decoder_name : dec[i].role;
        out->comps[i + 1] = (model_component){name, role, io, layout->decoder_output};
    }
    out->n = n + 1;
    return FERRY_OK;
}

int s2s_first_position(g_graph *g, const blk_lm *dec, const model_io *io, const char *scope)
{
    int pk, pv, pos;
    blk_cache_inputs(g, dec, io, 0, &pk, &pv, &pos);
    g_scope(g, "%s", scope);
    int zero = g_scalar_i64(g, 0);
    if (pos != G_NONE)
        return g_gather(g, "past_length", pos, zero, 0);
    if (pk != G_NONE)
        return g_gather(g, "past_length", g_shape_of(g, "past_shape", pk, 0, G_END),
                        g_scalar_i64(g, 2), 0);
    return zero;
}

int s2s_positions(g_graph *g, const model_io *io, int ids, int start, const char *scope)
{
    g_scope(g, "%s", scope);
    int s = g_gather(g, "sequence", g_shape_of(g, "ids_shape", ids, 0, G_END),
                     g_scalar_i64(g, 1), 0);
    int positions = g_range(g, "arange", start, g_binary(g, G_ADD, "end", start, s),
                            g_scalar_i64(g, 1));
    if (positions != G_NONE) /* range's inference cannot read the extent: it is the sequence */
        g->values[positions].shape.d[0] = io->sequence;
    return positions;
}

int s2s_self_mask(g_graph *g, const blk_lm *dec, const model_io *io, int ids, int start,
                  int positions, const char *scope)
{
    g_scope(g, "%s", scope);
    int64_t zero = 0;
    int batch = g_shape_of(g, "batch", ids, 0, 1);
    if (io->cache == CACHE_STATIC) {
        int pk, pv, pos;
        blk_cache_inputs(g, dec, io, 0, &pk, &pv, &pos);
        (void)pv;
        (void)pos;
        int slots = g_gather(g, "slots", g_shape_of(g, "cache_shape", pk, 0, G_END),
                             g_scalar_i64(g, 2), 0);
        int cols = g_range(g, "cols", g_scalar_i64(g, 0), slots, g_scalar_i64(g, 1));
        int rows = g_unsqueeze(g, "rows", positions, 1, (int64_t[]){1});
        int seen = g_binary(g, G_LESS_EQUAL, "causal", g_unsqueeze(g, "cols_row", cols, 1,
                                                                   &zero),
                            rows);
        int m4 = g_unsqueeze(g, "causal_4d", seen, 2, (int64_t[]){0, 1});
        /* every row alike: [1, 1, s, slots] and-ed with a [b, 1, 1, 1] of true */
        int parts[2] = {batch, g_const_i64(g, 3, (int64_t[]){1, 1, 1})};
        int rows_shape = g_concat(g, "rows_shape", 2, parts, 0);
        int every = g_expand(g, "every_row", g_const(g, FERRY_BOOL, 0, NULL, &(bool){true}),
                             rows_shape);
        if (every != G_NONE)
            g->values[every].shape = (g_shape){.rank = 4, .d = {io->batch, g_dim_const(1),
                                                                g_dim_const(1), g_dim_const(1)}};
        int mask = g_binary(g, G_AND, "mask", every, m4);
        if (mask != G_NONE) {
            g_shape *s = &g->values[mask].shape;
            s->d[2] = io->sequence;
            s->d[3] = io->cache_len;
        }
        return mask;
    }
    int total = g_binary(g, G_ADD, "total", start,
                         g_gather(g, "sequence", g_shape_of(g, "ids_shape", ids, 0, G_END),
                                  g_scalar_i64(g, 1), 0));
    int parts[2] = {batch, g_unsqueeze(g, "total_1d", total, 1, &zero)};
    int shape = g_concat(g, "shape", 2, parts, 0);
    g_dim bt[2] = {io->batch, g_dim_add(io->past, io->sequence)};
    return blk_like_ids(g, g_expand(g, "ones", g_scalar_i64(g, 1), shape), bt);
}


void s2s_cross_inputs(g_graph *g, const model_io *io, int l, int64_t heads, g_dim keys,
                      int64_t head_dim, int *k, int *v)
{
    char name[96];
    g_dim kd[4] = {io->batch, g_dim_const(heads), keys, g_dim_const(head_dim)};
    snprintf(name, sizeof name, "past_key_values.%d.cross_key", l);
    *k = g_input(g, name, io->dtype, 4, kd);
    snprintf(name, sizeof name, "past_key_values.%d.cross_value", l);
    *v = g_input(g, name, io->dtype, 4, kd);
}
