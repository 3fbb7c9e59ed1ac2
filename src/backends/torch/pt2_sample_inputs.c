/* pt2_sample_inputs.c — a program's example inputs (data/sample_inputs/model.pt), which
 * torch.export.load hands back as `program.example_inputs` and AOTInductor compiles against.
 *
 * The entry is what torch.save writes for ((), {name: tensor, ...}): a zip of stored entries
 * under "archive/" holding data.pkl (a protocol-2 pickle whose tensors are
 * torch._utils._rebuild_tensor_v2 over persistent storages), each storage's raw bytes as
 * data/<key>, and version, .format_version, .storage_alignment and byteorder. Only the
 * globals torch's weights_only unpickler admits are named, so torch loads it without its
 * fallback to full unpickling.
 *
 * Written for a program whose every input is one a caller fills from a tokenizer's output (a
 * plain export: ids, a mask, positions and token types where it takes them, as the family
 * marked them: g_input_role), in its order: each at its hint shape, the size torch retraces
 * with (pt2_writer.c), holding a valid call: token 0, a mask of ones, positions from 0, token
 * type 0. A generation component also takes its cache, which would make the example as large
 * as the cache itself: its entry stays empty (example_inputs None). */
#include <errno.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include "backends/torch/pt2.h"
#include "io/zip.h"
#include "util/strbuf.h"

/* The most inputs an example holds: one of each role a caller fills */
#define N_TOKEN_INPUTS (GI_ROLE_COUNT - 1)
/* The most elements an example input may have (512 KiB of int64): an export traced at a
 * larger shape gets no example rather than megabytes of zeros in every archive */
#define MAX_EXAMPLE_ELEMENTS (1 << 16)

typedef struct example {
    const char *name;
    g_input_role role;
    int64_t rows, cols;
} example;

/* ---- pickle opcodes (protocol 2), as torch.save's pickler emits them ---- */

static void op(strbuf *b, char c)
{
    sb_putn(b, &c, 1);
}

static void op_u32(strbuf *b, char c, uint32_t v)
{
    unsigned char le[5] = {(unsigned char)c, (unsigned char)v, (unsigned char)(v >> 8),
                           (unsigned char)(v >> 16), (unsigned char)(v >> 24)};
    sb_putn(b, le, sizeof le);
}

static void unicode(strbuf *b, const char *s)
{
    op_u32(b, 'X', (uint32_t)strlen(s)); /* BINUNICODE */
    sb_puts(b, s);
}

static void integer(strbuf *b, int64_t v)
{
    op_u32(b, 'J', (uint32_t)(int32_t)v); /* BININT: every size here is below 2^31 */
}

static void global(strbuf *b, const char *module, const char *name)
{
    op(b, 'c');
    sb_printf(b, "%s\n%s\n", module, name);
}

/* torch._utils._rebuild_tensor_v2(storage `key`, 0, (rows, cols), (cols, 1), False,
 * OrderedDict()) over a LongStorage of rows * cols elements */
static void tensor(strbuf *b, int key, int64_t rows, int64_t cols)
{
    char k[16];
    snprintf(k, sizeof k, "%d", key);
    global(b, "torch._utils", "_rebuild_tensor_v2");
    op(b, '(');
    op(b, '(');
    unicode(b, "storage");
    global(b, "torch", "LongStorage");
    unicode(b, k);
    unicode(b, "cpu");
    integer(b, rows * cols);
    op(b, 't');
    op(b, 'Q');                          /* BINPERSID */
    integer(b, 0);
    op(b, '(');
    integer(b, rows);
    integer(b, cols);
    op(b, 't');
    op(b, '(');
    integer(b, cols);
    integer(b, 1);
    op(b, 't');
    op(b, '\x89');                       /* NEWFALSE: requires_grad */
    global(b, "collections", "OrderedDict");
    op(b, ')');
    op(b, 'R');
    op(b, 't');
    op(b, 'R');
}

static void pickle(strbuf *b, const example *ex, int n)
{
    sb_putn(b, "\x80\x02", 2);           /* PROTO 2 */
    op(b, ')');                          /* args: () */
    op(b, '}');                          /* kwargs */
    op(b, '(');
    for (int i = 0; i < n; i++) {
        unicode(b, ex[i].name);
        tensor(b, i, ex[i].rows, ex[i].cols);
    }
    op(b, 'u');                          /* SETITEMS */
    op(b, '\x86');                       /* TUPLE2 */
    op(b, '.');
}

/* The storage of example `e`: int64 little-endian, as the archive's byteorder says */
static void storage(strbuf *b, const example *e)
{
    for (int64_t r = 0; r < e->rows; r++)
        for (int64_t c = 0; c < e->cols; c++) {
            int64_t v = e->role == GI_ATTENTION_MASK ? 1 : e->role == GI_POSITION_IDS ? c : 0;
            unsigned char le[8];
            for (int k = 0; k < 8; k++)
                le[k] = (unsigned char)((uint64_t)v >> (8 * k));
            sb_putn(b, le, sizeof le);
        }
}

/* The torch.save archive of the examples, built in an anonymous memory file by the zip writer
 * the .pt2 itself is written with, then read back */
static ferry_status archive(const example *ex, int n, strbuf *out, fy_err *err)
{
    /* where memfd_create is refused (old kernels, seccomp sandboxes), an unnamed temporary */
    int fd = memfd_create("ferry-sample-inputs", MFD_CLOEXEC), memfd_errno = errno;
    FILE *tmp = fd < 0 ? tmpfile() : NULL;
    if (tmp)
        fd = fileno(tmp);
    if (fd < 0)
        return fy_fail(err, FERRY_ERR_IO, "pt2: no scratch file for the example inputs: "
                       "memfd_create: %s; tmpfile: %s", strerror(memfd_errno), strerror(errno));
    ferry_status st = FERRY_OK;
    zip_writer *z = zip_new(fd, "pt2 sample inputs", err);
    if (!z)
        st = err->status;
    strbuf pkl = {0};
    pickle(&pkl, ex, n);
    if (pkl.oom && st == FERRY_OK)
        st = fy_fail(err, FERRY_ERR_NOMEM, "out of memory");
    if (st == FERRY_OK)
        st = zip_put(z, "archive/data.pkl", pkl.data, pkl.len, err);
    sb_free(&pkl);
    static const char *const small[][2] = {
        {"archive/.format_version", "1"}, {"archive/.storage_alignment", "64"},
        {"archive/byteorder", "little"},
    };
    for (size_t i = 0; i < sizeof small / sizeof *small && st == FERRY_OK; i++)
        st = zip_put(z, small[i][0], small[i][1], strlen(small[i][1]), err);
    for (int i = 0; i < n && st == FERRY_OK; i++) {
        strbuf data = {0};
        char name[32];
        snprintf(name, sizeof name, "archive/data/%d", i);
        storage(&data, &ex[i]);
        st = data.oom ? fy_fail(err, FERRY_ERR_NOMEM, "out of memory")
                      : zip_put(z, name, data.data, data.len, err);
        sb_free(&data);
    }
    if (st == FERRY_OK)
        st = zip_put(z, "archive/version", "3\n", 2, err);
    if (st == FERRY_OK)
        st = zip_close(z, err);
    zip_free(z);
    struct stat sb;
    if (st == FERRY_OK && fstat(fd, &sb) != 0)
        st = fy_fail(err, FERRY_ERR_IO, "pt2: sample inputs: cannot size the archive");
    if (st == FERRY_OK) {
        char chunk[1 << 14];
        for (off_t at = 0; at < sb.st_size && st == FERRY_OK;) {
            ssize_t k = pread(fd, chunk, sizeof chunk, at);
            if (k <= 0) {
                st = fy_fail(err, FERRY_ERR_IO, "pt2: sample inputs: cannot read back");
            } else {
                sb_putn(out, chunk, (size_t)k);
                at += k;
            }
        }
        if (st == FERRY_OK && out->oom)
            st = fy_fail(err, FERRY_ERR_NOMEM, "out of memory");
    }
    if (tmp)
        fclose(tmp);
    else
        close(fd);
    return st;
}

/* The examples of `g`'s inputs into `ex`; NULL when it has them, else why not */
static const char *examples(const g_graph *g, example *ex)
{
    /* ferry makes example token ids, masks and positions; not a cache or pixels */
    const char *why = g->n_states ? "it takes its cache" : "it takes inputs other than tokens";
    if (g->n_inputs == 0 || g->n_inputs > N_TOKEN_INPUTS)
        return why;
    for (size_t i = 0; i < g->n_inputs; i++) {
        const g_value *v = &g->values[g->inputs[i]];
        if (v->role == GI_OTHER || v->dtype != FERRY_I64 || v->shape.rank != 2)
            return why;
        ex[i].name = v->name;
        ex[i].role = v->role;
        ex[i].rows = pt2_dim_hint(v->shape.d[0], &g->syms);
        ex[i].cols = pt2_dim_hint(v->shape.d[1], &g->syms);
        if (ex[i].rows < 1 || ex[i].cols < 1 ||
            ex[i].rows > MAX_EXAMPLE_ELEMENTS / ex[i].cols)
            return "its traced shape is over 65536 tokens, or empty";
    }
    return NULL;
}

const char *pt2_sample_inputs_missing(const g_graph *g)
{
    example ex[N_TOKEN_INPUTS];
    return examples(g, ex);
}

ferry_status pt2_sample_inputs(const g_graph *g, strbuf *out, fy_err *err)
{
    example ex[N_TOKEN_INPUTS];
    if (examples(g, ex))
        return FERRY_OK;
    return archive(ex, (int)g->n_inputs, out, err);
}
