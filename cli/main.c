/* main.c — the ferry command: dispatch to subcommands, top-level help and version. */
#include <errno.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stdio.h>
#ifdef __GLIBC__
#include <malloc.h>
#endif
#include <signal.h>
#include <string.h>

#include "cli.h"
#include "ferry.h"

static const char usage[] =
    "usage: ferry <command> [options]\n"
    "\n"
    "Export Hugging Face Transformers checkpoints to deployable programs, from C.\n"
    "\n"
    "commands:\n"
    "  export MODEL OUT   export a checkpoint directory or local hub id to OUT\n"
    "  inspect DIR        show the components, inputs, outputs and files of an export\n"
    "  graph MODEL        print the graphs an export would hold, semantic or lowered\n"
    "  validate EXPORT    run an export and transformers' eager model on the same inputs and\n"
    "                     compare their logits (needs Python; see ferry validate --help)\n"
    "\n"
    "options:\n"
    "  -h, --help         this help; `ferry <command> --help` explains a command\n"
    "  --version          print the version\n"
    "\n"
    "example:\n"
    "  ferry export Qwen/Qwen3-0.6B qwen3-onnx --format onnx --dynamic\n"
    "  ferry inspect qwen3-onnx\n"
    "  ferry validate qwen3-onnx\n"
    "\n"
    "exit status: 0 success, 1 the export, inspection or validation failed, 2 bad command\n"
    "line (options that contradict each other or the model's inputs included; a --config\n"
    "recipe's are 1), 3 validation cannot run here (no Python with ferry, transformers and\n"
    "torch). What ferry cannot write yet is 1, even where options alone ask for it (a format\n"
    "with quantized weights it cannot hold, a block size that does not divide the model's\n"
    "rows): the command line is valid, the export fails.\n";

static void vmsg(const char *kind, const char *fmt, va_list ap)
{
    char raw[4096], out[8192];
    vsnprintf(raw, sizeof raw, fmt, ap);
    fprintf(stderr, "ferry: %s: %s\n", kind, ferry_escape(raw, out, sizeof out));
}

const char *cli_quote(const char *text)
{
    static char ring[CLI_QUOTE_RING][1024];
    static int next;
    next = (next + 1) % CLI_QUOTE_RING;
    return ferry_escape(text, ring[next], sizeof ring[next]);
}

void cli_error(const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    vmsg("error", fmt, ap);
    va_end(ap);
}

void cli_warn(const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    vmsg("warning", fmt, ap);
    va_end(ap);
}

static int run(int argc, char **argv)
{
    if (argc < 2) {
        fputs(usage, stderr);
        return EXIT_USAGE;
    }
    const char *cmd = argv[1];
    if (!strcmp(cmd, "-h") || !strcmp(cmd, "--help") || !strcmp(cmd, "help")) {
        fputs(usage, stdout);
        return EXIT_OK;
    }
    if (!strcmp(cmd, "--version") || !strcmp(cmd, "version")) {
        printf("ferry %s\n", ferry_version());
        return EXIT_OK;
    }
    if (!strcmp(cmd, "export"))
        return cmd_export(argc - 1, argv + 1);
    if (!strcmp(cmd, "inspect"))
        return cmd_inspect(argc - 1, argv + 1);
    if (!strcmp(cmd, "graph"))
        return cmd_graph(argc - 1, argv + 1);
    if (!strcmp(cmd, "validate"))
        return cmd_validate(argc - 1, argv + 1);
    static const char *const commands[] = {"export", "inspect", "graph", "validate", "help",
                                           "version"};
    const char *near = cli_nearest(cmd, strlen(cmd), commands,
                                   sizeof commands / sizeof commands[0]);
    if (near)
        cli_error("unknown command '%s'; did you mean %s? (commands: export, inspect, graph, "
                  "validate; see ferry --help)", cmd, near);
    else
        cli_error("unknown command '%s' (commands: export, inspect, graph, validate; see ferry "
                  "--help)", cmd);
    return EXIT_USAGE;
}

/* What a command printed may still sit in stdio's buffer, and a write that failed (a full disk,
 * /dev/full) is only recorded in the stream: without this check `ferry inspect out > file` on a
 * full disk exits 0 with the file empty. One line and exit 1; a command that already failed keeps
 * its own message and status. */
static int close_stdout(int rc)
{
    bool failed = ferror(stdout) != 0;
    errno = 0;
    if (fclose(stdout) != 0)
        failed = true;
    if (!failed || rc != EXIT_OK)
        return rc;
    cli_error("cannot write to standard output: %s", errno ? strerror(errno) : "a write failed");
    return EXIT_FAIL;
}

int main(int argc, char **argv)
{
#ifdef __GLIBC__
    /* Large buffers (weight bands, rotary tables) straight from and back to the kernel: glibc's
     * adaptive threshold would otherwise keep freed ones in the heap, and peak RSS would show
     * the allocator's history instead of what is live (30 MB of a 100 MB export). */
    mallopt(M_MMAP_THRESHOLD, 1 << 20);
#endif
    /* Past a file-size limit (ulimit -f) a write then fails with EFBIG, which the export reports
     * in one line and cleans up after, instead of SIGXFSZ killing the process mid-export and
     * leaving its temporary directory behind. */
    signal(SIGXFSZ, SIG_IGN);
    return close_stdout(run(argc, argv));
}
