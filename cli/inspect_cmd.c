/* inspect_cmd.c — `ferry inspect DIR`: what an export holds, as the library describes it
 * (ferry_exported_describe), or its export.json as loaded (--json). */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cli.h"
#include "ferry.h"

static const char usage[] =
    "usage: ferry inspect DIR [--subfolder NAME] [--json] [--verify] [-v]\n"
    "\n"
    "Show what the export in DIR holds: each component with its role, file sizes, inputs and\n"
    "outputs (dtype, symbolic shape, traced shape), precision, opset and symbol ranges.\n"
    "Inputs, outputs and cache entries that differ only in a layer number, with the same dtype\n"
    "and shapes, are one line: past_key_values.{0..29}.key ... x30 (--verbose lists each).\n"
    "DIR may also hold an export transformers' ExportedModel.save_pretrained wrote.\n"
    "The manifest is validated first: its paths must stay inside DIR, and each file must have\n"
    "the size the export wrote (a copy cut short is refused). What inspect shows is read from\n"
    "export.json; the files' contents are not parsed: `ferry validate DIR` runs them.\n"
    "\n"
    "options:\n"
    "  --subfolder NAME   inspect DIR/NAME (an export kept next to others, e.g. onnx/)\n"
    "  -v, --verbose      list every input, output and cache entry on its own line\n"
    "  --json             print export.json as loaded\n"
    "  --verify           also read every file and compare its CRC-32 with the one the export\n"
    "                     recorded (a file swapped for another of the same size is refused;\n"
    "                     Python's ExportedModel.from_pretrained always does this)\n"
    "  -h, --help         this help\n";

/* The manifest text with every run between its line breaks and tabs (cJSON's layout) escaped:
 * ferry_escape writes \uXXXX for the characters JSON leaves raw, so the output stays JSON. */
static void print_json_escaped(const char *text)
{
    while (*text) {
        size_t n = strcspn(text, "\n\t");
        if (n > 0) {
            char *run = strndup(text, n);
            size_t size = 4 * n + 8;
            char *out = run ? malloc(size) : NULL;
            fputs(out ? ferry_escape(run, out, size) : "(out of memory)", stdout);
            free(out);
            free(run);
        }
        text += n;
        if (*text)
            putchar(*text++);
    }
    putchar('\n');
}

int cmd_inspect(int argc, char **argv)
{
    const char *dir = NULL, *subfolder = NULL;
    static const char *const options[] = {"subfolder", "json", "verify", "verbose", "help"};
    int json = 0, verify = 0, verbose = 0;
    for (int i = 1; i < argc; i++) {
        if (!strcmp(argv[i], "-h") || !strcmp(argv[i], "--help")) {
            fputs(usage, stdout);
            return EXIT_OK;
        } else if (!strcmp(argv[i], "--json")) {
            json = 1;
        } else if (!strcmp(argv[i], "--verify")) {
            verify = 1;
        } else if (!strcmp(argv[i], "-v") || !strcmp(argv[i], "--verbose")) {
            verbose = 1;
        } else if (!strcmp(argv[i], "--subfolder") && i + 1 < argc) {
            subfolder = argv[++i];
        } else if (!strncmp(argv[i], "--", 2) && argv[i][2] && strcmp(argv[i], "--subfolder")) {
            cli_unknown_option("inspect", argv[i], options, sizeof options / sizeof *options);
            return EXIT_USAGE;
        } else if (argv[i][0] == '-' || dir) {
            cli_error("inspect: unexpected argument '%s' (see ferry inspect --help)", argv[i]);
            return EXIT_USAGE;
        } else {
            dir = argv[i];
        }
    }
    if (!dir) {
        cli_error("inspect: expected DIR (see ferry inspect --help)");
        return EXIT_USAGE;
    }
    ferry_exported *e = NULL;
    if (ferry_exported_load(dir, subfolder, &e) != FERRY_OK ||
        (verify && ferry_exported_verify(e) != FERRY_OK)) {
        cli_error("%s", ferry_exported_errmsg(e));
        ferry_exported_free(e);
        return EXIT_FAIL;
    }
    if (json) {
        print_json_escaped(ferry_exported_manifest(e));
        ferry_exported_free(e);
        return EXIT_OK;
    }
    const char *text = verbose ? ferry_exported_describe(e) : ferry_exported_describe_brief(e);
    fputs(text ? text : "(out of memory)\n", stdout);
    ferry_exported_free(e);
    return text ? EXIT_OK : EXIT_FAIL;
}
