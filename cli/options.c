/* options.c — the export options `ferry export` and `ferry graph` share (format, shapes, dtype,
 * opset, recipe, generation, revision): parsed once here into a ferry_export_config. */
#include <errno.h>
#include <getopt.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cli.h"

#define RECIPE_READ_MAX (16u << 20)

/* Reads a recipe into a NUL-terminated buffer; *len is its size in bytes. NULL with errno set
 * on a read error, or with errno 0 when the file is over RECIPE_READ_MAX. */
static char *read_text(const char *path, size_t *len)
{
    FILE *f = fopen(path, "rb");
    if (!f)
        return NULL;
    char *buf = malloc(RECIPE_READ_MAX + 2);
    size_t n = 0;
    if (buf)
        n = fread(buf, 1, RECIPE_READ_MAX + 1, f);
    int failed = !buf || ferror(f);
    fclose(f);
    if (failed || n > RECIPE_READ_MAX) {
        free(buf);
        errno = failed ? (errno ? errno : EIO) : 0;
        return NULL;
    }
    buf[n] = '\0';
    *len = n;
    return buf;
}

static int parse_dtype(const char *s, ferry_dtype *out)
{
    /* torch's names too, as a recipe and Python's configs take them */
    if (!strcmp(s, "fp32") || !strcmp(s, "float32"))
        *out = FERRY_F32;
    else if (!strcmp(s, "fp16") || !strcmp(s, "float16"))
        *out = FERRY_F16;
    else if (!strcmp(s, "bf16") || !strcmp(s, "bfloat16"))
        *out = FERRY_BF16;
    else
        return -1;
    return 0;
}

/* The index of the dim on `d`'s input and axis among dims[0..n), or n. */
static int dim_index(const ferry_dim_spec *dims, int n, const ferry_dim_spec *d)
{
    int k = 0;
    while (k < n && (strcmp(dims[k].input, d->input) || dims[k].axis != d->axis))
        k++;
    return k;
}

/* --config: the recipe's keys into o->cfg. */
static int read_recipe(const char *path, cli_export_opts *o)
{
    char eb[512];
    errno = 0;
    size_t len = 0;
    char *text = read_text(path, &len);
    if (!text) {
        cli_error("%s: cannot read recipe: %s", path, errno ? strerror(errno) : "larger than 16 MB");
        return EXIT_FAIL;
    }
    /* The library takes the recipe as a C string: a NUL would end it there and hide whatever
     * follows from the parser's checks. */
    const char *nul = memchr(text, '\0', len);
    if (nul) {
        cli_error("%s: NUL byte at byte %zu; a recipe is JSON text", path, (size_t)(nul - text));
        free(text);
        return EXIT_FAIL;
    }
    /* A later recipe wins over an earlier one, its dims too (a second
     * recipe's dim on an axis the first gave was "given twice"). */
    ferry_export_config next = o->cfg;
    next.n_dims = 0;
    ferry_status st = ferry_export_config_from_json(&next, text, eb, sizeof eb);
    free(text);
    o->recipe_given = true;
    if (st != FERRY_OK) {
        cli_error("%s: %s", path, eb);
        return EXIT_FAIL;
    }
    int n = o->cfg.n_dims;
    ferry_dim_spec merged[FERRY_MAX_DIM_SPECS];
    memcpy(merged, o->cfg.dims, sizeof merged);
    for (int i = 0; i < next.n_dims; i++) {
        int k = dim_index(merged, n, &next.dims[i]);
        if (k == FERRY_MAX_DIM_SPECS) {
            cli_error("%s: more than %d dynamic dims in all", path, FERRY_MAX_DIM_SPECS);
            return EXIT_FAIL;
        }
        merged[k] = next.dims[i];
        n += k == n;
    }
    memcpy(next.dims, merged, sizeof merged);
    next.n_dims = n;
    o->cfg = next;
    return CLI_CONTINUE;
}

/* A format's own flag (the i-th of ferry_format_option_describe): its value set by name, so
 * that the format checks it as it checks a recipe's. */
static int format_option(int i, const char *arg, cli_export_opts *o)
{
    ferry_format_option_info info;
    char eb[512];
    if (ferry_format_option_describe(i, &info) != FERRY_OK)
        return -2;
    const char *value = info.flag_value ? info.flag_value : arg;
    if (ferry_export_config_set_option(&o->cfg, info.key, value, eb, sizeof eb) != FERRY_OK) {
        cli_error("%s %s: expected %s", info.flag, arg ? arg : "", info.expects);
        return EXIT_USAGE;
    }
    if (info.generation_only)
        o->generation_flag = info.flag;
    return CLI_CONTINUE;
}

/* One shared option; CLI_CONTINUE or an exit status. */
static int shared_option(int c, const char *arg, cli_export_opts *o)
{
    char eb[512];
    switch (c) {
    case CLI_OPT_FORMAT:
        if (ferry_format_from_name(arg, &o->cfg.format) != FERRY_OK) {
            cli_error("--format %s is not supported (supported: %s)", arg,
                      ferry_supported_formats());
            return EXIT_USAGE;
        }
        return CLI_CONTINUE;
    case CLI_OPT_DYNAMIC:
        o->cfg.dynamic = 1;
        return CLI_CONTINUE;
    case CLI_OPT_DIM: {
        /* parsed alone first: a recipe's dim on the same axis is replaced, as every option on
         * the command line wins over a recipe ("given twice") */
        ferry_export_config one;
        ferry_export_config_init(&one);
        if (ferry_export_config_add_dim(&one, arg, eb, sizeof eb) != FERRY_OK) {
            cli_error("%s", eb);
            return EXIT_USAGE;
        }
        int i = dim_index(o->cfg.dims, o->recipe_dims, &one.dims[0]);
        if (i < o->recipe_dims) {
            /* the recipe's other axes of the same symbol follow it (a recipe
             * naming one symbol on every input refused a single --dim as a mismatch) */
            char old[sizeof one.dims[0].symbol];
            memcpy(old, o->cfg.dims[i].symbol, sizeof old);
            for (int k = 0; k < o->recipe_dims; k++) {
                ferry_dim_spec *same = &o->cfg.dims[k];
                if (!strcmp(same->symbol, old)) {
                    memcpy(same->symbol, one.dims[0].symbol, sizeof same->symbol);
                    same->min = one.dims[0].min;
                    same->max = one.dims[0].max;
                }
            }
            o->cfg.dims[i] = one.dims[0];
            return CLI_CONTINUE;
        }
        if (ferry_export_config_add_dim(&o->cfg, arg, eb, sizeof eb) != FERRY_OK) {
            cli_error("%s", eb);
            return EXIT_USAGE;
        }
        return CLI_CONTINUE;
    }
    case CLI_OPT_EXAMPLE:
        /* the command line's example shapes win over a recipe's, all of them: one given on
         * another input of the same axis would otherwise contradict them */
        if (!o->examples_flag) {
            o->cfg.n_examples = 0;
            o->cfg.example_batch = o->cfg.example_sequence = 0;
            o->examples_flag = true;
        }
        if (ferry_export_config_add_example(&o->cfg, arg, eb, sizeof eb) != FERRY_OK) {
            cli_error("--example-shape: %s", eb);
            return EXIT_USAGE;
        }
        return CLI_CONTINUE;
    case CLI_OPT_DTYPE:
        if (parse_dtype(arg, &o->cfg.dtype) != 0) {
            cli_error("--dtype %s: expected fp32, fp16 or bf16 (or float32, float16, "
                      "bfloat16)", arg);
            return EXIT_USAGE;
        }
        return CLI_CONTINUE;
    case CLI_OPT_CONFIG: /* read before every other option: cli_parse_export_options */
        return CLI_CONTINUE;
    case CLI_OPT_REVISION:
        o->revision = arg;
        return CLI_CONTINUE;
    case CLI_OPT_GENERATION:
        o->cfg.for_generation = 1;
        return CLI_CONTINUE;
    case CLI_OPT_NO_TOKENIZER:
        o->cfg.skip_tokenizer = 1;
        return CLI_CONTINUE;
    case CLI_OPT_TEXT_ONLY:
        o->cfg.text_only = 1;
        return CLI_CONTINUE;
    case CLI_OPT_INPUTS:
        if (ferry_export_config_set_inputs(&o->cfg, arg, eb, sizeof eb) != FERRY_OK) {
            cli_error("%s", eb);
            return EXIT_USAGE;
        }
        o->inputs_flag = true;
        return CLI_CONTINUE;
    case CLI_OPT_MULTI_TOKEN:
    case CLI_OPT_SINGLE_TOKEN:
        if (o->cfg.generation.multi_token_decode == (c == CLI_OPT_SINGLE_TOKEN) &&
            o->decode_flag) {
            cli_error("--multi-token-decode and --single-token-decode contradict each other");
            return EXIT_USAGE;
        }
        o->cfg.generation.multi_token_decode = c == CLI_OPT_MULTI_TOKEN;
        o->decode_flag = true;
        return CLI_CONTINUE;
    case CLI_OPT_STATIC_CACHE:
        o->cfg.generation.static_cache = 1;
        o->cache_flag = true;
        return CLI_CONTINUE;
    case CLI_OPT_MAX_CACHE: {
        char *end;
        errno = 0;
        long long v = arg[0] >= '0' && arg[0] <= '9' ? strtoll(arg, &end, 10) : -1;
        if (v <= 0 || *end || errno || v > (1LL << 30)) {
            cli_error("--max-cache-len %s: expected a whole number from 1 to 1073741824", arg);
            return EXIT_USAGE;
        }
        o->cfg.generation.max_cache_len = v;
        o->cache_flag = true;
        return CLI_CONTINUE;
    }
    case CLI_OPT_QUANTIZE:
        if (strcmp(arg, "int4") != 0 && strcmp(arg, "int8") != 0) {
            cli_error("--quantize %s: expected int4 or int8", arg);
            return EXIT_USAGE;
        }
        o->cfg.quantizer.bits = arg[3] == '4' ? 4 : 8;
        return CLI_CONTINUE;
    case CLI_OPT_BLOCK_SIZE: case CLI_OPT_ACCURACY: {
        char *end;
        long v = strtol(arg, &end, 10);
        bool block = c == CLI_OPT_BLOCK_SIZE;
        if (!o->quant_flag)
            o->quant_flag = block ? "--block-size" : "--accuracy-level";
        if (*end || end == arg || v < (block ? 16 : 0) || v > (block ? 256 : 4) ||
            (block && (v & (v - 1)) != 0)) {
            cli_error(block ? "--block-size %s: expected 16, 32, 64, 128 or 256"
                            : "--accuracy-level %s: expected 0 to 4", arg);
            return EXIT_USAGE;
        }
        *(block ? &o->cfg.quantizer.block_size : &o->cfg.quantizer.accuracy_level) = (int)v;
        return CLI_CONTINUE;
    }
    case CLI_OPT_QUANT_METHOD:
        if (strcmp(arg, "rtn") != 0 && strcmp(arg, "mse") != 0) {
            cli_error("--quant-method %s: expected rtn or mse", arg);
            return EXIT_USAGE;
        }
        o->cfg.quantizer.method = arg[0] == 'm' ? FERRY_QUANT_MSE : FERRY_QUANT_RTN;
        if (!o->quant_flag)
            o->quant_flag = "--quant-method";
        return CLI_CONTINUE;
    case CLI_OPT_ASYMMETRIC: case CLI_OPT_QUANT_EMBED: case CLI_OPT_FLOAT_HEAD:
        if (c == CLI_OPT_ASYMMETRIC)
            o->cfg.quantizer.asymmetric = 1;
        else if (c == CLI_OPT_QUANT_EMBED)
            o->cfg.quantizer.embeddings = 1;
        else
            o->cfg.quantizer.lm_head = 0;
        if (!o->quant_flag)
            o->quant_flag = c == CLI_OPT_ASYMMETRIC ? "--asymmetric"
                            : c == CLI_OPT_QUANT_EMBED ? "--quantize-embeddings"
                                                       : "--float-lm-head";
        return CLI_CONTINUE;
    }
    if (c >= CLI_OPT_FORMAT_OPTION && c < CLI_OPT_COMMAND)
        return format_option(c - CLI_OPT_FORMAT_OPTION, arg, o);
    return -2; /* not a shared option */
}

/* One reading of the options into `o` (--config's recipes are read_recipes'). optind 0
 * restarts glibc's getopt, which permutes argv so that the operands come last. */
static int parse_pass(int argc, char **argv, const char *cmd, const struct option *all,
                      cli_extra_fn on_extra, void *user, cli_export_opts *o)
{
    opterr = 0;
    optind = 0;
    int c;
    while ((c = getopt_long(argc, argv, "qh", all, NULL)) != -1) {
        int rc = shared_option(c, optarg, o);
        if (rc == -2)
            rc = c == '?' || c == ':' ? -3 : on_extra(c, optarg, user);
        if (rc == -3 || rc == -2) {
            /* a short option by its letter: inside a bundle ("-xq") optind has not moved past
             * it, and argv[optind - 1] is another word */
            int bad = c == '?' || c == ':' ? optopt : c;
            const char *word = argv[optind - 1];
            if (c == '?' && bad == 0 && !strncmp(word, "--", 2)) {
                /* a long option getopt_long does not know (optopt 0; a known one without its
                 * value has its own code there): the nearest known name, if one is close */
                const char *names[CLI_MAX_OPTIONS];
                size_t n = 0;
                for (; all[n].name && n < CLI_MAX_OPTIONS; n++)
                    names[n] = all[n].name;
                cli_unknown_option(cmd, word, names, n);
                return EXIT_USAGE;
            }
            char letter[3] = {'-', (char)bad, '\0'};
            bool short_opt = bad > ' ' && bad < 127;
            cli_error("%s: unknown or incomplete option '%s' (see ferry %s --help)", cmd,
                      short_opt ? letter : word, cmd);
            return EXIT_USAGE;
        }
        if (rc != CLI_CONTINUE)
            return rc;
    }
    return CLI_CONTINUE;
}

/* Each --config's recipe into `o`, in order. The leading "-" keeps argv as it is (an operand
 * comes back as option 1), so that this reading pairs each option with the argument the full
 * reading gives it (after a permuting pass a dangling --config took an
 * operand as its recipe). */
static int read_recipes(int argc, char **argv, const struct option *all, cli_export_opts *o)
{
    opterr = 0;
    optind = 0;
    int c;
    while ((c = getopt_long(argc, argv, "-qh", all, NULL)) != -1) {
        if (c != CLI_OPT_CONFIG)
            continue;
        int rc = read_recipe(optarg, o);
        if (rc != CLI_CONTINUE)
            return rc;
    }
    o->recipe_dims = o->cfg.n_dims;
    return CLI_CONTINUE;
}

int cli_parse_export_options(int argc, char **argv, const char *cmd,
                             const struct option *extra, int n_extra, cli_extra_fn on_extra,
                             void *user, cli_export_opts *o)
{
    static const struct option shared[] = {
        {"format", required_argument, NULL, CLI_OPT_FORMAT},
        {"dynamic", no_argument, NULL, CLI_OPT_DYNAMIC},
        {"dim", required_argument, NULL, CLI_OPT_DIM},
        {"example-shape", required_argument, NULL, CLI_OPT_EXAMPLE},
        {"dtype", required_argument, NULL, CLI_OPT_DTYPE},
        {"config", required_argument, NULL, CLI_OPT_CONFIG},
        {"revision", required_argument, NULL, CLI_OPT_REVISION},
        {"for-generation", no_argument, NULL, CLI_OPT_GENERATION},
        {"no-tokenizer", no_argument, NULL, CLI_OPT_NO_TOKENIZER},
        {"text-only", no_argument, NULL, CLI_OPT_TEXT_ONLY},
        {"inputs", required_argument, NULL, CLI_OPT_INPUTS},
        {"multi-token-decode", no_argument, NULL, CLI_OPT_MULTI_TOKEN},
        {"single-token-decode", no_argument, NULL, CLI_OPT_SINGLE_TOKEN},
        {"static-cache", no_argument, NULL, CLI_OPT_STATIC_CACHE},
        {"max-cache-len", required_argument, NULL, CLI_OPT_MAX_CACHE},
        {"quantize", required_argument, NULL, CLI_OPT_QUANTIZE},
        {"block-size", required_argument, NULL, CLI_OPT_BLOCK_SIZE},
        {"asymmetric", no_argument, NULL, CLI_OPT_ASYMMETRIC},
        {"accuracy-level", required_argument, NULL, CLI_OPT_ACCURACY},
        {"quantize-embeddings", no_argument, NULL, CLI_OPT_QUANT_EMBED},
        {"float-lm-head", no_argument, NULL, CLI_OPT_FLOAT_HEAD},
        {"quant-method", required_argument, NULL, CLI_OPT_QUANT_METHOD},
    };
    enum { N_SHARED = sizeof shared / sizeof shared[0], MAX_OPTS = CLI_MAX_OPTIONS };
    struct option all[MAX_OPTS + 1];
    int n = 0;
    for (int i = 0; i < N_SHARED && n < MAX_OPTS; i++)
        all[n++] = shared[i];
    ferry_format_option_info info;
    for (int i = 0; ferry_format_option_describe(i, &info) == FERRY_OK && n < MAX_OPTS; i++)
        all[n++] = (struct option){info.flag + 2, info.flag_value ? no_argument
                                                                  : required_argument,
                                   NULL, CLI_OPT_FORMAT_OPTION + i};
    for (int i = 0; i < n_extra && n < MAX_OPTS; i++)
        all[n++] = extra[i];
    all[n] = (struct option){NULL, 0, NULL, 0};

    /* Every option on the command line wins over a recipe, wherever --config stands (a user
     * who types --dtype fp16 means it, whatever the recipe says): the command line alone
     * first, so that its errors and --help come before a recipe's; then each recipe in order;
     * then the command line again, over them. */
    cli_export_opts alone;
    memset(&alone, 0, sizeof alone);
    ferry_export_config_init(&alone.cfg);
    int rc = parse_pass(argc, argv, cmd, all, on_extra, user, &alone);
    if (rc != CLI_CONTINUE)
        return rc;
    memset(o, 0, sizeof *o);
    ferry_export_config_init(&o->cfg);
    if ((rc = read_recipes(argc, argv, all, o)) != CLI_CONTINUE ||
        (rc = parse_pass(argc, argv, cmd, all, on_extra, user, o)) != CLI_CONTINUE)
        return rc;
    if (!o->cfg.for_generation &&
        (o->decode_flag || o->cfg.generation.multi_token_decode != FERRY_AUTO ||
         o->cfg.generation.static_cache || o->cfg.generation.max_cache_len)) {
        if (!o->decode_flag && !o->cache_flag) { /* the recipe's alone: exit 1 */
            cli_error("the recipe's multi_token_decode and generation_config apply to "
                      "generation exports (its for_generation, or --for-generation)");
            return EXIT_FAIL;
        }
        cli_error("--multi-token-decode, --single-token-decode, --static-cache and "
                  "--max-cache-len (or a recipe's multi_token_decode and generation_config) "
                  "apply to --for-generation exports");
        return EXIT_USAGE;
    }
    /* One of the pair without the other, on the command line: a static cache needs its length,
     * and a length means nothing without one. */
    if (o->cache_flag && !o->cfg.generation.static_cache != !o->cfg.generation.max_cache_len) {
        cli_error(o->cfg.generation.static_cache
                      ? "--static-cache needs --max-cache-len N (the cache's fixed length)"
                      : "--max-cache-len applies to --static-cache (a dynamic cache grows)");
        return EXIT_USAGE;
    }
    /* Options that would change nothing are usage errors here; a recipe's are the library's. */
    if (o->quant_flag && !o->cfg.quantizer.bits) {
        cli_error("%s applies to --quantize int4|int8", o->quant_flag);
        return EXIT_USAGE;
    }
    if (o->cfg.quantizer.method == FERRY_QUANT_MSE && o->cfg.quantizer.bits == 8) {
        cli_error("%s applies to int4 (at int8 it finds round-to-nearest's own scales)",
                  o->quant_flag ? "--quant-method mse" : "the recipe's quantizer method mse");
        return o->quant_flag ? EXIT_USAGE : EXIT_FAIL;
    }
    if (o->inputs_flag && o->cfg.for_generation) {
        cli_error("--inputs applies to plain exports: generation components take what "
                  "generate() feeds them (a decoder-only model's input_ids, attention_mask and "
                  "position_ids; an encoder-decoder's, its own)");
        return EXIT_USAGE;
    }
    if (o->generation_flag && !o->cfg.for_generation) {
        cli_error("%s applies to --for-generation exports (a plain export has no cache)",
                  o->generation_flag);
        return EXIT_USAGE;
    }
    return CLI_CONTINUE;
}

int cli_export_failure_status(const cli_export_opts *o, ferry_status st)
{
    return st == FERRY_ERR_INVALID_ARG && !o->recipe_given ? EXIT_USAGE : EXIT_FAIL;
}

void cli_print_format_options(FILE *f)
{
    ferry_format_option_info info;
    const char *format = "";
    for (int i = 0; ferry_format_option_describe(i, &info) == FERRY_OK; i++) {
        if (strcmp(info.format, format) != 0)
            fprintf(f, "\n%s options:\n", format = info.format);
        char head[64];
        snprintf(head, sizeof head, "%s%s%s", info.flag, info.metavar ? " " : "",
                 info.metavar ? info.metavar : "");
        for (const char *line = info.help; *line;) {
            size_t len = strcspn(line, "\n");
            fprintf(f, "  %-24s %.*s\n", line == info.help ? head : "", (int)len, line);
            line += len + (line[len] == '\n');
        }
        fprintf(f, "  %-24s recipe key: %s%s%s%s\n", "", info.key, info.alias ? " (or " : "",
                info.alias ? info.alias : "", info.alias ? ")" : "");
        fprintf(f, "  %-24s takes %s; default %s\n", "", info.expects, info.default_value);
    }
}

void cli_print_export_options(FILE *f)
{
    fprintf(f,
            "  --format NAME            output format: %s (default onnx)\n"
            "  --dynamic                make every axis symbolic: batch and sequence (and a\n"
            "                           T5 encoder's encoder_sequence; Whisper's 3000 frames\n"
            "                           stay fixed, the encoder's window)\n"
            "  --dim NAME:AXIS=SYM[:MIN:MAX]\n"
            "                           make one axis symbolic with a name and range, e.g.\n"
            "                           --dim input_ids:1=sequence:1:4096 (repeatable;\n"
            "                           0 <= MIN <= MAX <= 2^40, MAX 0 = unbounded;\n"
            "                           a T5 decoder's axis is decoder_input_ids:1,\n"
            "                           its encoder's input_ids:1)\n"
            "  --example-shape NAME=D0xD1...\n"
            "                           an input's shape, which static axes are pinned to and\n"
            "                           symbolic ones are traced at, inside their --dim range\n"
            "                           (repeatable, one per input; default input_ids=1x8,\n"
            "                           moved to a range's min; a Whisper or T5 decoder's:\n"
            "                           the prompt its generate() starts from)\n"
            "  --dtype fp32|fp16|bf16   export precision, whatever the checkpoint's (default "
            "fp32);\n"
            "                           torch's names float32, float16, bfloat16 too; weights\n"
            "                           beyond fp16's range become inf, with a warning\n"
            "  --config RECIPE.json     read options from a recipe with AutoExportConfig keys:\n"
            "                           export_format, dynamic, dynamic_shapes, dtype,\n"
            "                           example_shapes, quantizer, for_generation,\n"
            "                           multi_token_decode, generation_config, input_names,\n"
            "                           and the formats' options below by their keys (the\n"
            "                           command line's options win over it, wherever they\n"
            "                           stand); a recipe transformers wrote (a config's\n"
            "                           to_json_string) is read as it is:\n"
            "                           opset_version, optimize (true), strict (false) and\n"
            "                           prefer_deferred_runtime_asserts_over_guards (either)\n"
            "  --no-tokenizer           do not copy the checkpoint's tokenizer and chat-template\n"
            "                           files (tokenizer.json, tokenizer_config.json, ...; by\n"
            "                           default every export carries those it has)\n"
            "  --text-only              a vision-language checkpoint's language model alone,\n"
            "                           as a text-only causal LM (Gemma3ForConditionalGeneration;\n"
            "                           recipe key text_only): its vision tower is left out\n"
            "  --for-generation         the components a generation loop needs: prefill and\n"
            "                           decode with a KV cache (past_key_values.* in, present.* "
            "out);\n"
            "                           an encoder-decoder (Whisper, T5) also gets its encoder,\n"
            "                           which makes each layer's cross-attention keys and values\n"
            "                           once (its present.*.cross_key, the decoder's\n"
            "                           past_key_values.*.cross_key); pt2 returns a dynamic\n"
            "                           cache (present_<l>_key); executorch needs --static-cache\n"
            "  --multi-token-decode     decode takes any number of query tokens, so it also\n"
            "                           serves the prompt (needs a symbolic sequence from\n"
            "                           --dynamic or a --dim starting at 1; the default then,\n"
            "                           with a dynamic cache, where onnxruntime-genai runs the\n"
            "                           export: it costs no decode time)\n"
            "  --single-token-decode    decode takes one token per call (the guide's default)\n"
            "  --static-cache           fixed-size cache updated in place: input.<name>/"
            "output.<name>\n"
            "                           pairs to bind to one buffer each (needs "
            "--max-cache-len);\n"
            "                           in ONNX and OpenVINO it is allocated for the example's\n"
            "                           batch, as StaticCache is (--dim input_ids:0=batch keeps\n"
            "                           the batch symbolic)\n"
            "  --max-cache-len N        static cache length\n"
            "  --quantize int4|int8     weight-only quantization of every linear layer, round to\n"
            "                           nearest per block, done while the weights stream: as\n"
            "                           DequantizeLinear + MatMul in standard ONNX (opset >= 21),\n"
            "                           as MatMulNBits with --ort-fusions, as compressed u4/u8\n"
            "                           constants in OpenVINO (rows of whole blocks only); in\n"
            "                           ExecuTorch, int4 only (fp32, symmetric, blocks of 32 or\n"
            "                           more): XNNPACK's 8da4w, activations quantized per token\n"
            "  --block-size N           inputs per quantization block: 16, 32 (default), 64, 128,\n"
            "                           256; a row's last block may be short (int4 rows need an\n"
            "                           even length; OpenVINO and ExecuTorch take whole blocks)\n"
            "  --asymmetric             a zero point per block (default: symmetric)\n"
            "  --accuracy-level N       MatMulNBits' accuracy_level 0-4 (fused only; default 4)\n"
            "  --quantize-embeddings    quantize the embedding table too (default: float;\n"
            "                           standard ONNX dequantizes the whole table each call,\n"
            "                           fused graphs gather quantized rows, ExecuTorch reads\n"
            "                           them with embedding_4bit)\n"
            "  --float-lm-head          keep the head (lm_head, a classifier) in float (default:\n"
            "                           quantized)\n"
            "  --quant-method rtn|mse   each block's scale: rtn takes its range as is (default;\n"
            "                           onnxruntime's quantizer, byte for byte); mse searches 17\n"
            "                           shrinks of it for the least error weighted by each\n"
            "                           weight's square (int4 only; better at block 32,\n"
            "                           about twice the export time)\n"
            "  --inputs NAMES           a plain export's graph inputs, comma-separated from\n"
            "                           input_ids, attention_mask, position_ids and\n"
            "                           token_type_ids (default: the tokenizer's output, as\n"
            "                           transformers' exports take it: input_ids,\n"
            "                           attention_mask, and token_type_ids for BERT; the\n"
            "                           positions are computed inside, 0, 1, ... in every row,\n"
            "                           as its forward does without them); add position_ids to\n"
            "                           pass them (e.g. generate()'s cumsum(mask) - 1);\n"
            "                           input_ids alone: every token is real. A decoder-only\n"
            "                           model's generation components take input_ids,\n"
            "                           attention_mask and position_ids; Whisper's decoder\n"
            "                           input_ids, T5's input_ids and encoder_attention_mask\n"
            "  --revision REV           hub revision (branch, tag or commit) for a hub id\n",
            ferry_supported_formats());
}

void cli_print_warnings(const char *w)
{
    while (*w) {
        const char *nl = strchr(w, '\n');
        int n = nl ? (int)(nl - w) : (int)strlen(w);
        cli_warn("%.*s", n, w);
        w += n + (nl ? 1 : 0);
    }
}
