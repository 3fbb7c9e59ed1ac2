/* describe.h — the parts of ferry_exported_describe (describe.c) that print export.json's
 * values (describe_text.c), a component's listings (describe_listing.c) and transformers' own
 * exports (describe_transformers.c). Every string printed goes through desc_quote. */
#ifndef FERRY_EXPORT_DESCRIBE_H
#define FERRY_EXPORT_DESCRIBE_H

#include <cjson/cJSON.h>
#include <stdbool.h>
#include <stddef.h>

#include "export/internal.h"
#include "util/strbuf.h"

/* `text` (NULL: "?") escaped for a terminal; each result stays valid for the next 15 calls on
 * this thread, so several go into one line. */
const char *desc_quote(const char *text);
/* Object `o`'s string `key` ("?" for none), raw or escaped (qstr); its integer (-1 for none
 * or one that is not an integer below 2^53). */
const char *desc_str(const cJSON *o, const char *key);
const char *desc_qstr(const cJSON *o, const char *key);
long long desc_num(const cJSON *o, const char *key);
/* An integer of export.json into *out (false: not one, shown as "?"), or as text in buf. */
bool desc_int_value(const cJSON *v, long long *out);
const char *desc_int_text(const cJSON *v, char *buf, size_t size);
/* A shape array as "[batch, 5, 64]" into buf. */
void desc_print_dims(const cJSON *arr, char *buf, size_t size);
/* One "    file   12.3 MB" line: file's size in dir (missing, or a path too long, said so). */
void desc_print_size(strbuf *b, const char *dir, const char *file);

/* A component's inputs or outputs under `title`; `brief` folds layers into one line. */
void desc_print_io(strbuf *b, const char *title, const cJSON *list, bool brief);
/* A component's cache: geometry, then its pairs (or a stateful model's variables, or the
 * inputs a torch program writes into). */
void desc_print_cache(strbuf *b, const cJSON *cache, bool stateful, bool brief);

/* The whole description of an export transformers' ExportedModel.save_pretrained wrote. */
void desc_inspect_transformers(strbuf *b, const ferry_exported *e, const cJSON *m);

#endif
