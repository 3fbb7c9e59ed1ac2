/* export_cmd.c — `ferry export MODEL OUT ...`: options -> ferry_export_config -> export -> save,
 * with a progress line on stderr when it is a terminal. */
#include <errno.h>
#include <getopt.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "cli.h"
#include "ferry.h"

static const char usage[] =
    "usage: ferry export MODEL OUT [options]\n"
    "\n"
    "Export MODEL (a directory with config.json and *.safetensors, or a hub id such as\n"
    "Qwen/Qwen3-0.6B found offline in $HF_HOME/hub) to the directory OUT, which receives\n"
    "model.onnx, model.onnx.data (weights, 4096-aligned), export.json and config.json.\n"
    "The graph takes input_ids, attention_mask and position_ids (int64 [batch, sequence];\n"
    "position_ids as generate() computes them: cumsum(attention_mask) - 1) and returns logits.\n"
    "\n"
    "options:\n"
    "  --format onnx            output format (default onnx, the only one so far)\n"
    "  --dynamic                make every axis symbolic: batch and sequence\n"
    "  --dim NAME:AXIS=SYM[:MIN:MAX]\n"
    "                           make one axis symbolic with a name and range, e.g.\n"
    "                           --dim input_ids:1=sequence:1:4096 (repeatable)\n"
    "  --example-shape input_ids=BxS\n"
    "                           shape that static axes are pinned to (default input_ids=1x8)\n"
    "  --dtype fp32|fp16|bf16   export precision, whatever the checkpoint's (default fp32)\n"
    "  --opset N                ONNX opset (default %d, supported %d-%d)\n"
    "  --config RECIPE.json     read options from a recipe with AutoExportConfig keys:\n"
    "                           export_format, dynamic, dynamic_shapes, dtype, opset,\n"
    "                           example_shapes (command-line options given after it win)\n"
    "  --for-generation         export the components a generation loop needs: prefill and\n"
    "                           decode with a KV cache (past_key_values.* in, present.* out)\n"
    "  --multi-token-decode     decode takes any number of query tokens (needs --dynamic)\n"
    "  --static-cache           fixed-size cache updated in place: input.<name>/output.<name>\n"
    "                           pairs to bind to one buffer each (needs --max-cache-len)\n"
    "  --max-cache-len N        static cache length\n"
    "  --revision REV           hub revision (branch, tag or commit) for a hub id\n"
    "  --force                  replace OUT if it is an earlier export: a directory holding\n"
    "                           a valid export.json (ferry's or transformers') and only the\n"
    "                           files it names, config.json and generation_config.json.\n"
    "                           Anything else, and the model's own directory (or one\n"
    "                           holding it or inside it), is refused and left untouched.\n"
    "                           The swap happens only once the new export is complete\n"
    "  -q, --quiet              no progress or warnings\n"
    "  -h, --help               this help\n"
    "\n"
    "Without --dynamic or --dim the export is static: it runs only at the example shape.\n"
    "OUT is written atomically: on any failure nothing is left and an existing OUT is untouched.\n";

static void print_usage(FILE *f)
{
    fprintf(f, usage, ferry_default_opset(), ferry_min_opset(), ferry_max_opset());
}

typedef struct progress_state {
    int last_percent;
} progress_state;

static void on_progress(void *user, uint64_t done, uint64_t total, const char *what)
{
    progress_state *p = user;
    int pct = total ? (int)(done * 100 / total) : 100;
    if (pct == p->last_percent && done != total)
        return;
    p->last_percent = pct;
    char name[64]; /* a tensor name from the checkpoint */
    fprintf(stderr, "\r\033[Kwriting weights %3d%%  %.1f / %.1f MB  %s", pct, done / 1e6,
            total / 1e6, ferry_escape(what, name, sizeof name));
    if (done >= total)
        fputc('\n', stderr);
    fflush(stderr);
}

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
    if (!strcmp(s, "fp32"))
        *out = FERRY_F32;
    else if (!strcmp(s, "fp16"))
        *out = FERRY_F16;
    else if (!strcmp(s, "bf16"))
        *out = FERRY_BF16;
    else
        return -1;
    return 0;
}

enum { OPT_FORMAT = 1000, OPT_DYNAMIC, OPT_DIM, OPT_EXAMPLE, OPT_DTYPE, OPT_OPSET, OPT_CONFIG,
       OPT_REVISION, OPT_FORCE, OPT_GENERATION, OPT_MULTI_TOKEN, OPT_STATIC_CACHE, OPT_MAX_CACHE };

int cmd_export(int argc, char **argv)
{
    static const struct option opts[] = {
        {"format", required_argument, NULL, OPT_FORMAT},
        {"dynamic", no_argument, NULL, OPT_DYNAMIC},
        {"dim", required_argument, NULL, OPT_DIM},
        {"example-shape", required_argument, NULL, OPT_EXAMPLE},
        {"dtype", required_argument, NULL, OPT_DTYPE},
        {"opset", required_argument, NULL, OPT_OPSET},
        {"config", required_argument, NULL, OPT_CONFIG},
        {"revision", required_argument, NULL, OPT_REVISION},
        {"force", no_argument, NULL, OPT_FORCE},
        {"for-generation", no_argument, NULL, OPT_GENERATION},
        {"multi-token-decode", no_argument, NULL, OPT_MULTI_TOKEN},
        {"static-cache", no_argument, NULL, OPT_STATIC_CACHE},
        {"max-cache-len", required_argument, NULL, OPT_MAX_CACHE},
        {"quiet", no_argument, NULL, 'q'},
        {"help", no_argument, NULL, 'h'},
        {NULL, 0, NULL, 0},
    };
    ferry_export_config cfg;
    ferry_export_config_init(&cfg);
    const char *revision = NULL;
    int force = 0, quiet = 0, c;
    char eb[512];
    optind = 1;
    opterr = 0;
    while ((c = getopt_long(argc, argv, "qh", opts, NULL)) != -1) {
        switch (c) {
        case OPT_FORMAT:
            if (strcmp(optarg, "onnx") != 0) {
                cli_error("--format %s is not supported (supported: onnx)", optarg);
                return EXIT_USAGE;
            }
            cfg.format = FERRY_FORMAT_ONNX;
            break;
        case OPT_DYNAMIC:
            cfg.dynamic = 1;
            break;
        case OPT_DIM:
            if (ferry_export_config_add_dim(&cfg, optarg, eb, sizeof eb) != FERRY_OK) {
                cli_error("%s", eb);
                return EXIT_USAGE;
            }
            break;
        case OPT_EXAMPLE: {
            long long b, s;
            int used = 0;
            if (sscanf(optarg, "input_ids=%lldx%lld%n", &b, &s, &used) != 2 || optarg[used] ||
                b <= 0 || s <= 0) {
                cli_error("--example-shape '%s': expected input_ids=BATCHxSEQUENCE, e.g. "
                          "input_ids=1x8", optarg);
                return EXIT_USAGE;
            }
            cfg.example_batch = b;
            cfg.example_sequence = s;
            break;
        }
        case OPT_DTYPE:
            if (parse_dtype(optarg, &cfg.dtype) != 0) {
                cli_error("--dtype %s: expected fp32, fp16 or bf16", optarg);
                return EXIT_USAGE;
            }
            break;
        case OPT_OPSET: {
            char *end;
            long v = strtol(optarg, &end, 10);
            if (*end || v < ferry_min_opset() || v > ferry_max_opset()) {
                cli_error("--opset %s: expected an integer from %d to %d", optarg,
                          ferry_min_opset(), ferry_max_opset());
                return EXIT_USAGE;
            }
            cfg.opset = (int)v;
            break;
        }
        case OPT_CONFIG: {
            errno = 0;
            size_t len = 0;
            char *text = read_text(optarg, &len);
            if (!text) {
                cli_error("%s: cannot read recipe: %s", optarg,
                          errno ? strerror(errno) : "larger than 16 MB");
                return EXIT_FAIL;
            }
            /* The library takes the recipe as a C string: a NUL would end it there and hide
             * whatever follows from the parser's checks. */
            const char *nul = memchr(text, '\0', len);
            if (nul) {
                cli_error("%s: NUL byte at byte %zu; a recipe is JSON text", optarg,
                          (size_t)(nul - text));
                free(text);
                return EXIT_FAIL;
            }
            ferry_status st = ferry_export_config_from_json(&cfg, text, eb, sizeof eb);
            free(text);
            if (st != FERRY_OK) {
                cli_error("%s: %s", optarg, eb);
                return EXIT_FAIL;
            }
            break;
        }
        case OPT_REVISION:
            revision = optarg;
            break;
        case OPT_FORCE:
            force = 1;
            break;
        case OPT_GENERATION:
            cfg.for_generation = 1;
            break;
        case OPT_MULTI_TOKEN:
            cfg.generation.multi_token_decode = 1;
            break;
        case OPT_STATIC_CACHE:
            cfg.generation.static_cache = 1;
            break;
        case OPT_MAX_CACHE: {
            char *end;
            long long v = strtoll(optarg, &end, 10);
            if (*end || v <= 0 || v > (1LL << 30)) {
                cli_error("--max-cache-len %s: expected a positive integer", optarg);
                return EXIT_USAGE;
            }
            cfg.generation.max_cache_len = v;
            break;
        }
        case 'q':
            quiet = 1;
            break;
        case 'h':
            print_usage(stdout);
            return EXIT_OK;
        default:
            cli_error("export: unknown or incomplete option '%s' (see ferry export --help)",
                      argv[optind - 1]);
            return EXIT_USAGE;
        }
    }
    if (!cfg.for_generation && (cfg.generation.multi_token_decode || cfg.generation.static_cache ||
                                cfg.generation.max_cache_len)) {
        cli_error("--multi-token-decode, --static-cache and --max-cache-len apply to "
                  "--for-generation exports");
        return EXIT_USAGE;
    }
    if (argc - optind != 2) {
        cli_error("export: expected MODEL and OUT (see ferry export --help)");
        return EXIT_USAGE;
    }
    const char *model_path = argv[optind], *out_dir = argv[optind + 1];

    progress_state ps = {-1};
    if (!quiet && isatty(STDERR_FILENO)) {
        cfg.progress = on_progress;
        cfg.progress_user = &ps;
    }
    ferry_model *model = NULL;
    ferry_exported *exported = NULL;
    int rc = EXIT_FAIL;
    if (ferry_model_open(model_path, revision, &model) != FERRY_OK) {
        cli_error("%s", ferry_model_errmsg(model));
        goto done;
    }
    if (ferry_export(model, &cfg, &exported) != FERRY_OK) {
        cli_error("%s", ferry_model_errmsg(model));
        goto done;
    }
    if (!quiet) {
        const char *w = ferry_exported_warnings(exported);
        while (*w) {
            const char *nl = strchr(w, '\n');
            int n = nl ? (int)(nl - w) : (int)strlen(w);
            cli_warn("%.*s", n, w);
            w += n + (nl ? 1 : 0);
        }
    }
    if (ferry_exported_save(exported, out_dir, force) != FERRY_OK) {
        cli_error("%s", ferry_exported_errmsg(exported));
        goto done;
    }
    if (!quiet)
        fprintf(stderr, "exported %s (%s) to %s\n", cli_quote(model_path),
                cli_quote(ferry_model_architecture(model)), cli_quote(out_dir));
    rc = EXIT_OK;
done:
    ferry_exported_free(exported);
    ferry_model_free(model);
    return rc;
}
