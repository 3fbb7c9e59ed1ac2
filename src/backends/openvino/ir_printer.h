/* ir_printer.h — the state the OpenVINO IR printer carries over one graph and the pieces its
 * files share: ir_layers.c writes layers, Const layers and shapes computed at run time,
 * ir_nodes.c writes each lowered node as its layers, ir_print.c the model around them (inputs,
 * cache variables, outputs, the .xml). Only those three include this. */
#ifndef FERRY_BACKENDS_OPENVINO_IR_PRINTER_H
#define FERRY_BACKENDS_OPENVINO_IR_PRINTER_H

#include <stdbool.h>
#include <stdint.h>

#include "backends/openvino/openvino.h"
#include "util/strbuf.h"

/* An output port of a layer, with what it carries. */
typedef struct ov_in {
    int layer, port;
    ferry_dtype dtype;
    g_shape shape;
} ov_in;

/* What a layer's output port declares. */
typedef struct ov_out {
    ferry_dtype dtype;
    g_shape shape;
    const char *names;       /* tensor names (NULL: none) */
} ov_out;

typedef struct printer {
    g_graph *g;
    pl_file *bin;
    const ov_options *opt;
    bool placing;            /* the first pass: place the bytes, write nothing */
    strbuf layers, edges;
    int next_layer;
    ov_in *at;               /* per value id: the port that carries it (layer -1: none yet) */
    int *shape_of;           /* per value id: its ShapeOf layer (-1: none yet) */
    size_t n_at;
    fy_err *err;
} printer;

/* ir_layers.c */
const char *ov_type(ferry_dtype dt);      /* "f32", "u4", ...; NULL: none */
void ov_xml_text(strbuf *b, const char *s);
/* a shape as an attribute value; with `syms`, symbolic dims as "?" or "min..max" */
void ov_shape_attr(strbuf *b, const g_shape *s, const g_symtab *syms);
bool ov_grow_at(printer *p);             /* p->at and p->shape_of cover every value */
ov_in ov_node_port(int layer, int port, ferry_dtype dt, const g_shape *s);
g_shape ov_shape1(int64_t n);            /* [n] */
/* one layer with its attributes `data` and its inputs' edges; its id */
int ov_layer(printer *p, const char *type, const char *version, const char *name,
             const char *data, const ov_in *ins, int n_in, const ov_out *outs, int n_out);
/* a Const layer over `length` bytes at `offset` of the .bin; -1 when out of memory */
int ov_const_layer(printer *p, const char *name, ferry_dtype dt, const g_shape *s,
                   uint64_t offset, uint64_t length, const char *names);
/* places (first pass) or finds (second) part `part` of weight recipe `w` */
ferry_status ov_weight_bytes(printer *p, const g_weight *w, w_part part, const char *name,
                             uint64_t *offset, uint64_t *length);
/* the port carrying value `v` (a Const layer the first time a constant or weight is read) */
ferry_status ov_value_in(printer *p, int v, ov_in *out);
ferry_status ov_const_in(printer *p, int v, ov_in *out);      /* v may be G_NONE: the error */
ferry_status ov_i64_in(printer *p, int n, const int64_t *vals, ov_in *out);
/* dim `d` as int64 [1] computed at run time from the inputs' shapes */
ferry_status ov_runtime_dim(printer *p, const char *node, int i, g_dim d, ov_in *out);
/* reshape node `n`'s target shape input */
ferry_status ov_reshape_target(printer *p, const g_node *n, ov_in *out);

/* ir_nodes.c: node `index` of p->g as its layers */
ferry_status ov_emit_node(printer *p, size_t index);

#endif
