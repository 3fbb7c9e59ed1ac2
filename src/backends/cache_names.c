/* cache_names.c — the guide's names of an explicit cache, for every format that keeps the
 * cache in the graph's inputs and outputs (ONNX always, OpenVINO with stateful=False): a
 * state updated in place (static cache) as the pair input.<name> / output.<name>, meant to be
 * bound to one buffer; an appended cache as past_key_values.<l>.key -> present.<l>.key. And
 * for the formats that write the cache into its input tensors (torch's and ExecuTorch's
 * programs), the inputs named as Python identifiers: past_key_values_<l>_key, and their states
 * made mutations of those inputs (be_mutate_cache_inputs). */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "backends/backend.h"

static ferry_status rename_value(g_graph *g, int v, const char *prefix, const char *name,
                                 fy_err *err)
{
    size_t n = strlen(prefix) + strlen(name) + 1;
    char *s = malloc(n);
    if (!s)
        return fy_fail(err, FERRY_ERR_NOMEM, "out of memory");
    snprintf(s, n, "%s%s", prefix, name);
    bool renamed = g_rename(g, v, s);
    free(s);
    return renamed ? FERRY_OK : fy_fail(err, g->err.status, "%s", g->err.msg);
}

/* "past_key_values.3.key" -> "present.3.key" */
static ferry_status present_name(g_graph *g, int v, const char *state, fy_err *err)
{
    const char *prefix = "past_key_values.";
    size_t n = strlen(prefix);
    return rename_value(g, v, "present.", strncmp(state, prefix, n) == 0 ? state + n : state, err);
}

ferry_status be_name_explicit_cache(g_graph *g, fy_err *err)
{
    for (size_t i = 0; i < g->n_states; i++) {
        const g_state *s = &g->states[i];
        ferry_status st;
        if (s->form == GS_IN_PLACE) {
            st = rename_value(g, s->in, "input.", s->name, err);
            if (st == FERRY_OK)
                st = rename_value(g, s->out, "output.", s->name, err);
        } else {
            st = s->in == G_NONE ? FERRY_OK : rename_value(g, s->in, "", s->name, err);
            if (st == FERRY_OK)
                st = present_name(g, s->out, s->name, err);
        }
        if (st != FERRY_OK)
            return st;
    }
    return FERRY_OK;
}

/* Value `v` named with '_' for each '.' of its name (unchanged without one). */
static ferry_status identifier_name(g_graph *g, int v, fy_err *err)
{
    char name[256];
    snprintf(name, sizeof name, "%s", g->values[v].name);
    if (!strchr(name, '.'))
        return FERRY_OK;
    for (char *c = name; *c; c++)
        if (*c == '.')
            *c = '_';
    return g_rename(g, v, name) ? FERRY_OK : fy_fail(err, g->err.status, "%s", g->err.msg);
}

ferry_status be_name_mutated_cache(g_graph *g, fy_err *err)
{
    /* every input named with dots: the cache states' and an encoder-decoder's cross cache,
     * which is read only; and the outputs that make that cross cache (an encoder's), which
     * torch's programs list under their names in the output spec */
    for (size_t i = 0; i < g->n_inputs; i++)
        if (identifier_name(g, g->inputs[i], err) != FERRY_OK)
            return err->status;
    for (size_t i = 0; i < g->n_outputs; i++) {
        bool state = false;
        for (size_t k = 0; k < g->n_states; k++)
            state |= g->states[k].out == g->outputs[i];
        if (!state && identifier_name(g, g->outputs[i], err) != FERRY_OK)
            return err->status;
    }
    return FERRY_OK;
}

ferry_status be_name_returned_cache(g_graph *g, fy_err *err)
{
    if (be_name_explicit_cache(g, err) != FERRY_OK)
        return err->status;
    for (size_t i = 0; i < g->n_inputs; i++)
        if (identifier_name(g, g->inputs[i], err) != FERRY_OK)
            return err->status;
    for (size_t i = 0; i < g->n_outputs; i++)
        if (identifier_name(g, g->outputs[i], err) != FERRY_OK)
            return err->status;
    return FERRY_OK;
}

ferry_status be_mutate_cache_inputs(g_graph *g, const char *format, fy_err *err)
{
    for (size_t i = 0; i < g->n_states; i++) {
        if (g->states[i].form != GS_IN_PLACE)
            return fy_fail(err, FERRY_ERR_INTERNAL, "%s: a cache state not written in place "
                           "(the plan refuses a dynamic cache: state_forms)", format);
        g->states[i].form = GS_MUTATED;
    }
    if (be_name_mutated_cache(g, err) != FERRY_OK)
        return err->status;
    size_t n = 0;
    for (size_t i = 0; i < g->n_outputs; i++) {
        bool state = false;
        for (size_t k = 0; k < g->n_states; k++)
            state |= g->states[k].out == g->outputs[i];
        if (!state)
            g->outputs[n++] = g->outputs[i];
    }
    g->n_outputs = n;
    return FERRY_OK;
}
