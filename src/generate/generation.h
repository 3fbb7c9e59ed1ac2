/* generation.h — what a generation export is made of: which components (prefill, decode), and
 * for each the shapes of its inputs and the kind of cache it carries; and the plan of a
 * decoder family (gen_decoder_plan, its model_arch.plan), which calls them. The graphs
 * themselves come from the architecture's decoder builder; backends only print them. */
#ifndef FERRY_GENERATE_GENERATION_H
#define FERRY_GENERATE_GENERATION_H

#include "models/model.h"
#include "ferry.h"

typedef struct gen_component {
    const char *name;        /* "prefill" or "decode" */
    const char *role;
    model_io io;
} gen_component;

/* `gen` with FERRY_AUTO decided: a symbolic decode query where it costs nothing (a symbolic
 * sequence axis, from --dynamic or a dim, starting at 1, and the dynamic cache; measured: the
 * same decode time per step), else 1. `syms` holds the sequence's symbol. */
ferry_generation_config gen_resolve(const ferry_generation_config *gen, g_dim sequence,
                                    const g_symtab *syms);

/* Checks the options against the export config (errors name the option) and fills `out` with
 * the components; symbols (past_sequence, max_cache_len) are added to each component's
 * symtab (syms[i], MODEL_MAX_COMPONENTS of them; a static cache of a fixed length also stops
 * the sequence symbol there in each). `batch` and `sequence` are the axes the export config
 * resolved.
 * `single`: the name of a format that runs generation as one graph taking the prompt and
 * each token (OpenVINO's stateful model; NULL for others, and for OpenVINO with
 * stateful=False): a dynamic cache then gets "decode" alone, multi-token, and a static cache is
 * refused. */
ferry_status gen_plan(const ferry_export_config *cfg, const ferry_generation_config *gen,
                      const char *single, g_dim batch, g_dim sequence, g_symtab *syms,
                      gen_component *out, int *n, fy_err *err);

/* Refuses a generation export's cache that the request's format cannot write: a growing one
 * where the format writes its caches in place only (torch's programs). */
ferry_status gen_check_cache_form(const model_plan_request *rq, fy_err *err);

/* model_arch.plan of a decoder language model: one "model" for a plain export; for a generation
 * export prefill and decode (or one decode) as gen_plan makes them, after refusing what the
 * family or the format cannot do (an unverified family; a growing cache where the format
 * writes caches in place only). */
ferry_status gen_decoder_plan(const void *hparams, const model_plan_request *rq,
                              model_plan *out, fy_err *err);

#endif
