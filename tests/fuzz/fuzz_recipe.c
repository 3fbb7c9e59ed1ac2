/* fuzz_recipe.c — libFuzzer target for export recipes (ferry_export_config_from_json, the
 * `--config recipe.json` reader) and the `--dim NAME:AXIS=SYMBOL[:MIN:MAX]` parser.
 *
 * An accepted recipe must survive a round trip through the JSON that export.json records
 * (export_config_to_json): reading that JSON back gives the same configuration. */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "fuzz.h"
#include "export/internal.h"

static void check_same(const ferry_export_config *a, const ferry_export_config *b)
{
    check(a->dynamic == b->dynamic, "round trip: dynamic");
    check(a->n_dims == b->n_dims, "round trip: number of dims");
    /* export.json groups dims by input, so the order may change; each must come back once. */
    for (int i = 0; i < a->n_dims; i++) {
        const ferry_dim_spec *d = &a->dims[i], *e = NULL;
        for (int j = 0; j < b->n_dims && !e; j++)
            if (strcmp(b->dims[j].input, d->input) == 0 && b->dims[j].axis == d->axis)
                e = &b->dims[j];
        check(e != NULL, "round trip: dim lost");
        check(strcmp(d->symbol, e->symbol) == 0, "round trip: dim symbol");
        check(d->min == e->min && d->max == e->max, "round trip: dim range");
    }
    check(a->dtype == b->dtype, "round trip: dtype");
    /* the format's own options come back as they were, or as their defaults: export.json
     * records them from the format's table (another format's, refused by an export, are not
     * recorded) */
    const fb_backend *be = fb_find(a->format);
    check(be != NULL && b->format == a->format, "round trip: format");
    for (int i = 0; be && i < be->n_options; i++)
        check(strcmp(be_option_text(a, be, be->options[i].key),
                     be_option_text(b, be, be->options[i].key)) == 0,
              "round trip: a format option");
    /* example shapes by input come back as given; the shortcuts, given alone, as input_ids' */
    if (a->n_examples > 0) {
        check(b->n_examples == a->n_examples, "round trip: example shapes");
        for (int i = 0; i < a->n_examples && i < b->n_examples; i++)
            check(strcmp(a->examples[i].input, b->examples[i].input) == 0 &&
                      a->examples[i].rank == b->examples[i].rank &&
                      !memcmp(a->examples[i].dims, b->examples[i].dims,
                              (size_t)a->examples[i].rank * sizeof a->examples[i].dims[0]),
                  "round trip: an example shape");
    } else if (a->example_batch > 0 && a->example_sequence > 0) {
        check(b->n_examples == 1 && b->examples[0].dims[0] == a->example_batch &&
                  b->examples[0].dims[1] == a->example_sequence,
              "round trip: example shapes");
    }
    check(a->for_generation == b->for_generation, "round trip: for_generation");
    if (a->for_generation) {
        check(a->generation.multi_token_decode == b->generation.multi_token_decode,
              "round trip: multi_token_decode");
        check(a->generation.static_cache == b->generation.static_cache,
              "round trip: cache_implementation");
        if (a->generation.static_cache)
            check(a->generation.max_cache_len == b->generation.max_cache_len,
                  "round trip: max_cache_len");
    }
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    char *text = malloc(size + 1);
    char eb[256];
    ferry_export_config cfg, back;
    check(text != NULL, "malloc");
    memcpy(text, data, size);
    text[size] = '\0';

    /* The CLI's --dim syntax on the same bytes (it stops at the first NUL, as argv would). */
    ferry_export_config_init(&cfg);
    eb[0] = '\0';
    if (ferry_export_config_add_dim(&cfg, text, eb, sizeof eb) != FERRY_OK)
        check_message(eb);
    else
        check(cfg.n_dims == 1, "one --dim adds one dim");

    ferry_export_config_init(&cfg);
    eb[0] = '\0';
    if (ferry_export_config_from_json(&cfg, text, eb, sizeof eb) != FERRY_OK) {
        check_message(eb);
        free(text);
        return 0;
    }
    cJSON *json = export_config_to_json(&cfg);
    char *printed = json ? cJSON_PrintUnformatted(json) : NULL;
    check(printed != NULL, "export_config_to_json");
    ferry_export_config_init(&back);
    if (ferry_export_config_from_json(&back, printed, eb, sizeof eb) != FERRY_OK) {
        fprintf(stderr, "fuzz_recipe: the recorded config is refused: %s\n%s\n", eb, printed);
        abort();
    }
    check_same(&cfg, &back);
    cJSON_free(printed);
    cJSON_Delete(json);
    free(text);
    return 0;
}
