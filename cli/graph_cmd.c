/* graph_cmd.c — `ferry graph MODEL [options]`: the graphs an export with the same options would
 * hold, as text (ferry_components_dump), without writing anything: the semantic graph the
 * architecture builds, or the graph lowered for the format's target. */
#include <stdio.h>
#include <string.h>

#include "cli.h"

static void print_usage(FILE *f)
{
    fputs("usage: ferry graph MODEL [options]\n"
          "\n"
          "Print the graph of each component an export of MODEL with these options would hold,\n"
          "one line per input, weight (with its checkpoint tensors), constant, node (op, inputs,\n"
          "attributes, output dtypes and symbolic shapes), output and cache state. Nothing is\n"
          "written; weights are not read.\n"
          "\n"
          "options:\n"
          "  --stage semantic|lowered the graph as the architecture builds it (semantic ops:\n"
          "                           attention, rms_norm, rope, linear, ...; the default), or\n"
          "                           lowered for the export format's target, as written\n"
          "  --component NAME         only this component (model, prefill, decode, encoder)\n"
          "\n"
          "export options, as `ferry export` takes them: they shape these graphs as they shape the\n"
          "export (the ONNX opset too: below opset 20 the erf GELU is its arithmetic):\n",
          f);
    cli_print_export_options(f);
    fputs("  -h, --help               this help\n", f);
    cli_print_format_options(f);
    fputs("\n"
          "example:\n"
          "  ferry graph ./my-llama --dynamic --stage lowered | less\n"
          "\n"
          "exit status: 0 printed, 1 the model cannot be read or exported so, 2 bad command line\n"
          "(a component these options' export has not included).\n", f);
}

enum { OPT_STAGE = CLI_OPT_COMMAND, OPT_COMPONENT };

typedef struct graph_flags {
    ferry_graph_stage stage;
    const char *component;
} graph_flags;

static int graph_option(int opt, const char *arg, void *user)
{
    graph_flags *f = user;
    switch (opt) {
    case OPT_STAGE:
        if (!strcmp(arg, "semantic")) {
            f->stage = FERRY_STAGE_SEMANTIC;
        } else if (!strcmp(arg, "lowered")) {
            f->stage = FERRY_STAGE_LOWERED;
        } else {
            cli_error("--stage %s: expected semantic or lowered", arg);
            return EXIT_USAGE;
        }
        return CLI_CONTINUE;
    case OPT_COMPONENT:
        f->component = arg;
        return CLI_CONTINUE;
    case 'h':
        print_usage(stdout);
        return EXIT_OK;
    }
    return -2;
}

int cmd_graph(int argc, char **argv)
{
    static const struct option own[] = {
        {"stage", required_argument, NULL, OPT_STAGE},
        {"component", required_argument, NULL, OPT_COMPONENT},
        {"help", no_argument, NULL, 'h'},
    };
    cli_export_opts o;
    graph_flags flags = {FERRY_STAGE_SEMANTIC, NULL};
    int rc = cli_parse_export_options(argc, argv, "graph", own, 3, graph_option, &flags, &o);
    if (rc != CLI_CONTINUE)
        return rc;
    if (argc - optind != 1) {
        cli_error("graph: expected MODEL (see ferry graph --help)");
        return EXIT_USAGE;
    }
    ferry_model *model = NULL;
    ferry_components *comps = NULL;
    rc = EXIT_FAIL;
    ferry_status st = ferry_model_open(argv[optind], o.revision, &model);
    if (st == FERRY_ERR_INVALID_ARG && o.revision) /* a --revision refused is the command line's */
        rc = EXIT_USAGE;
    else if (st == FERRY_OK && (st = ferry_decompose(model, &o.cfg, &comps)) != FERRY_OK)
        rc = cli_export_failure_status(&o, st);
    if (st != FERRY_OK) {
        cli_error("%s", ferry_model_errmsg(model));
        goto done;
    }
    int n = ferry_components_count(comps), found = 0;
    for (int i = 0; flags.component && i < n; i++)
        found |= strcmp(flags.component, ferry_components_name(comps, i)) == 0;
    if (flags.component && !found) {
        /* a name the options' export has not: the command line's fault
         * (exit 1, and only the first of the names it has) */
        char names[256] = "";
        for (int i = 0; i < n; i++)
            snprintf(names + strlen(names), sizeof names - strlen(names), "%s%s", i ? ", " : "",
                     ferry_components_name(comps, i));
        cli_error("graph: no component named '%s' (with these options the export has: %s)",
                  flags.component, names);
        rc = EXIT_USAGE;
        goto done;
    }
    int shown = 0;
    for (int i = 0; i < n; i++) {
        const char *name = ferry_components_name(comps, i);
        if (flags.component && strcmp(flags.component, name) != 0)
            continue;
        const char *text = ferry_components_dump(comps, i, flags.stage);
        if (!text) {
            cli_error("%s", ferry_model_errmsg(model));
            goto done;
        }
        printf("%scomponent %s (role %s)\n%s", shown ? "\n" : "", name,
               ferry_components_role(comps, i), text);
        shown++;
    }
    rc = EXIT_OK;
done:
    ferry_components_free(comps);
    ferry_model_free(model);
    return rc;
}
