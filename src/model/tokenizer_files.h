/* tokenizer_files.h — the tokenizer and chat-template files of a checkpoint directory, which an
 * export carries beside its graphs so that runtimes that tokenize (onnxruntime-genai,
 * transformers' AutoTokenizer) find everything in one directory.
 *
 * Only the names below are taken, each a regular file (a link is followed, as for config.json:
 * a hub cache's snapshot holds links to its blobs) of at most TOK_FILE_MAX_BYTES. They are
 * copied byte for byte, never parsed, and read whole when the export is made so that what is
 * written is what was checked. */
#ifndef FERRY_MODEL_TOKENIZER_FILES_H
#define FERRY_MODEL_TOKENIZER_FILES_H

#include <stdbool.h>
#include <stddef.h>

#include "util/err.h"

#define TOK_MAX_FILES 20
#define TOK_FILE_MAX_BYTES ((size_t)64 << 20)

typedef struct tok_file {
    const char *name;        /* one of tok_file_names() or tok_converted_names(), static */
    char *data;
    size_t len;
} tok_file;

typedef struct tok_files {
    tok_file f[TOK_MAX_FILES];
    int n;
} tok_files;

/* Whether `name` is one of the file names taken, a checkpoint's or a converted one (an export
 * may list only these). */
bool tok_is_file_name(const char *name);
/* "tokenizer.json, tokenizer_config.json, ..." (static), for messages: a checkpoint's. */
const char *tok_file_names(void);
/* openvino-tokenizers' conversion of a tokenizer, which openvino-genai's pipelines read beside
 * the model: "openvino_tokenizer.xml, openvino_tokenizer.bin, openvino_detokenizer.xml,
 * openvino_detokenizer.bin" (static), and whether `name` is one of them. */
const char *tok_converted_names(void);
bool tok_is_converted_name(const char *name);

/* Reads the ones `dir` holds (absent ones are skipped; out->n may be 0). A name that exists
 * but is not a readable regular file within the limit is an error naming it. */
ferry_status tok_files_read(const char *dir, tok_files *out, fy_err *err);
/* Adds to `out` the converted files in `dir` (ferry_export_config.converted_tokenizer_dir), a
 * directory that holds nothing else: each a regular file (a link is refused: the directory is
 * a converter's output, not a hub cache), within TOK_FILE_MAX_BYTES, an .xml with its .bin.
 * An error names the file; on error `out` is freed whole. */
ferry_status tok_files_read_converted(const char *dir, tok_files *out, fy_err *err);
void tok_files_free(tok_files *t);

#endif
