/* tokenizer_files.c — reading a checkpoint's tokenizer and chat-template files (see the header). */
#include "model/tokenizer_files.h"

#include <errno.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "util/fs.h"
#include "util/json.h"

/* What transformers' tokenizers save (fast and slow, BPE, WordPiece, SentencePiece), the
 * chat template in its own file, and a multimodal model's processor (its image processor's
 * settings), which AutoProcessor reads beside the tokenizer. */
static const char *const NAMES[] = {
    "tokenizer.json",  "tokenizer_config.json", "special_tokens_map.json", "added_tokens.json",
    "chat_template.jinja", "chat_template.json", "vocab.json", "merges.txt", "vocab.txt",
    "tokenizer.model", "spiece.model", "preprocessor_config.json", "processor_config.json",
};
_Static_assert(sizeof NAMES / sizeof *NAMES <= TOK_MAX_FILES, "TOK_MAX_FILES too small");

bool tok_is_file_name(const char *name)
{
    for (size_t i = 0; i < sizeof NAMES / sizeof *NAMES; i++)
        if (strcmp(name, NAMES[i]) == 0)
            return true;
    return false;
}

const char *tok_file_names(void)
{
    return "tokenizer.json, tokenizer_config.json, special_tokens_map.json, added_tokens.json, "
           "chat_template.jinja, chat_template.json, vocab.json, merges.txt, vocab.txt, "
           "tokenizer.model, spiece.model, preprocessor_config.json, processor_config.json";
}

ferry_status tok_files_read(const char *dir, tok_files *out, fy_err *err)
{
    ferry_status status = FERRY_OK;
    memset(out, 0, sizeof *out);
    for (size_t i = 0; i < sizeof NAMES / sizeof *NAMES && status == FERRY_OK; i++) {
        char *path = fs_join_dup(dir, NAMES[i], err);
        if (!path) {
            /* a file of the checkpoint's that its path is too long to name: the checkpoint
             * cannot be read here, as when config.json's path is (not a bad command line) */
            status = err->status == FERRY_ERR_INVALID_ARG ? (err->status = FERRY_ERR_IO)
                                                           : err->status;
            break;
        }
        struct stat st;
        if (lstat(path, &st) != 0 && errno == ENOENT) {
            free(path); /* the checkpoint has no such file */
            continue;
        }
        /* not regular (a FIFO, a device, a dangling link) or over the limit: an error naming
         * the file, as for config.json */
        tok_file *f = &out->f[out->n];
        status = json_read_file(path, TOK_FILE_MAX_BYTES, &f->data, &f->len, err);
        free(path);
        if (status == FERRY_OK) {
            f->name = NAMES[i];
            out->n++;
        }
    }
    if (status != FERRY_OK)
        tok_files_free(out);
    return status;
}

void tok_files_free(tok_files *t)
{
    for (int i = 0; i < t->n; i++)
        free(t->f[i].data);
    memset(t, 0, sizeof *t);
}
