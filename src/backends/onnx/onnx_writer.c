/* onnx_writer.c — IR graph -> onnx.proto ModelProto. Field numbers are onnx.proto's. */
#include "backends/onnx/onnx_writer.h"

#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "backends/onnx/pb.h"
#include "util/dtype.h"
#include "util/fs.h"

/* onnx.proto field numbers */
enum { MODEL_IR_VERSION = 1, MODEL_PRODUCER_NAME = 2, MODEL_PRODUCER_VERSION = 3, MODEL_GRAPH = 7,
       MODEL_OPSET_IMPORT = 8 };
enum { OPSET_DOMAIN = 1, OPSET_VERSION = 2 };
enum { GRAPH_NODE = 1, GRAPH_NAME = 2, GRAPH_INITIALIZER = 5, GRAPH_INPUT = 11, GRAPH_OUTPUT = 12 };
enum { NODE_INPUT = 1, NODE_OUTPUT = 2, NODE_NAME = 3, NODE_OP_TYPE = 4, NODE_ATTRIBUTE = 5 };
enum { ATTR_NAME = 1, ATTR_F = 2, ATTR_I = 3, ATTR_INTS = 8, ATTR_TYPE = 20 };
enum { ATTR_TYPE_FLOAT = 1, ATTR_TYPE_INT = 2, ATTR_TYPE_INTS = 7 };
enum { TENSOR_DIMS = 1, TENSOR_DATA_TYPE = 2, TENSOR_NAME = 8, TENSOR_RAW_DATA = 9,
       TENSOR_EXTERNAL_DATA = 13, TENSOR_DATA_LOCATION = 14 };
enum { ENTRY_KEY = 1, ENTRY_VALUE = 2 };
enum { VI_NAME = 1, VI_TYPE = 2 };
enum { TYPE_TENSOR = 1, TTENSOR_ELEM_TYPE = 1, TTENSOR_SHAPE = 2, SHAPE_DIM = 1, DIM_VALUE = 1,
       DIM_PARAM = 2 };
enum { LOCATION_EXTERNAL = 1 };

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

static int onnx_dtype(ferry_dtype dt)
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
    default: return 0;
    }
}

g_graph *onnx_lower(const g_graph *g, fy_err *err)
{
    g_graph *p = g_decompose(g, NULL, err);
    if (p && g_check(p, err) != FERRY_OK) {
        g_free(p);
        return NULL;
    }
    return p;
}

static void attr_int(pb_buf *node, const char *name, int64_t v)
{
    pb_buf a = {0};
    pb_string(&a, ATTR_NAME, name);
    pb_int(&a, ATTR_I, v);
    pb_int(&a, ATTR_TYPE, ATTR_TYPE_INT);
    pb_msg(node, NODE_ATTRIBUTE, &a);
    pb_free(&a);
}

static void attr_ints(pb_buf *node, const char *name, const int64_t *v, int n)
{
    pb_buf a = {0};
    pb_string(&a, ATTR_NAME, name);
    for (int i = 0; i < n; i++)
        pb_int(&a, ATTR_INTS, v[i]);
    pb_int(&a, ATTR_TYPE, ATTR_TYPE_INTS);
    pb_msg(node, NODE_ATTRIBUTE, &a);
    pb_free(&a);
}

static const char *value_name(const g_graph *g, int v)
{
    return v == G_NONE ? "" : g->values[v].name;
}

static ferry_status emit_node(const g_graph *g, const g_node *n, int opset, pb_buf *graph,
                              fy_err *err)
{
    pb_buf nb = {0};
    int n_in = n->n_in;
    bool axes_as_attr = (n->op == G_REDUCE_MEAN || n->op == G_REDUCE_MAX) && opset < 18;
    if (axes_as_attr)
        n_in = 1;
    for (int i = 0; i < n_in; i++)
        pb_string(&nb, NODE_INPUT, value_name(g, n->in[i]));
    pb_string(&nb, NODE_OUTPUT, value_name(g, n->out[0]));
    pb_string(&nb, NODE_NAME, n->name);
    pb_string(&nb, NODE_OP_TYPE, g_op_name(n->op));
    switch (n->op) {
    case G_GEMM:
        attr_int(&nb, "transB", 1);
        break;
    case G_GATHER: case G_CONCAT: case G_SOFTMAX: case G_SCATTER_ELEMENTS:
        attr_int(&nb, "axis", n->ints[0]);
        break;
    case G_TRANSPOSE:
        attr_ints(&nb, "perm", n->ints, n->n_ints);
        break;
    case G_CAST:
        attr_int(&nb, "to", onnx_dtype(n->to));
        break;
    case G_REDUCE_MEAN: case G_REDUCE_MAX:
        attr_int(&nb, "keepdims", n->ints[0]);
        if (axes_as_attr) {
            const g_value *ax = &g->values[n->in[1]];
            attr_ints(&nb, "axes", ax->data, (int)(ax->nbytes / 8));
        }
        break;
    case G_SHAPE:
        if (n->ints[0] != 0)
            attr_int(&nb, "start", n->ints[0]);
        if (n->ints[1] < INT64_MAX)
            attr_int(&nb, "end", n->ints[1]);
        break;
    default:
        if (g_op_is_semantic(n->op)) {
            pb_free(&nb);
            return fy_fail(err, FERRY_ERR_INTERNAL, "node '%s': semantic op %s reached the ONNX "
                           "printer undecomposed", n->name, g_op_name(n->op));
        }
        break;
    }
    pb_msg(graph, GRAPH_NODE, &nb);
    pb_free(&nb);
    return FERRY_OK;
}

static void emit_value_info(const g_graph *g, int v, pb_buf *graph, uint32_t field)
{
    const g_value *x = &g->values[v];
    pb_buf vi = {0}, type = {0}, tt = {0}, shape = {0}, dim = {0};
    for (int i = 0; i < x->shape.rank; i++) {
        int64_t c;
        pb_reset(&dim);
        if (g_dim_is_const(x->shape.d[i], &c)) {
            pb_int(&dim, DIM_VALUE, c);
        } else if (!x->shape.d[i].unknown) {
            char buf[256];
            g_dim_print(x->shape.d[i], &g->syms, buf, sizeof buf);
            pb_string(&dim, DIM_PARAM, buf);
        }
        pb_msg(&shape, SHAPE_DIM, &dim);
    }
    pb_int(&tt, TTENSOR_ELEM_TYPE, onnx_dtype(x->dtype));
    pb_msg(&tt, TTENSOR_SHAPE, &shape);
    pb_msg(&type, TYPE_TENSOR, &tt);
    pb_string(&vi, VI_NAME, x->name);
    pb_msg(&vi, VI_TYPE, &type);
    pb_msg(graph, field, &vi);
    pb_free(&vi);
    pb_free(&type);
    pb_free(&tt);
    pb_free(&shape);
    pb_free(&dim);
}

static void entry(pb_buf *t, const char *key, const char *value)
{
    pb_buf e = {0};
    pb_string(&e, ENTRY_KEY, key);
    pb_string(&e, ENTRY_VALUE, value);
    pb_msg(t, TENSOR_EXTERNAL_DATA, &e);
    pb_free(&e);
}

static void emit_initializer(const g_value *x, const char *data_file, uint64_t offset,
                             uint64_t length, pb_buf *graph)
{
    pb_buf t = {0};
    for (int i = 0; i < x->shape.rank; i++) {
        int64_t c = 0;
        g_dim_is_const(x->shape.d[i], &c);
        pb_int(&t, TENSOR_DIMS, c);
    }
    pb_int(&t, TENSOR_DATA_TYPE, onnx_dtype(x->dtype));
    pb_string(&t, TENSOR_NAME, x->name);
    if (x->kind == GV_CONST) {
        pb_bytes(&t, TENSOR_RAW_DATA, x->data, x->nbytes);
    } else {
        char num[32];
        entry(&t, "location", data_file);
        snprintf(num, sizeof num, "%llu", (unsigned long long)offset);
        entry(&t, "offset", num);
        snprintf(num, sizeof num, "%llu", (unsigned long long)length);
        entry(&t, "length", num);
        pb_int(&t, TENSOR_DATA_LOCATION, LOCATION_EXTERNAL);
    }
    pb_msg(graph, GRAPH_INITIALIZER, &t);
    pb_free(&t);
}

static bool no_space(int e)
{
    return e == ENOSPC || e == EFBIG || e == EDQUOT;
}

static int create_exclusive(const char *path, fy_err *err)
{
    int fd = open(path, O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0644);
    if (fd < 0)
        fy_fail(err, no_space(errno) ? FERRY_ERR_NOSPACE : FERRY_ERR_IO, "%s: cannot create: %s",
                path, strerror(errno));
    return fd;
}

static ferry_status finish_file(int fd, const char *path, fy_err *err)
{
    if (fsync(fd) != 0 && errno != EINVAL) {
        int e = errno;
        close(fd);
        return fy_fail(err, no_space(e) ? FERRY_ERR_NOSPACE : FERRY_ERR_IO, "%s: sync failed: %s",
                       path, strerror(e));
    }
    if (close(fd) != 0)
        return fy_fail(err, no_space(errno) ? FERRY_ERR_NOSPACE : FERRY_ERR_IO,
                       "%s: close failed: %s", path, strerror(errno));
    return FERRY_OK;
}

typedef struct placed {
    g_weight w;
    uint64_t offset, length;
} placed;

struct onnx_data {
    char *file_name;
    placed *items;
    size_t n, cap;
    uint64_t size;
};

onnx_data *onnx_data_new(const char *file_name)
{
    onnx_data *d = calloc(1, sizeof *d);
    if (d && !(d->file_name = strdup(file_name))) {
        free(d);
        return NULL;
    }
    return d;
}

void onnx_data_free(onnx_data *d)
{
    if (!d)
        return;
    free(d->file_name);
    free(d->items);
    free(d);
}

static const placed *find_placed(const onnx_data *d, const g_weight *w)
{
    for (size_t i = 0; i < d->n; i++)
        if (d->items[i].w.src == w->src && d->items[i].w.dtype == w->dtype &&
            d->items[i].w.transpose == w->transpose)
            return &d->items[i];
    return NULL;
}

ferry_status onnx_data_add(onnx_data *d, const g_graph *g, fy_err *err)
{
    for (size_t i = 0; i < g->n_values; i++) {
        const g_value *x = &g->values[i];
        if (x->kind != GV_WEIGHT || x->n_uses == 0 || find_placed(d, &x->weight))
            continue;
        if (d->n == d->cap) {
            size_t cap = d->cap ? d->cap * 2 : 256;
            placed *np = realloc(d->items, cap * sizeof *np);
            if (!np)
                return fy_fail(err, FERRY_ERR_NOMEM, "out of memory");
            d->items = np;
            d->cap = cap;
        }
        placed *p = &d->items[d->n++];
        p->w = x->weight;
        p->offset = (d->size + ONNX_DATA_ALIGN - 1) / ONNX_DATA_ALIGN * ONNX_DATA_ALIGN;
        p->length = ws_nbytes(&x->weight);
        d->size = p->offset + p->length;
    }
    return FERRY_OK;
}

ferry_status onnx_data_write(onnx_data *d, const char *dir, ws_progress *progress, fy_err *err)
{
    char path[PATH_MAX];
    if (fs_join(path, sizeof path, dir, d->file_name, err) != FERRY_OK)
        return err->status;
    int fd = create_exclusive(path, err);
    if (fd < 0)
        return err->status;
    if (progress) {
        progress->done = 0;
        progress->total = 0;
        for (size_t i = 0; i < d->n; i++)
            progress->total += d->items[i].length;
    }
    ws_writer *wr = NULL;
    ferry_status st = ws_writer_open(fd, path, progress, &wr, err);
    for (size_t i = 0; i < d->n && st == FERRY_OK; i++)
        st = ws_writer_put(wr, &d->items[i].w, d->items[i].offset, err);
    ferry_status cst = ws_writer_close(wr, err);
    if (st == FERRY_OK)
        st = cst;
    if (st == FERRY_OK && ftruncate(fd, (off_t)d->size) != 0)
        st = fy_fail(err, no_space(errno) ? FERRY_ERR_NOSPACE : FERRY_ERR_IO,
                     "%s: cannot set size: %s", path, strerror(errno));
    if (st != FERRY_OK) {
        close(fd);
        return st;
    }
    return finish_file(fd, path, err);
}

ferry_status onnx_write_model(const g_graph *g, const onnx_data *data, const onnx_options *opt,
                              const char *dir, const char *file, fy_err *err)
{
    char model_path[PATH_MAX];
    if (fs_join(model_path, sizeof model_path, dir, file, err) != FERRY_OK)
        return err->status;
    pb_buf graph = {0}, model = {0}, opset = {0};
    int mfd = -1;
    ferry_status st = FERRY_OK;

    for (size_t i = 0; i < g->n_nodes; i++)
        if (!g->nodes[i].dead && (st = emit_node(g, &g->nodes[i], opt->opset, &graph, err)))
            goto done;
    pb_string(&graph, GRAPH_NAME, opt->graph_name ? opt->graph_name : "ferry");
    for (size_t i = 0; i < g->n_values; i++) {
        const g_value *x = &g->values[i];
        if ((x->kind != GV_WEIGHT && x->kind != GV_CONST) || x->n_uses == 0)
            continue;
        const placed *p = x->kind == GV_WEIGHT ? find_placed(data, &x->weight) : NULL;
        if (x->kind == GV_WEIGHT && !p) {
            st = fy_fail(err, FERRY_ERR_INTERNAL, "weight '%s' was not placed in %s", x->name,
                         data->file_name);
            goto done;
        }
        emit_initializer(x, data->file_name, p ? p->offset : 0, p ? p->length : 0, &graph);
    }
    for (size_t i = 0; i < g->n_inputs; i++)
        emit_value_info(g, g->inputs[i], &graph, GRAPH_INPUT);
    for (size_t i = 0; i < g->n_outputs; i++)
        emit_value_info(g, g->outputs[i], &graph, GRAPH_OUTPUT);

    pb_int(&model, MODEL_IR_VERSION, onnx_ir_version(opt->opset));
    pb_string(&model, MODEL_PRODUCER_NAME, "ferry");
    pb_string(&model, MODEL_PRODUCER_VERSION, FERRY_VERSION);
    pb_msg(&model, MODEL_GRAPH, &graph);
    pb_string(&opset, OPSET_DOMAIN, "");
    pb_int(&opset, OPSET_VERSION, opt->opset);
    pb_msg(&model, MODEL_OPSET_IMPORT, &opset);
    if (model.oom || graph.oom) {
        st = fy_fail(err, FERRY_ERR_NOMEM, "out of memory encoding %s", model_path);
        goto done;
    }
    if ((mfd = create_exclusive(model_path, err)) < 0) {
        st = err->status;
        goto done;
    }
    if ((st = ws_pwrite_all(mfd, model_path, model.data, model.len, 0, err)))
        goto done;
    st = finish_file(mfd, model_path, err);
    mfd = -1;
done:
    if (mfd >= 0)
        close(mfd);
    pb_free(&graph);
    pb_free(&model);
    pb_free(&opset);
    return st;
}
