/* export_cmd.c — `ferry export MODEL OUT ...`: options -> ferry_export_config -> export -> save,
 * with a progress line on stderr when it is a terminal. */
#include <signal.h>
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
          "transformers' DynamoExporter writes it; a recipe calls this format \"dynamo\").\n"
          "The graph takes input_ids, attention_mask and position_ids (int64 [batch, sequence];\n"
          "position_ids as generate() computes them: cumsum(attention_mask) - 1) and returns "
          "logits.\n"
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
          "  -h, --help               this help\n"
          "\n"
          "Without --dynamic or --dim the export is static: it runs only at the example shape.\n"
          "OUT is written atomically: on any failure nothing is left and an existing OUT is "
          "untouched.\n"
          "Ctrl-C (SIGINT), SIGTERM or SIGHUP stops an export within a band of weights and "
          "removes\n"
          "what it wrote; a second one stops it at once (the next export to OUT removes what\n"
          "that leaves). Either way ferry then dies of the signal, as a shell script expects.\n"
          "`ferry graph MODEL` shows the graphs the same options would export.\n", f);
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
    if (rc == EXIT_FAIL || rc == EXIT_CANNOT)
        cli_error("export: %s was written, but it %s validated; it is left there (ferry validate "
                  "%s checks it again)", cli_quote(out_dir),
                  rc == EXIT_FAIL ? "did not pass when" : "could not be", cli_quote(out_dir));
    return rc == EXIT_OK ? EXIT_OK : rc == EXIT_CANNOT ? EXIT_CANNOT : EXIT_FAIL;
}

/* The signal that asked the export to stop, or 0: the library polls it (cfg.cancel, an int,
 * which sig_atomic_t is here: checked below). */
static volatile sig_atomic_t stop_signal;
_Static_assert(sizeof(sig_atomic_t) == sizeof(int), "cfg.cancel points at an int");

static void on_stop_signal(int sig)
{
    if (stop_signal) { /* asked twice: die now */
        signal(sig, SIG_DFL);
        raise(sig);
        return;
    }
    stop_signal = sig;
}

/* Handles the signals that ask a program to stop, except those already ignored (nohup's
 * SIGHUP, a background job's SIGINT): they stay ignored. */
static void catch_stop_signals(void)
{
    static const int sigs[] = {SIGINT, SIGTERM, SIGHUP};
    for (size_t i = 0; i < sizeof sigs / sizeof sigs[0]; i++) {
        struct sigaction old, sa;
        if (sigaction(sigs[i], NULL, &old) != 0 || old.sa_handler == SIG_IGN)
            continue;
        memset(&sa, 0, sizeof sa);
        sa.sa_handler = on_stop_signal;
        sa.sa_flags = SA_RESTART;
        sigemptyset(&sa.sa_mask);
        sigaction(sigs[i], &sa, NULL);
    }
}

/* Dies of the signal that stopped the export, so that the caller (a shell running a loop, a
 * supervisor) sees it as such: exit status 128 + signal in a shell. */
static void die_of_stop_signal(void)
{
    int sig = stop_signal;
    fflush(NULL);
    signal(sig, SIG_DFL);
    raise(sig);
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

    catch_stop_signals();
    o.cfg.cancel = &stop_signal;
    progress_state ps = {-1, 0};
    if (!flags.quiet && isatty(STDERR_FILENO)) {
        o.cfg.progress = on_progress;
        o.cfg.progress_user = &ps;
    }
    ferry_model *model = NULL;
    ferry_exported *exported = NULL;
    rc = EXIT_FAIL;
    if (ferry_model_open(model_path, o.revision, &model) != FERRY_OK) {
        cli_error("%s", ferry_model_errmsg(model));
        goto done;
    }
    if (ferry_export(model, &o.cfg, &exported) != FERRY_OK) {
        cli_error("%s", ferry_model_errmsg(model));
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
        cli_print_warnings(ferry_exported_warnings(exported));
        fprintf(stderr, "exported %s (%s) to %s\n", cli_quote(model_path),
                cli_quote(ferry_model_architecture(model)), cli_quote(out_dir));
    }
    rc = EXIT_OK;
    if (stop_signal) /* too late to stop the save, which is whole; not too late to stop here */
        goto done;
    if (flags.validate)
        rc = validate_export(out_dir, flags.quiet);
done:
    ferry_exported_free(exported);
    ferry_model_free(model);
    if (stop_signal)
        die_of_stop_signal();
    return rc;
}
