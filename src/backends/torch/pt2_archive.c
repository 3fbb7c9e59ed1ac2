/* pt2_archive.c — one component as a torch.export archive (docs/pt2-format.md): a zip of stored
 * entries under one root folder (the file's name without .pt2), holding
 *
 *   data/weights/weight_<k>          the parameters, one raw blob per dtype, streamed from the
 *                                    checkpoint at 64-byte aligned offsets (io/zip.c reserves
 *                                    the entry, the weight stream pwrites into it)
 *   data/weights/model_weights_config.json    each parameter's blob, sizes and storage offset
 *   data/constants/tensor_<k>        the graph's constants (non-persistent buffers)
 *   data/constants/model_constants_config.json
 *   models/model.json                the ExportedProgram (pt2_print.c)
 *   data/sample_inputs/model.pt      the example inputs, as torch.save writes them
 *                                    (pt2_sample_inputs.c); empty where a cache is an input
 *   archive_format, archive_version, .data/version, byteorder
 *
 * Parameters load with requires_grad false: an inference program, and a blob whose first
 * tensor needs no grad gives every tensor in it a leaf of its own. */
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "backends/torch/pt2.h"
#include "backends/torch/torch.h"
#include "io/zip.h"
#include "util/dtype.h"
#include "util/fs.h"
#include "util/strbuf.h"

#define PT2_ALIGN 64

typedef struct blob {
    pl_file *pl;
    int index;               /* weight_<index> */
    uint64_t base;           /* where its data starts in the archive */
} blob;

static ferry_status put_text(zip_writer *z, const char *root, const char *name, const char *text,
                             size_t len, fy_err *err)
{
    char entry[PATH_MAX];
    if (snprintf(entry, sizeof entry, "%s/%s", root, name) >= (int)sizeof entry)
        return fy_fail(err, FERRY_ERR_INVALID_ARG, "archive entry name too long: %s/%s", root,
                       name);
    return zip_put(z, entry, text, len, err);
}

static void config_entry(strbuf *b, bool first, const char *fqn, const char *path, bool param,
                         const g_value *x, const g_symtab *syms, int64_t storage_offset)
{
    sb_puts(b, first ? "" : ", ");
    pt2_json_str(b, fqn);
    sb_printf(b, ": {\"path_name\": \"%s\", \"is_param\": %s, \"use_pickle\": false, "
              "\"tensor_meta\": ", path, param ? "true" : "false");
    pt2_tensor_meta(b, x->dtype, &x->shape, syms, storage_offset);
    sb_puts(b, "}");
}

/* The parameters, placed in one blob per dtype; their config. */
static ferry_status place_weights(const g_graph *g, const pt2_program *prog, blob *blobs,
                                  strbuf *config, fy_err *err)
{
    int n_blobs = 0;
    sb_puts(config, "{\"config\": {");
    for (size_t i = 0; i < prog->n_params; i++) {
        const g_value *x = &g->values[prog->params[i].value];
        int rank;
        int64_t shape[W_MAX_RANK];
        ferry_dtype dt;
        uint64_t off, len;
        w_part_info(&x->weight, W_PART_DATA, &rank, shape, &dt, &len);
        if (dt != x->dtype || !dt_size(dt))
            return fy_fail(err, FERRY_ERR_UNSUPPORTED, "pt2: weight '%s' is stored as %s, which "
                           "a torch parameter cannot hold", x->name, ferry_dtype_name(dt));
        blob *b = &blobs[dt];
        if (!b->pl) {
            char name[32];
            snprintf(name, sizeof name, "weight_%d", n_blobs);
            if (!(b->pl = pl_new(name, PT2_ALIGN)))
                return fy_fail(err, FERRY_ERR_NOMEM, "out of memory");
            b->index = n_blobs++;
        }
        if (pl_place(b->pl, &x->weight, W_PART_DATA, &off, &len, err) != FERRY_OK)
            return err->status;
        config_entry(config, i == 0, prog->params[i].fqn, pl_name(b->pl), true, x, &g->syms,
                     (int64_t)(off / dt_size(dt)));
    }
    sb_puts(config, "}}");
    return config->oom ? fy_fail(err, FERRY_ERR_NOMEM, "out of memory") : FERRY_OK;
}

static ferry_status write_constants(zip_writer *z, const char *root, const g_graph *g,
                                    const pt2_program *prog, fy_err *err)
{
    strbuf config = {0};
    ferry_status st = FERRY_OK;
    sb_puts(&config, "{\"config\": {");
    for (size_t i = 0; i < prog->n_buffers && st == FERRY_OK; i++) {
        const g_value *x = &g->values[prog->buffers[i].value];
        char path[64], entry[96];
        snprintf(path, sizeof path, "tensor_%zu", i);
        snprintf(entry, sizeof entry, "data/constants/%s", path);
        st = put_text(z, root, entry, x->data, x->nbytes, err);
        config_entry(&config, i == 0, prog->buffers[i].fqn, path, false, x, &g->syms, 0);
    }
    sb_puts(&config, "}}");
    if (st == FERRY_OK && config.oom)
        st = fy_fail(err, FERRY_ERR_NOMEM, "out of memory");
    if (st == FERRY_OK)
        st = put_text(z, root, "data/constants/model_constants_config.json", config.data,
                      config.len, err);
    sb_free(&config);
    return st;
}

static ferry_status write_entries(zip_writer *z, int fd, const char *path, const char *root,
                                  const g_graph *g, const pt2_program *prog, blob *blobs,
                                  ws_progress *progress, fy_err *err)
{
    strbuf config = {0};
    ferry_status st = place_weights(g, prog, blobs, &config, err);
    for (int dt = 0; dt < FERRY_DTYPE_COUNT && st == FERRY_OK; dt++) {
        if (!blobs[dt].pl)
            continue;
        char entry[PATH_MAX];
        snprintf(entry, sizeof entry, "%s/data/weights/%s", root, pl_name(blobs[dt].pl));
        st = zip_reserve(z, entry, pl_size(blobs[dt].pl), &blobs[dt].base, err);
    }
    if (st == FERRY_OK)
        st = put_text(z, root, "data/weights/model_weights_config.json", config.data,
                      config.len, err);
    sb_free(&config);
    if (st == FERRY_OK)
        st = write_constants(z, root, g, prog, err);
    if (st == FERRY_OK)
        st = put_text(z, root, "models/model.json", prog->json, prog->json_len, err);
    /* a plain program's example inputs; none (example_inputs None) for one that takes a cache */
    strbuf sample = {0};
    if (st == FERRY_OK)
        st = pt2_sample_inputs(g, &sample, err);
    if (st == FERRY_OK)
        st = put_text(z, root, "data/sample_inputs/model.pt", sample.data ? sample.data : "",
                      sample.len, err);
    sb_free(&sample);
    if (st == FERRY_OK)
        st = put_text(z, root, "archive_format", "pt2", 3, err);
    if (st == FERRY_OK)
        st = put_text(z, root, "archive_version", "0", 1, err);
    if (st == FERRY_OK)
        st = put_text(z, root, ".data/version", "6\n", 2, err);
    if (st == FERRY_OK)
        st = put_text(z, root, "byteorder", "little", 6, err);
    const ws_observer crcs = {zip_wrote_observer, z};
    if (st == FERRY_OK)   /* the reserved entries' blocks, before they are filled */
        st = fs_reserve(fd, path, zip_end_offset(z), err);
    for (int dt = 0; dt < FERRY_DTYPE_COUNT && st == FERRY_OK; dt++)
        if (blobs[dt].pl)
            st = pl_write_fd(blobs[dt].pl, fd, path, blobs[dt].base, progress, &crcs, err);
    return st;
}

ferry_status pt2_write_archive(const be_component *c, bool model_output, const char *dir,
                               ws_progress *progress, uint32_t *crc, fy_err *err)
{
    g_graph *g = c->graph;
    const char *file = c->file;
    char path[PATH_MAX], root[128];
    if (fs_join(path, sizeof path, dir, file, err) != FERRY_OK)
        return err->status;
    size_t len = strlen(file);
    if (len < 5 || strcmp(file + len - 4, ".pt2") != 0 || len - 4 >= sizeof root)
        return fy_fail(err, FERRY_ERR_INTERNAL, "pt2: component file '%s'", file);
    memcpy(root, file, len - 4);
    root[len - 4] = '\0';
    pt2_program prog;
    if (pt2_print_program(g, model_output, &prog, err) != FERRY_OK)
        return err->status;
    int fd = open(path, O_RDWR | O_CREAT | O_EXCL | O_CLOEXEC, 0644);
    if (fd < 0) {
        pt2_program_free(&prog);
        return fy_fail(err, errno == ENOSPC ? FERRY_ERR_NOSPACE : FERRY_ERR_IO,
                       "%s: cannot create: %s", path, strerror(errno));
    }
    blob blobs[FERRY_DTYPE_COUNT] = {0};
    ferry_status st = FERRY_OK;
    zip_writer *z = zip_new(fd, path, err);
    if (!z)
        st = err->status;
    if (st == FERRY_OK)
        st = write_entries(z, fd, path, root, g, &prog, blobs, progress, err);
    if (st == FERRY_OK && (st = zip_close(z, err)) == FERRY_OK)
        *crc = zip_file_crc32(z);
    if (st == FERRY_OK && fsync(fd) != 0 && errno != EINVAL)
        st = fy_fail(err, errno == ENOSPC ? FERRY_ERR_NOSPACE : FERRY_ERR_IO,
                     "%s: sync failed: %s", path, strerror(errno));
    if (close(fd) != 0 && st == FERRY_OK)
        st = fy_fail(err, FERRY_ERR_IO, "%s: close failed: %s", path, strerror(errno));
    zip_free(z);
    for (int dt = 0; dt < FERRY_DTYPE_COUNT; dt++)
        pl_free(blobs[dt].pl);
    pt2_program_free(&prog);
    return st;
}
