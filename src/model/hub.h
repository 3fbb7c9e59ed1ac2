/* hub.h — offline resolution of a Hugging Face hub cache id to its snapshot directory, as
 * from_pretrained(..., local_files_only=True) does. */
#ifndef FERRY_MODEL_HUB_H
#define FERRY_MODEL_HUB_H

#include <stddef.h>

#include "util/err.h"

/* If `path_or_id` is an existing directory, copies it to `out`. Else, if it looks like a hub id
 * ("org/name" or "name": letters, digits, '-', '_', '.', one '/' at most, no "..") resolves it to
 * $HF_HOME/hub/models--org--name/snapshots/<rev> (HF_HOME defaults to ~/.cache/huggingface,
 * or $XDG_CACHE_HOME/huggingface; HF_HUB_CACHE, or the legacy HUGGINGFACE_HUB_CACHE, when set,
 * replaces $HF_HOME/hub: huggingface_hub's rules), where <rev> is `revision` if it names a
 * snapshot directory, else the commit hash stored in refs/<revision> (revision NULL = "main").
 * A directory with a revision is FERRY_ERR_INVALID_ARG: a directory has no revisions.
 * Errors name what was looked for and where: a missing path written as one (./x, /x, x/, a/b/c)
 * is a missing directory, never looked up as an id; an id not in the cache says how to
 * download it (this library never does). */
ferry_status hub_resolve(const char *path_or_id, const char *revision, char *out, size_t out_size,
                         fy_err *err);

#endif
