/* et_file.c — a program as the .pte file the ExecuTorch runtime loads (docs/pte-format.md §1):
 *
 *   the Program flatbuffer (schema program.fbs, identifier ET12), built with io/flatbuf.c,
 *   with the 32-byte extended header "eh00" spliced in at byte 8 (program size, where the
 *   segments start, their length), zeros up to a 128-byte boundary, then segment 0: the
 *   constant segment, every weight and constant once at a 64-byte aligned offset, streamed
 *   from the checkpoint (store/placement.c) while the CRC-32 is taken.
 *
 * The Program says: schema version 0 (the runtime refuses a newer one), one execution plan
 * "forward" with its values, instructions, operators, delegates (their blobs inline), and the
 * arena's size as memory id 1 (non_const_buffer_sizes [0, arena]); constant_segment.offsets[k]
 * locates the tensor with data_buffer_idx k (offsets[0] is reserved). The delegates' weights
 * are named data: a segment each, after the constant segment or, for a constant a portable
 * kernel reads too, inside it (one copy). */
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "backends/executorch/executorch.h"
#include "io/flatbuf.h"
#include "util/crc_pieces.h"
#include "util/dtype.h"
#include "util/fs.h"

#define ET_SEGMENT_ALIGN 128
#define ET_HEADER_SIZE 32

/* ScalarType (scalar_type.fbs) of a dtype; -1 for none */
static int scalar_type(ferry_dtype dt)
{
    switch (dt) {
    case FERRY_U8: return 0;
    case FERRY_I8: return 1;
    case FERRY_I16: return 2;
    case FERRY_I32: return 3;
    case FERRY_I64: return 4;
    case FERRY_F16: return 5;
    case FERRY_F32: return 6;
    case FERRY_F64: return 7;
    case FERRY_BOOL: return 11;
    case FERRY_BF16: return 15;
    case FERRY_U16: return 27;
    case FERRY_U32: return 28;
    case FERRY_U64: return 29;
    default: return -1;
    }
}

static fb_ref tensor_table(fb_builder *b, et_program *p, const et_value *x)
{
    int st = scalar_type(x->dtype);
    if (st < 0) {
        et_fail(p, FERRY_ERR_UNSUPPORTED, "a tensor of %s, which ExecuTorch has no type for",
                ferry_dtype_name(x->dtype));
        return 0;
    }
    int32_t sizes[G_MAX_RANK];
    uint8_t order[G_MAX_RANK];
    for (int i = 0; i < x->rank; i++) {
        sizes[i] = (int32_t)x->sizes[i];
        order[i] = (uint8_t)i;
    }
    fb_ref vs = fb_vector(b, sizes, (size_t)x->rank, 4, 4);
    fb_ref vo = fb_vector(b, order, (size_t)x->rank, 1, 1);
    fb_ref alloc = 0;
    if (x->planned && !x->constant) {
        fb_table_start(b);
        fb_add_u32(b, 0, 1, 0);
        fb_add_u32(b, 1, (uint32_t)(x->offset & 0xffffffffu), 0);
        fb_add_u32(b, 2, (uint32_t)(x->offset >> 32), 0);
        alloc = fb_table_end(b);
    }
    fb_table_start(b);
    fb_add_u8(b, 0, (uint8_t)st, 0);
    fb_add_ref(b, 2, vs);
    fb_add_ref(b, 3, vo);
    fb_add_u32(b, 5, x->constant, 0);
    fb_add_ref(b, 6, alloc);
    fb_add_u8(b, 8, x->dynamic ? 1 : 0, 0);
    return fb_table_end(b);
}

static fb_ref value_table(fb_builder *b, et_program *p, const et_value *x)
{
    fb_ref val = 0;
    switch (x->kind) {
    case ET_NULL:
        fb_table_start(b);
        val = fb_table_end(b);
        break;
    case ET_INT:
        fb_table_start(b);
        fb_add_i64(b, 0, x->i, 0);
        val = fb_table_end(b);
        break;
    case ET_BOOL:
        fb_table_start(b);
        fb_add_u8(b, 0, x->b, 0);
        val = fb_table_end(b);
        break;
    case ET_DOUBLE:
        fb_table_start(b);
        fb_add_f64(b, 0, x->d, 0.0);
        val = fb_table_end(b);
        break;
    case ET_STRING: {
        fb_ref s = fb_string(b, x->s);
        fb_table_start(b);
        fb_add_ref(b, 0, s);
        val = fb_table_end(b);
        break;
    }
    case ET_INT_LIST: {
        int64_t *items = malloc((x->n_items ? (size_t)x->n_items : 1) * sizeof *items);
        if (!items) {
            et_fail(p, FERRY_ERR_NOMEM, "out of memory");
            return 0;
        }
        for (int i = 0; i < x->n_items; i++)
            items[i] = x->items[i];
        fb_ref v = fb_vector(b, items, (size_t)x->n_items, 8, 8);
        free(items);
        fb_table_start(b);
        fb_add_ref(b, 0, v);
        val = fb_table_end(b);
        break;
    }
    case ET_TENSOR_LIST: case ET_OPT_TENSOR_LIST: {
        int32_t *items = malloc((x->n_items ? (size_t)x->n_items : 1) * sizeof *items);
        if (!items) {
            et_fail(p, FERRY_ERR_NOMEM, "out of memory");
            return 0;
        }
        for (int i = 0; i < x->n_items; i++)
            items[i] = x->items[i];
        fb_ref v = fb_vector(b, items, (size_t)x->n_items, 4, 4);
        free(items);
        fb_table_start(b);
        fb_add_ref(b, 0, v);
        val = fb_table_end(b);
        break;
    }
    case ET_TENSOR:
        val = tensor_table(b, p, x);
        break;
    default:
        et_fail(p, FERRY_ERR_INTERNAL, "a value of kind %d", (int)x->kind);
        return 0;
    }
    fb_table_start(b);
    fb_add_union(b, 1, (uint8_t)x->kind, val);
    return fb_table_end(b);
}

static fb_ref int_vector(fb_builder *b, const int *v, size_t n)
{
    if (!n)
        return fb_vector(b, NULL, 0, 4, 4);
    int32_t items[1024];
    int32_t *use = n <= 1024 ? items : malloc(n * sizeof *use);
    if (!use)
        return 0;
    for (size_t i = 0; i < n; i++)
        use[i] = v[i];
    fb_ref r = fb_vector(b, use, n, 4, 4);
    if (use != items)
        free(use);
    return r;
}

/* The delegates, each the XNNPACK backend's with its blob inline (backend_delegate_data[i]). */
static fb_ref delegate_refs(fb_builder *b, et_program *p)
{
    fb_ref *refs = malloc((p->n_delegates ? p->n_delegates : 1) * sizeof *refs);
    if (!refs) {
        et_fail(p, FERRY_ERR_NOMEM, "out of memory");
        return 0;
    }
    for (size_t i = 0; i < p->n_delegates; i++) {
        fb_ref id = fb_string(b, "XnnpackBackend");
        fb_ref specs = fb_ref_vector(b, NULL, 0);
        fb_table_start(b);
        fb_add_u8(b, 0, 0 /* INLINE */, 0);
        fb_add_u32(b, 1, (uint32_t)i, 0);
        fb_ref processed = fb_table_end(b);
        fb_table_start(b);
        fb_add_ref(b, 0, id);
        fb_add_ref(b, 1, processed);
        fb_add_ref(b, 2, specs);
        refs[i] = fb_table_end(b);
    }
    fb_ref v = fb_ref_vector(b, refs, p->n_delegates);
    free(refs);
    return v;
}

/* The delegates' blobs (force_align 16, as the runtime's backends read them). */
static fb_ref delegate_data(fb_builder *b, et_program *p)
{
    if (!p->n_delegates)
        return 0;
    fb_ref *refs = malloc(p->n_delegates * sizeof *refs);
    if (!refs) {
        et_fail(p, FERRY_ERR_NOMEM, "out of memory");
        return 0;
    }
    for (size_t i = 0; i < p->n_delegates; i++) {
        fb_ref data = fb_vector(b, p->delegates[i].blob, p->delegates[i].len, 1, 16);
        fb_table_start(b);
        fb_add_ref(b, 0, data);
        refs[i] = fb_table_end(b);
    }
    fb_ref v = fb_ref_vector(b, refs, p->n_delegates);
    free(refs);
    return v;
}

static fb_ref execution_plan(fb_builder *b, et_program *p)
{
    fb_ref *refs = malloc((p->n_values + p->n_instrs + p->n_operators + 1) * sizeof *refs);
    if (!refs) {
        et_fail(p, FERRY_ERR_NOMEM, "out of memory");
        return 0;
    }
    for (size_t i = 0; i < p->n_values && p->st == FERRY_OK; i++)
        refs[i] = value_table(b, p, &p->values[i]);
    fb_ref values = fb_ref_vector(b, refs, p->n_values);
    for (size_t i = 0; i < p->n_instrs; i++) {
        const et_instr *in = &p->instrs[i];
        fb_ref args = int_vector(b, in->args, (size_t)in->n_args);
        fb_table_start(b);
        fb_add_i32(b, 0, in->delegate >= 0 ? in->delegate : in->op, 0);
        fb_add_ref(b, 1, args);
        fb_ref call = fb_table_end(b);
        fb_table_start(b);
        fb_add_union(b, 1, in->delegate >= 0 ? 2 /* DelegateCall */ : 1 /* KernelCall */,
                     call);
        refs[i] = fb_table_end(b);
    }
    fb_ref instrs = fb_ref_vector(b, refs, p->n_instrs);
    fb_ref none = fb_vector(b, NULL, 0, 4, 4);
    fb_table_start(b);
    fb_add_ref(b, 0, none);
    fb_add_ref(b, 1, none);
    fb_add_ref(b, 2, instrs);
    fb_ref chain = fb_table_end(b);
    fb_ref chains = fb_ref_vector(b, &chain, 1);
    for (size_t i = 0; i < p->n_operators; i++) {
        const char *full = p->operators[i], *ns = strstr(full, "::");
        const char *dot = strchr(ns ? ns + 2 : full, '.');
        char name[128];
        snprintf(name, sizeof name, "%.*s", dot ? (int)(dot - full) : (int)strlen(full), full);
        fb_ref n = fb_string(b, name), o = fb_string(b, dot ? dot + 1 : "");
        fb_table_start(b);
        fb_add_ref(b, 0, n);
        fb_add_ref(b, 1, o);
        refs[i] = fb_table_end(b);
    }
    fb_ref operators = fb_ref_vector(b, refs, p->n_operators);
    free(refs);
    fb_ref delegates = delegate_refs(b, p);
    int64_t buffers[2] = {0, (int64_t)p->arena};
    fb_ref sizes = fb_vector(b, buffers, 2, 8, 8);
    fb_ref inputs = int_vector(b, p->inputs, p->n_inputs);
    fb_ref outputs = int_vector(b, p->outputs, p->n_outputs);
    fb_ref name = fb_string(b, "forward");
    fb_table_start(b);
    fb_add_ref(b, 0, name);
    fb_add_ref(b, 2, values);
    fb_add_ref(b, 3, inputs);
    fb_add_ref(b, 4, outputs);
    fb_add_ref(b, 5, chains);
    fb_add_ref(b, 6, operators);
    fb_add_ref(b, 7, delegates);
    fb_add_ref(b, 8, sizes);
    return fb_table_end(b);
}

/* Where the segments lie: the constant segment (segment 0, the constants at `offsets`), and a
 * segment per named datum, which may lie inside it (a constant a delegate reads too). */
typedef struct et_layout {
    uint64_t *offsets;       /* per data_buffer_idx */
    uint64_t constants;      /* the constant segment's bytes */
    uint64_t *named_at, *named_len; /* per named datum */
    uint64_t size;           /* every segment's bytes */
} et_layout;

static fb_ref segment_table(fb_builder *b, uint64_t offset, uint64_t size)
{
    fb_table_start(b);
    fb_add_u64(b, 0, offset, 0);
    fb_add_u64(b, 1, size, 0);
    return fb_table_end(b);
}

/* The Program flatbuffer, in `b`. */
static const uint8_t *program(fb_builder *b, et_program *p, const et_layout *lay, size_t *len)
{
    fb_ref plan = execution_plan(b, p);
    fb_ref plans = fb_ref_vector(b, &plan, 1);
    fb_ref inline_data = delegate_data(b, p);
    fb_ref segments = 0, named = 0;
    if (lay->size) {
        fb_ref *refs = malloc((p->n_named + 1) * sizeof *refs);
        if (!refs) {
            et_fail(p, FERRY_ERR_NOMEM, "out of memory");
            return NULL;
        }
        refs[0] = segment_table(b, 0, lay->constants);
        for (size_t i = 0; i < p->n_named; i++)
            refs[i + 1] = segment_table(b, lay->named_at[i], lay->named_len[i]);
        segments = fb_ref_vector(b, refs, p->n_named + 1);
        for (size_t i = 0; i < p->n_named; i++) {
            char name[512];
            et_named_key(p, i, name, sizeof name);
            fb_ref key = fb_string(b, name);
            fb_table_start(b);
            fb_add_ref(b, 0, key);
            fb_add_u32(b, 1, (uint32_t)(i + 1), 0);
            refs[i] = fb_table_end(b);
        }
        named = p->n_named ? fb_ref_vector(b, refs, p->n_named) : 0;
        free(refs);
    }
    const uint64_t *offsets = lay->offsets;
    fb_ref offs = fb_vector(b, offsets, p->n_constants + 1, 8, 8);
    fb_table_start(b);
    fb_add_u32(b, 0, 0, 0); /* segment 0 */
    fb_add_ref(b, 1, offs);
    fb_ref constant_segment = fb_table_end(b);
    fb_table_start(b);
    fb_add_ref(b, 1, plans);
    fb_add_ref(b, 3, inline_data);
    fb_add_ref(b, 4, segments);
    fb_add_ref(b, 5, constant_segment);
    fb_add_ref(b, 7, named);
    fb_ref root = fb_table_end(b);
    if (p->st != FERRY_OK)
        return NULL;
    const uint8_t *out = fb_finish(b, root, "ET12", len);
    if (!out)
        et_fail(p, FERRY_ERR_NOMEM, "the program's flatbuffer could not be built (out of "
                "memory, or larger than 2 GiB)");
    return out;
}

static void put_u32(uint8_t *at, uint32_t v)
{
    for (int i = 0; i < 4; i++)
        at[i] = (uint8_t)(v >> (8 * i));
}

static void put_u64(uint8_t *at, uint64_t v)
{
    for (int i = 0; i < 8; i++)
        at[i] = (uint8_t)(v >> (8 * i));
}

/* Places `d` in the file (at *at, *len bytes): a weight's bytes or one part of its quantized
 * form where the writer streams them, a constant's where the graph holds it. A datum placed
 * already (a tied table a delegate and a kernel both read) is that place. `holder` names what
 * reads it, for messages. */
static ferry_status place_data(et_program *p, pl_file *pl, const et_data *d, const char *holder,
                               uint64_t *at, uint64_t *len)
{
    const g_value *x = &p->g->values[d->value];
    *len = et_data_bytes(p, d);
    if (d->part_of_quantized) {
        if (pl_place(pl, &d->recipe, d->part, at, len, p->err) != FERRY_OK)
            return p->st = p->err->status;
    } else if (x->kind == GV_WEIGHT) {
        int rank;
        int64_t shape[W_MAX_RANK];
        ferry_dtype dt;
        w_part_info(&x->weight, W_PART_DATA, &rank, shape, &dt, len);
        if (dt != x->dtype)
            return et_fail(p, FERRY_ERR_UNSUPPORTED, "weight '%s' is stored as %s, which "
                           "an %s tensor of %s cannot hold", x->name, ferry_dtype_name(dt),
                           holder, ferry_dtype_name(x->dtype));
        if (pl_place(pl, &x->weight, W_PART_DATA, at, len, p->err) != FERRY_OK)
            return p->st = p->err->status;
    } else {
        if (pl_place_const(pl, x, p->err) != FERRY_OK)
            return p->st = p->err->status;
        if (!pl_find_const(pl, x, at))
            return et_fail(p, FERRY_ERR_INTERNAL, "constant '%s' was not placed", x->name);
    }
    return FERRY_OK;
}

/* Places every constant tensor in the segment: offsets[k] for data_buffer_idx k. */
static ferry_status place_constants(et_program *p, pl_file *pl, uint64_t *offsets)
{
    offsets[0] = 0;
    for (size_t k = 0; k < p->n_constants; k++) {
        uint64_t len;
        if (place_data(p, pl, &p->constants[k], "ExecuTorch", &offsets[k + 1], &len) !=
            FERRY_OK)
            return p->st;
    }
    return FERRY_OK;
}

/* Places each named datum: a weight or constant placed already (the constant segment holds
 * it) is that place; the others follow the constant segment. */
static ferry_status place_named(et_program *p, pl_file *pl, et_layout *lay)
{
    for (size_t i = 0; i < p->n_named; i++)
        if (place_data(p, pl, &p->named[i], "XNNPACK", &lay->named_at[i], &lay->named_len[i]) !=
            FERRY_OK)
            return p->st;
    return FERRY_OK;
}

static ferry_status write_all(int fd, const char *path, const uint8_t *data, size_t n,
                              fy_err *err)
{
    size_t done = 0;
    while (done < n) {
        ssize_t w = pwrite(fd, data + done, n - done, (off_t)done);
        if (w < 0 && errno == EINTR)
            continue;
        if (w <= 0)
            return fy_fail(err, errno == ENOSPC ? FERRY_ERR_NOSPACE : FERRY_ERR_IO,
                           "%s: write failed: %s", path, strerror(errno));
        done += (size_t)w;
    }
    return FERRY_OK;
}

ferry_status et_write_file(et_program *p, const char *path, ws_progress *progress,
                           uint32_t *crc, fy_err *err)
{
    if (p->st != FERRY_OK)
        return p->st;
    pl_file *pl = pl_new("constants", ET_ALIGN);
    et_layout lay = {
        .offsets = malloc((p->n_constants + 1) * sizeof *lay.offsets),
        .named_at = malloc((p->n_named + 1) * sizeof *lay.named_at),
        .named_len = malloc((p->n_named + 1) * sizeof *lay.named_len),
    };
    if (!pl || !lay.offsets || !lay.named_at || !lay.named_len) {
        pl_free(pl);
        free(lay.offsets), free(lay.named_at), free(lay.named_len);
        return et_fail(p, FERRY_ERR_NOMEM, "out of memory");
    }
    fb_builder b;
    fb_init(&b);
    uint8_t *file = NULL;
    size_t fb_len = 0, head = 0;
    uint64_t segment = 0, base = 0;
    ferry_status st = place_constants(p, pl, lay.offsets);
    if (st == FERRY_OK) {
        lay.constants = pl_size(pl);
        st = place_named(p, pl, &lay);
    }
    if (st == FERRY_OK) {
        segment = lay.size = pl_size(pl);
        const uint8_t *fbuf = program(&b, p, &lay, &fb_len);
        st = p->st;
        if (st == FERRY_OK && fb_len < 8)
            st = et_fail(p, FERRY_ERR_INTERNAL, "a flatbuffer of %zu bytes", fb_len);
        /* the extended header, only where there are segments (docs/pte-format.md §1.1) */
        head = fb_len + (segment ? ET_HEADER_SIZE : 0);
        if (st == FERRY_OK && !(file = malloc(head)))
            st = et_fail(p, FERRY_ERR_NOMEM, "out of memory");
        if (st == FERRY_OK && segment) {
            base = (head + ET_SEGMENT_ALIGN - 1) / ET_SEGMENT_ALIGN * ET_SEGMENT_ALIGN;
            memcpy(file, fbuf, 8);
            uint32_t root = (uint32_t)fbuf[0] | (uint32_t)fbuf[1] << 8 |
                            (uint32_t)fbuf[2] << 16 | (uint32_t)fbuf[3] << 24;
            put_u32(file, root + ET_HEADER_SIZE);
            memcpy(file + 8, "eh00", 4);
            put_u32(file + 12, ET_HEADER_SIZE);
            put_u64(file + 16, head);
            put_u64(file + 24, base);
            put_u64(file + 32, segment);
            memcpy(file + 8 + ET_HEADER_SIZE, fbuf + 8, fb_len - 8);
        } else if (st == FERRY_OK) {
            memcpy(file, fbuf, fb_len);
        }
    }
    fb_free(&b);
    int fd = -1;
    if (st == FERRY_OK && (fd = open(path, O_RDWR | O_CREAT | O_EXCL | O_CLOEXEC, 0644)) < 0)
        st = fy_fail(err, errno == ENOSPC ? FERRY_ERR_NOSPACE : FERRY_ERR_IO,
                     "%s: cannot create: %s", path, strerror(errno));
    uint64_t size = segment ? base + segment : head;
    fy_crc_pieces pieces = {0};
    if (st == FERRY_OK)
        st = fs_reserve(fd, path, size, err);
    if (st == FERRY_OK && (st = write_all(fd, path, file, head, err)) == FERRY_OK)
        fy_crc_pieces_add(&pieces, file, head, 0);
    const ws_observer seen = {fy_crc_pieces_observer, &pieces};
    if (st == FERRY_OK && segment)
        st = pl_write_fd(pl, fd, path, base, progress, &seen, err);
    if (st == FERRY_OK && fsync(fd) != 0 && errno != EINVAL)
        st = fy_fail(err, errno == ENOSPC ? FERRY_ERR_NOSPACE : FERRY_ERR_IO,
                     "%s: sync failed: %s", path, strerror(errno));
    if (fd >= 0 && close(fd) != 0 && st == FERRY_OK)
        st = fy_fail(err, FERRY_ERR_IO, "%s: close failed: %s", path, strerror(errno));
    if (st == FERRY_OK)
        *crc = fy_crc_pieces_value(&pieces, size);
    free(file);
    free(lay.offsets), free(lay.named_at), free(lay.named_len);
    pl_free(pl);
    return st;
}
