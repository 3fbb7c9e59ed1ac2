/* ir_print.c — OpenVINO IR v11: the .xml of one lowered graph (layers, their ports with element
 * types and dims, edges) over a .bin holding every Const's bytes. This file writes the model:
 * its inputs, cache variables and outputs around the nodes (ir_nodes.c, over ir_layers.c).
 *
 * Every graph input is a Parameter (dims -1 where symbolic), every graph output a Result fed by
 * the port whose tensor name is the output's name. Each IR node is one layer, except where
 * OpenVINO spells an attribute as an input: reshape targets, slice bounds, axes, permutations
 * and gather axes become Const layers (made as constants of the graph, so they are placed in
 * the .bin like any other), and a reshape to a shape with more than one symbolic dim computes
 * it at run time from the inputs' ShapeOf, as the ONNX printer does. */
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "backends/openvino/ir_printer.h"
#include "util/dtype.h"
#include "util/crc_pieces.h"
#include "util/fs.h"

/* A stateful model's caches (openvino_finish took them out of the graph's inputs and outputs):
 * each is a variable named as its input, read with ReadValue, its rows reordered by beam_idx,
 * and written back with Assign. A variable starts as its ReadValue's initialiser, zeros
 * [batch, kv heads, 0, head dim] (the batch read off an input at run time): the empty cache of a
 * first call. The CPU plugin needs the initialiser once it folds the cache into its attention
 * node. */
static ferry_status read_states(printer *p)
{
    g_graph *g = p->g;
    int beam = G_NONE;
    for (size_t i = 0; i < g->n_inputs; i++)
        if (strcmp(g->values[g->inputs[i]].name, OV_BEAM_IDX) == 0)
            beam = g->inputs[i];
    for (size_t i = 0; i < g->n_states; i++) {
        if (g->states[i].form != GS_VARIABLE)
            continue; /* an explicit cache: a Parameter and a Result like any other */
        if (beam == G_NONE)
            return fy_fail(p->err, FERRY_ERR_INTERNAL, "OpenVINO: a cache without %s",
                           OV_BEAM_IDX);
        int v = g->states[i].in;
        g_shape s = g->values[v].shape;
        ferry_dtype dt = g->values[v].dtype;
        const char *type = ov_type(dt);
        if (s.rank != 4 || !type)
            return fy_fail(p->err, FERRY_ERR_INTERNAL, "OpenVINO: cache '%s' is not a float "
                           "[batch, kv heads, length, head dim]", g->values[v].name);
        char name[600];
        /* the first call's cache: zeros [batch, kv heads, 0, head dim] */
        ov_in init[2], dims[4];
        for (int k = 0; k < 4; k++) {
            snprintf(name, sizeof name, "%s/init", g->values[v].name);
            if (ov_runtime_dim(p, name, k, k == 2 ? g_dim_const(0) : s.d[k], &dims[k]) != FERRY_OK)
                return p->err->status;
        }
        snprintf(name, sizeof name, "%s/init/shape", g->values[v].name);
        ov_out so = {FERRY_I64, ov_shape1(4), NULL};
        init[1] = ov_node_port(ov_layer(p, "Concat", "opset1", name, "axis=\"0\"", dims, 4, &so, 1), 4,
                               FERRY_I64, &so.shape);
        if (ov_const_in(p, g_scalar_f(g, dt, 0.0), &init[0]) != FERRY_OK)
            return p->err->status;
        g_shape empty = s;
        empty.d[2] = g_dim_const(0);
        ov_out io = {dt, empty, NULL};
        snprintf(name, sizeof name, "%s/init", g->values[v].name);
        ov_in first = ov_node_port(ov_layer(p, "Broadcast", "opset3", name, "mode=\"numpy\"", init, 2,
                                            &io, 1), 2, dt, &empty);
        strbuf data = {0};
        sb_puts(&data, "variable_id=\"");
        ov_xml_text(&data, g->values[v].name);
        sb_printf(&data, "\" variable_type=\"%s\" variable_shape=\"", type);
        ov_shape_attr(&data, &s, &g->syms);
        sb_puts(&data, "\"");
        ov_out ro = {dt, s, NULL};
        snprintf(name, sizeof name, "%s/read", g->values[v].name);
        int id = ov_layer(p, "ReadValue", "opset6", name, data.data, &first, 1, &ro, 1);
        bool oom = data.oom;
        sb_free(&data);
        if (oom)
            return fy_fail(p->err, FERRY_ERR_NOMEM, "out of memory");
        ov_in gin[3] = {ov_node_port(id, 1, dt, &s)};
        if (ov_value_in(p, beam, &gin[1]) != FERRY_OK ||
            ov_const_in(p, g_scalar_i64(g, 0), &gin[2]) != FERRY_OK)
            return p->err->status;
        ov_out go = {dt, s, g->values[v].name};
        id = ov_layer(p, "Gather", "opset8", g->values[v].name, "batch_dims=\"0\"", gin, 3, &go, 1);
        p->at[v] = ov_node_port(id, 3, dt, &s);
    }
    return FERRY_OK;
}

static ferry_status write_states(printer *p)
{
    g_graph *g = p->g;
    for (size_t i = 0; i < g->n_states; i++) {
        const g_state st = g->states[i];
        if (st.form != GS_VARIABLE)
            continue;
        ov_in y;
        if (ov_value_in(p, st.out, &y) != FERRY_OK)
            return p->err->status;
        strbuf data = {0}, name = {0};
        sb_puts(&data, "variable_id=\"");
        ov_xml_text(&data, g->values[st.in].name);
        sb_puts(&data, "\"");
        sb_printf(&name, "%s/assign", g->values[st.in].name);
        ov_out o = {y.dtype, y.shape, NULL};
        ov_layer(p, "Assign", "opset6", name.data ? name.data : "", data.data, &y, 1, &o, 1);
        bool oom = data.oom || name.oom;
        sb_free(&data);
        sb_free(&name);
        if (oom)
            return fy_fail(p->err, FERRY_ERR_NOMEM, "out of memory");
    }
    return FERRY_OK;
}

ferry_status ov_print_model(g_graph *g, pl_file *bin, const ov_options *opt,
                            const char *graph_name, const char *dir, const char *xml_file,
                            uint32_t *crc, fy_err *err)
{
    printer p = {.g = g, .bin = bin, .opt = opt, .placing = xml_file == NULL, .err = err};
    ferry_status st = FERRY_OK;
    if (!ov_grow_at(&p)) {
        st = fy_fail(err, FERRY_ERR_NOMEM, "out of memory");
        goto done;
    }
    for (size_t i = 0; i < g->n_inputs; i++) {
        const g_value *x = &g->values[g->inputs[i]];
        const char *type = ov_type(x->dtype);
        if (!type) {
            st = fy_fail(err, FERRY_ERR_INTERNAL, "OpenVINO: input '%s' has dtype %s", x->name,
                         dt_st_name(x->dtype));
            goto done;
        }
        strbuf data = {0};
        sb_printf(&data, "shape=\"");
        ov_shape_attr(&data, &x->shape, &g->syms);
        sb_printf(&data, "\" element_type=\"%s\"", type);
        if (data.oom) {
            sb_free(&data);
            st = fy_fail(err, FERRY_ERR_NOMEM, "out of memory");
            goto done;
        }
        ov_out o = {x->dtype, x->shape, x->name};
        int id = ov_layer(&p, "Parameter", "opset1", x->name, data.data, NULL, 0, &o, 1);
        sb_free(&data);
        p.at[g->inputs[i]] = ov_node_port(id, 0, x->dtype, &x->shape);
    }
    if ((st = read_states(&p)) != FERRY_OK)
        goto done;
    /* nodes in order (inputs before their readers); the printer may add constants, never nodes */
    size_t n_nodes = g->n_nodes;
    for (size_t i = 0; i < n_nodes && st == FERRY_OK; i++)
        if (!g->nodes[i].dead)
            st = ov_emit_node(&p, i);
    for (size_t i = 0; i < g->n_outputs && st == FERRY_OK; i++) {
        ov_in y;
        if ((st = ov_value_in(&p, g->outputs[i], &y)) != FERRY_OK)
            break;
        char name[600];
        snprintf(name, sizeof name, "%s/sink_port_0", g->values[g->outputs[i]].name);
        ov_layer(&p, "Result", "opset1", name, NULL, &y, 1, NULL, 0);
    }
    if (st == FERRY_OK)
        st = write_states(&p);
    if (st != FERRY_OK || p.placing)
        goto done;
    strbuf xml = {0};
    sb_puts(&xml, "<?xml version=\"1.0\"?>\n<net name=\"");
    ov_xml_text(&xml, graph_name ? graph_name : "ferry");
    sb_printf(&xml, "\" version=\"11\">\n\t<layers>\n%s\t</layers>\n\t<edges>\n%s\t</edges>\n"
              "\t<rt_info>\n\t\t<info name=\"producer\" value=\"ferry %s\" />\n",
              p.layers.data ? p.layers.data : "", p.edges.data ? p.edges.data : "",
              FERRY_VERSION);
    if (opt->kv_cache_precision || opt->inference_precision) {
        /* compile options the runtime takes from the model unless the caller sets them */
        sb_puts(&xml, "\t\t<runtime_options>\n");
        if (opt->inference_precision)
            sb_printf(&xml, "\t\t\t<INFERENCE_PRECISION_HINT value=\"%s\" />\n",
                      opt->inference_precision);
        if (opt->kv_cache_precision)
            sb_printf(&xml, "\t\t\t<KV_CACHE_PRECISION value=\"%s\" />\n",
                      opt->kv_cache_precision);
        sb_puts(&xml, "\t\t</runtime_options>\n");
    }
    sb_puts(&xml, "\t</rt_info>\n</net>\n");
    if (xml.oom || p.layers.oom || p.edges.oom)
        st = fy_fail(err, FERRY_ERR_NOMEM, "out of memory writing %s", xml_file);
    else {
        char path[PATH_MAX];
        st = fs_join(path, sizeof path, dir, xml_file, err);
        if (st == FERRY_OK)
            st = fs_write_file(path, xml.data, xml.len, err);
        if (st == FERRY_OK)
            *crc = fy_crc32(xml.data, xml.len);
    }
    sb_free(&xml);
done:
    if (st == FERRY_OK && !g_ok(g))
        st = fy_fail(err, g->err.status, "%s", g->err.msg);
    sb_free(&p.layers);
    sb_free(&p.edges);
    free(p.at);
    free(p.shape_of);
    return st;
}
