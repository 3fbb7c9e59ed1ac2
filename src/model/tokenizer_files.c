/* tokenizer_files.c — reading a checkpoint's tokenizer and chat-template files (see the header). */
#include "model/tokenizer_files.h"

#include <dirent.h>
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "util/fs.h"
#include "util/json.h"
#include "util/text.h"

/* What transformers' tokenizers save (fast and slow, BPE, WordPiece, SentencePiece), the
 * chat template in its own file, and a multimodal model's processor (its image processor's
 * settings), which AutoProcessor reads beside the tokenizer. */
static const char *const NAMES[] = {
    "tokenizer.json",  "tokenizer_config.json", "special_tokens_map.json", "added_tokens.json",
    "chat_template.jinja", "chat_template.json", "vocab.json", "merges.txt", "vocab.txt",
    "tokenizer.model", "spiece.model", "preprocessor_config.json", "processor_config.json",
};
/* openvino-tokenizers' output, each model's .xml before its weights' .bin. */
static const char *const CONVERTED[] = {
    "openvino_tokenizer.xml", "openvino_tokenizer.bin",
    "openvino_detokenizer.xml", "openvino_detokenizer.bin",
};
_Static_assert(sizeof NAMES / sizeof *NAMES + sizeof CONVERTED / sizeof *CONVERTED <=
                   TOK_MAX_FILES, "TOK_MAX_FILES too small");

static bool listed(const char *name, const char *const *names, size_t n)
{
    for (size_t i = 0; i < n; i++)
        if (strcmp(name, names[i]) == 0)
            return true;
    return false;
}

bool tok_is_converted_name(const char *name)
{
    return listed(name, CONVERTED, sizeof CONVERTED / sizeof *CONVERTED);
}

bool tok_is_file_name(const char *name)
{
    return listed(name, NAMES, sizeof NAMES / sizeof *NAMES) || tok_is_converted_name(name);
}

const char *tok_converted_names(void)
{
    return "openvino_tokenizer.xml, openvino_tokenizer.bin, openvino_detokenizer.xml, "
           "openvino_detokenizer.bin";
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

/* Whether `dir` holds only converted files (else an error naming the first other entry). */
static ferry_status only_converted(const char *dir, fy_err *err)
{
    DIR *d = opendir(dir);
    if (!d)
        return fy_fail(err, FERRY_ERR_IO, "%s: cannot open: %s", dir, strerror(errno));
    struct dirent *ent;
    ferry_status status = FERRY_OK;
    while (status == FERRY_OK && (ent = readdir(d)) != NULL)
        if (strcmp(ent->d_name, ".") != 0 && strcmp(ent->d_name, "..") != 0 &&
            !tok_is_converted_name(ent->d_name)) {
            char q[TEXT_QUOTE_MAX];
            status = fy_fail(err, FERRY_ERR_FORMAT, "%s: '%s' is not a converted tokenizer "
                             "file (%s)", dir, text_quote(ent->d_name, q, sizeof q),
                             tok_converted_names());
        }
    closedir(d);
    return status;
}

ferry_status tok_files_read_converted(const char *dir, tok_files *out, fy_err *err)
{
    ferry_status status = only_converted(dir, err);
    bool present[sizeof CONVERTED / sizeof *CONVERTED] = {false};
    for (size_t i = 0; i < sizeof CONVERTED / sizeof *CONVERTED && status == FERRY_OK; i++) {
        char *path = fs_join_dup(dir, CONVERTED[i], err);
        if (!path) {
            status = err->status;
            break;
        }
        struct stat st;
        if (lstat(path, &st) != 0 && errno == ENOENT) {
            free(path);
            continue;
        }
        if (S_ISLNK(st.st_mode))
            status = fy_fail(err, FERRY_ERR_FORMAT, "%s: a symbolic link, not a converted "
                             "tokenizer file", path);
        tok_file *f = &out->f[out->n];
        if (status == FERRY_OK &&
            (status = json_read_file(path, TOK_FILE_MAX_BYTES, &f->data, &f->len, err)) ==
                FERRY_OK) {
            f->name = CONVERTED[i];
            out->n++;
            present[i] = true;
        }
        free(path);
    }
    /* openvino reads an .xml's weights from the .bin beside it: one without the other is a
     * conversion cut short */
    for (size_t i = 0; i + 1 < sizeof CONVERTED / sizeof *CONVERTED && status == FERRY_OK; i += 2)
        if (present[i] != present[i + 1])
            status = fy_fail(err, FERRY_ERR_FORMAT, "%s: %s without %s", dir,
                             CONVERTED[present[i] ? i : i + 1], CONVERTED[present[i] ? i + 1 : i]);
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
