/* checkpoint.h — all safetensors files of one checkpoint directory behind one name lookup:
 * model.safetensors, or the shards listed by model.safetensors.index.json. */
#ifndef FERRY_MODEL_CHECKPOINT_H
#define FERRY_MODEL_CHECKPOINT_H

#include <stdbool.h>
#include <stddef.h>

#include "model/safetensors.h"

/* How a composite checkpoint names the tensors of one of its parts: a name of the part's own
 * model that starts with `from` is stored as `to` followed by the rest of the name. A name no
 * rule matches is not stored. */
typedef struct ckpt_rename {
    const char *from, *to;
} ckpt_rename;

#define CKPT_MAX_RENAMES 4
/* One way of naming the part; rules are tried in order, the list ends at a NULL `to`. */
typedef struct ckpt_layout {
    ckpt_rename rules[CKPT_MAX_RENAMES];
} ckpt_layout;

typedef struct ckpt {
    char *dir;
    st_file **files;
    size_t n_files;
    const st_tensor **by_name;   /* every tensor of every file, sorted by name */
    size_t n_tensors;
    unsigned char *used;         /* per by_name entry: set by ckpt_take */
    /* How every name ckpt_find and ckpt_take look up is stored (NULL: as it is): the part of
     * a composite checkpoint a graph reads, under the names of the model that part is (a
     * vision-language checkpoint's language model read as a causal LM's tensors). Set with
     * ckpt_use_layout. */
    const ckpt_layout *layout;
} ckpt;

/* Opens `dir`: model.safetensors if it exists (as from_pretrained prefers it too); else
 * model.safetensors.index.json, whose "weight_map" names the shards (each a plain file name
 * inside `dir`: a name with '/' or "..", which could resolve outside `dir`, is refused; symlinks
 * are followed, since a hub cache snapshot links its files to ../../blobs), every shard is
 * opened, and every tensor the map names must be found, once, in the shard it names. Neither
 * file -> FERRY_ERR_IO naming `dir` and both names. A tensor name present in two files is an
 * error. Failure messages name the file and the tensor. The sparse rule of st_open (over 64 MiB,
 * less than 1/8 stored) holds for each file and for the checkpoint's totals, so that splitting
 * a sparse file into small shards does not get past it. */
ferry_status ckpt_open(const char *dir, ckpt **out, fy_err *err);
/* FERRY_ERR_UNSUPPORTED when `dir` holds no safetensors but weights ferry does not read (a
 * GGUF file, PyTorch's pytorch_model.bin or other .bin/.pt/.pth files), with a line of Python
 * that converts them; FERRY_OK otherwise, `err` untouched. Checked before config.json, which
 * a GGUF download does not have. */
ferry_status ckpt_check_weights_format(const char *dir, fy_err *err);
void ckpt_close(ckpt *c);

/* st_check_unchanged for every file of the checkpoint. */
ferry_status ckpt_check_unchanged(const ckpt *c, fy_err *err);

/* Of `layouts` (n of them, n >= 1), the first whose first rule's `to` begins some tensor's
 * name, else the first: transformers has written a part under more than one naming over its
 * versions, and a checkpoint holds one. Lookups from then on go through it. */
void ckpt_use_layout(ckpt *c, const ckpt_layout *layouts, size_t n);

/* Whether the checkpoint's tensor `stored_name` belongs to the part the layout reads (no
 * layout: every tensor does). */
bool ckpt_in_layout(const ckpt *c, const char *stored_name);

/* The checkpoint's own name of tensor `name` (under the layout), into buf; NULL if it has
 * none (no rule matches) or it does not fit. */
const char *ckpt_full_name(const ckpt *c, const char *name, char *buf, size_t size);

/* Lookup; NULL if absent. */
const st_tensor *ckpt_find(const ckpt *c, const char *name);
/* Lookup that also marks the tensor consumed (for the "unused tensor" check). */
const st_tensor *ckpt_take(ckpt *c, const char *name);

#endif
