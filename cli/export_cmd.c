/* export_cmd.c — `ferry export MODEL OUT ...`: options -> ferry_export_config -> export -> save,
 * with a progress line on stderr when it is a terminal. */
#include <limits.h>
#include <stdio.h>
#include <string.h>
#include <unistd.h>

#include "cli.h"

static void print_usage(FILE *f)
{
    fputs("usage: ferry export MODEL OUT [options]\n"
          "\n"
          "Export MODEL (a directory with config.json and *.safetensors, or a hub id such as\n"
          "Qwen/Qwen3-0.6B found offline in $HF_HOME/hub) to the directory OUT, which receives\n"
          "model.onnx, model.onnx.data (weights, 4096-aligned), export.json and config.json\n"
          "(--format openvino: openvino_model.xml and openvino_model.bin, OpenVINO IR v11;\n"
          "--format pt2: model.pt2, a torch.export archive that torch.export.load reads, as\n"
          "transformers' DynamoExporter writes it; a recipe calls this format \"dynamo\";\n"
          "--format executorch: model.pte, an ExecuTorch program that executorch.runtime\n"
          "loads, as transformers' ExecutorchExporter writes it).\n"
          "OUT and its missing parents are made; a failed export leaves none of them behind.\n"
          "The graph takes input_ids and attention_mask (int64 [batch, sequence], a\n"
          "tokenizer's output; --inputs adds position_ids) and returns logits; a decoder-only\n"
          "model's generation components also take position_ids, as generate() computes\n"
          "them: cumsum(attention_mask) - 1. An encoder-decoder's encoder takes what its\n"
          "processor returns (Whisper: input_features; T5: input_ids, attention_mask) and\n"
          "its decoder computes its own positions.\n"
          "\n"
          "options:\n", f);
    cli_print_export_options(f);
    fputs("  --force                  replace OUT if it is an earlier export: a directory "
          "holding\n"
          "                           a valid export.json (ferry's or transformers') and only "
          "the\n"
          "                           files it names, config.json and generation_config.json.\n"
          "                           Anything else, and the model's own directory (or one\n"
          "                           holding it or inside it), is refused and left untouched.\n"
          "                           The swap happens only once the new export is complete.\n"
          "                           An empty directory OUT needs no --force: it is used\n"
          "                           as the destination\n"
          "  --validate               then validate OUT as `ferry validate OUT` does (run it and\n"
          "                           transformers' eager model on example inputs, compare the\n"
          "                           logits); a failed validation exits 1 (3 when it cannot\n"
          "                           run here) and leaves the export in OUT\n"
          "  -q, --quiet              no progress or warnings\n"
          "  -h, --help               this help\n", f);
    cli_print_format_options(f);
    fputs("\n"
          "Without --dynamic or --dim the export is static: it runs only at the example shape.\n"
          "OUT is written atomically: on any failure nothing is left and an existing OUT is "
          "untouched.\n"
          "Ctrl-C (SIGINT), SIGTERM or SIGHUP stops an export within a band of weights and "
          "removes\n"
          "what it wrote (once it is written: stops --validate, which records nothing); a second\n"
          "one stops it at once (the next export to OUT removes what that leaves). Either way\n"
          "ferry then dies of the signal, as a shell script expects.\n"
          "`ferry graph MODEL` shows the graphs the same options would export.\n"
          "\n"
          "With --format openvino, the `ferry` command pip installs also writes\n"
          "openvino_tokenizer.xml/.bin and openvino_detokenizer.xml/.bin into OUT (listed in\n"
          "export.json), openvino-tokenizers' conversion of the checkpoint's tokenizer, so that\n"
          "openvino-genai's LLMPipeline (VLMPipeline, WhisperPipeline) runs OUT as it is; where\n"
          "openvino-tokenizers is missing (pip install 'ferry[openvino]') or cannot convert the\n"
          "tokenizer, the export is written without them and a warning says why. The C command\n"
          "alone (build/ferry) runs no Python and writes them only when $" CLI_TOKENIZER_PYTHON "\n"
          "names a Python with ferry's package and openvino-tokenizers.\n", f);
}

typedef struct progress_state {
    int last_percent;
    int line_open;   /* a progress line is drawn, not ended with a newline */
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
    p->line_open = done < total;
    if (!p->line_open)
        fputc('\n', stderr);
    fflush(stderr);
}

/* --validate: the export just saved, checked against the checkpoint export.json records. */
static int validate_export(const char *out_dir, int quiet)
{
    char *args[] = {(char *)out_dir, (char *)"--quiet"};
    int rc = cli_validate(args, quiet ? 2 : 1);
    if (rc == VALIDATE_STOPPED) {
        cli_error("export: %s was written; its validation was interrupted (ferry validate %s "
                  "runs it again)", cli_quote(out_dir), cli_quote(out_dir));
        return EXIT_FAIL;
    }
    if (rc == EXIT_FAIL || rc == EXIT_CANNOT)
        cli_error("export: %s was written, but it %s validated; it is left there (ferry validate "
                  "%s checks it again)", cli_quote(out_dir),
                  rc == EXIT_FAIL ? "did not pass when" : "could not be", cli_quote(out_dir));
    return rc == EXIT_OK ? EXIT_OK : rc == EXIT_CANNOT ? EXIT_CANNOT : EXIT_FAIL;
}

enum { OPT_FORCE = CLI_OPT_COMMAND, OPT_VALIDATE };

typedef struct export_flags {
    int force, quiet, validate;
} export_flags;

static int export_option(int opt, const char *arg, void *user)
{
    (void)arg;
    export_flags *f = user;
    switch (opt) {
    case OPT_FORCE:
        f->force = 1;
        return CLI_CONTINUE;
    case OPT_VALIDATE:
        f->validate = 1;
        return CLI_CONTINUE;
    case 'q':
        f->quiet = 1;
        return CLI_CONTINUE;
    case 'h':
        print_usage(stdout);
        return EXIT_OK;
    }
    return -2;
}

int cmd_export(int argc, char **argv)
{
    static const struct option own[] = {
        {"force", no_argument, NULL, OPT_FORCE},
        {"validate", no_argument, NULL, OPT_VALIDATE},
        {"quiet", no_argument, NULL, 'q'},
        {"help", no_argument, NULL, 'h'},
    };
    cli_export_opts o;
    export_flags flags = {0, 0, 0};
    int rc = cli_parse_export_options(argc, argv, "export", own, 4, export_option, &flags, &o);
    if (rc != CLI_CONTINUE)
        return rc;
    if (argc - optind != 2) {
        cli_error("export: expected MODEL and OUT (see ferry export --help)");
        return EXIT_USAGE;
    }
    const char *model_path = argv[optind], *out_dir = argv[optind + 1];

    cli_catch_stop_signals();
    o.cfg.cancel = &cli_stop_signal;
    progress_state ps = {-1, 0};
    if (!flags.quiet && isatty(STDERR_FILENO)) {
        o.cfg.progress = on_progress;
        o.cfg.progress_user = &ps;
    }
    ferry_model *model = NULL;
    ferry_exported *exported = NULL;
    char converted[PATH_MAX] = "", convert_why[1200] = "";
    rc = EXIT_FAIL;
    ferry_status opened = ferry_model_open(model_path, o.revision, &model);
    if (opened != FERRY_OK) {
        cli_error("%s", ferry_model_errmsg(model));
        /* A --revision the library refuses (not a valid name, or given with a directory) is a
         * bad command line; other refusals are the checkpoint's */
        if (opened == FERRY_ERR_INVALID_ARG && o.revision)
            rc = EXIT_USAGE;
        goto done;
    }
    /* an OpenVINO export carries the tokenizer converted for openvino-genai, where the command
     * pip installs names a Python to convert it (the plain C command runs no Python) */
    if (o.cfg.format == FERRY_FORMAT_OPENVINO && !o.cfg.skip_tokenizer &&
        cli_convert_tokenizer(ferry_model_dir(model), converted, sizeof converted, convert_why,
                              sizeof convert_why))
        o.cfg.converted_tokenizer_dir = converted;
    if (cli_stop_signal)
        goto done;
    ferry_status st = ferry_export(model, &o.cfg, &exported);
    if (converted[0]) { /* read by the export: no longer needed */
        cli_remove_converted(converted);
        converted[0] = '\0';
    }
    if (st != FERRY_OK) {
        cli_error("%s", ferry_model_errmsg(model));
        rc = cli_export_failure_status(&o, st);
        goto done;
    }
    if (ferry_exported_save(exported, out_dir, flags.force) != FERRY_OK) {
        if (ps.line_open)
            fputc('\n', stderr); /* the error below the progress line, not after it */
        cli_error("%s", ferry_exported_errmsg(exported));
        goto done;
    }
    /* after the save: a failed export says one line, its error */
    if (!flags.quiet) {
        if (convert_why[0])
            cli_warn("%s", convert_why);
        cli_print_warnings(ferry_exported_warnings(exported));
        cli_print_warnings(ferry_exported_save_warnings(exported));
        fprintf(stderr, "exported %s (%s) to %s\n", cli_quote(model_path),
                cli_quote(ferry_model_architecture(model)), cli_quote(out_dir));
    }
    rc = EXIT_OK;
    if (cli_stop_signal) /* too late to stop the save, which is whole; not to skip the rest */
        goto done;
    if (flags.validate)
        rc = validate_export(out_dir, flags.quiet);
done:
    if (converted[0])
        cli_remove_converted(converted);
    ferry_exported_free(exported);
    ferry_model_free(model);
    cli_die_if_stopped();
    return rc;
}
