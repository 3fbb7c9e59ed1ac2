/* checkpoint.h — all safetensors files of one checkpoint directory behind one name lookup:
 * model.safetensors, or the shards listed by model.safetensors.index.json. */
#ifndef FERRY_MODEL_CHECKPOINT_H
#define FERRY_MODEL_CHECKPOINT_H

#include <stddef.h>

#include "model/safetensors.h"

typedef struct ckpt {
    char *dir;
    st_file **files;
    size_t n_files;
    const st_tensor **by_name;   /* every tensor of every file, sorted by name */
    size_t n_tensors;
    unsigned char *used;         /* per by_name entry: set by ckpt_take */
    /* Put before every name ckpt_find and ckpt_take look up (NULL: none): the part of a
     * composite checkpoint a graph reads, under the names of the model that part is
     * (a vision-language checkpoint's "language_model." read as a causal LM's tensors). */
    const char *prefix;
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
void ckpt_close(ckpt *c);

/* st_check_unchanged for every file of the checkpoint. */
ferry_status ckpt_check_unchanged(const ckpt *c, fy_err *err);

/* The checkpoint's own name of tensor `name` (with the prefix), into buf. */
const char *ckpt_full_name(const ckpt *c, const char *name, char *buf, size_t size);

/* Lookup; NULL if absent. */
const st_tensor *ckpt_find(const ckpt *c, const char *name);
/* Lookup that also marks the tensor consumed (for the "unused tensor" check). */
const st_tensor *ckpt_take(ckpt *c, const char *name);

#endif
