/* validate_cmd.c — `ferry validate EXPORT ...` and `ferry export ... --validate`. Validation
 * compares an export with transformers' eager model, which is Python, so both run ferry's
 * Python package (python/ferry/validation.py) in an interpreter found as the help says. */
#include <errno.h>
#include <limits.h>
#include <spawn.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#include "cli.h"

extern char **environ;

static const char usage[] =
    "usage: ferry validate EXPORT [--model CKPT [--revision REV]] [--subfolder DIR]\n"
    "                      [--atol X | --min-top1 X] [--no-record] [-q]\n"
    "\n"
    "Run the export in EXPORT in its runtime (onnxruntime, OpenVINO, torch for a .pt2, or\n"
    "ExecuTorch's for a .pte; on CPU) and transformers' eager model on the same example inputs, and compare the logits of\n"
    "every real (non-padding) position. The inputs are a batch of 2 with one row left-padded,\n"
    "16 tokens (a static export: its traced shape). A generation export runs the prompt (prefill,\n"
    "or decode on an empty cache), then 8 greedy decode steps with its cache carried between\n"
    "calls (OpenVINO's stateful graph: in its variables). An encoder's outputs are compared\n"
    "the same way (last_hidden_state at the real positions of a right-padded batch,\n"
    "pooler_output, a head's logits; quantized encoders are not validated yet). One row per\n"
    "output: max |Δ|, the bound, PASS or FAIL.\n"
    "\n"
    "Bounds: max |Δ| <= 1e-4 for fp32, 2e-2 for fp16 (fp16-compressed weights too), 0.25 for\n"
    "bf16, times max(1, largest |eager logit| / 10): a real model's logits reach ~30, and a\n"
    "runtime summing in another order than torch moves them in proportion; for fp16 and bf16\n"
    "at least twice what transformers' own eager model in that precision moves them on the\n"
    "same inputs (a model whose logits half precision moves far; an error smaller than that\n"
    "cannot be told from half precision's own: an fp32 export checks the graph to 1e-4).\n"
    "Quantized weights: the top-1 token agrees with the eager model's at >= 0.5 of the\n"
    "positions for int8, >= 0.1 for int4 (floors that catch a broken export, not a measure\n"
    "of quality).\n"
    "When every check passes, export.json records the versions it passed with\n"
    "(\"validated_with\"), and loading the export in Python with another runtime version logs\n"
    "one warning.\n"
    "\n"
    "options:\n"
    "  --model CKPT      the checkpoint of the eager reference (a directory, or a hub id in the\n"
    "                    local cache); default: the one export.json records as its source\n"
    "  --revision REV    the revision of a hub id given as --model\n"
    "  --subfolder DIR   validate the export in EXPORT/DIR (e.g. onnx/)\n"
    "  --atol X          an absolute bound instead (not scaled; X >= 0), for an export\n"
    "                    without quantized weights\n"
    "  --min-top1 X      replace a quantized export's least top-1 agreement (0 <= X <= 1)\n"
    "  --no-record       leave export.json as it is\n"
    "  -q, --quiet       print the table only when a check fails\n"
    "  -h, --help        this help\n"
    "\n"
    "Validation runs in Python: $FERRY_PYTHON if set (a pip-installed ferry command sets it to\n"
    "its own Python), else python3 beside the ferry executable (a virtual environment's bin/),\n"
    "else python3 on PATH. It needs the ferry package (`pip install .` from ferry's source, or\n"
    "its python/ directory on PYTHONPATH), transformers, torch, and onnxruntime, openvino\n"
    "or executorch for those formats (torch runs a .pt2).\n"
    "Nothing is downloaded. Ctrl-C, SIGTERM or SIGHUP stops it (its Python gets SIGTERM;\n"
    "a $FERRY_PYTHON wrapper script must exec Python for that to reach it): nothing is\n"
    "recorded, unless validation had already finished, and ferry dies of the signal.\n"
    "\n"
    "exit status: 0 every check passed, 1 a check failed (or the export or the checkpoint could\n"
    "not be read or run), 2 bad command line (a bound out of its range, both bounds, or the\n"
    "one the export is not checked by), 3 validation cannot run here (no Python with\n"
    "ferry, transformers and torch; no runtime; or the runtime cannot run this export).\n";

static const char bootstrap[] = CLI_PYTHON_BOOTSTRAP("ferry.validation");

/* Runs `python` on the bootstrap with `args` (n of them); the exit status, CLI_CANNOT_IMPORT
 * when it cannot import ferry.validation or cannot be started, -1 after one line when it died. */
static int run_python(const char *python, char *const *args, int n)
{
    char **argv = calloc((size_t)n + 4, sizeof *argv);
    if (!argv) {
        cli_error("validate: out of memory");
        return -1;
    }
    argv[0] = (char *)python;
    argv[1] = (char *)"-c";
    argv[2] = (char *)bootstrap;
    for (int i = 0; i < n; i++)
        argv[3 + i] = args[i];
    fflush(stdout);
    fflush(stderr);
    pid_t pid;
    int rc = posix_spawnp(&pid, python, NULL, NULL, argv, environ);
    free(argv);
    if (rc != 0)
        return CLI_CANNOT_IMPORT;
    cli_stop_child(pid);
    int status;
    while (waitpid(pid, &status, 0) < 0)
        if (errno != EINTR) {
            cli_stop_child(0);
            cli_error("validate: waiting for %s: %s", cli_quote(python), strerror(errno));
            return -1;
        }
    cli_stop_child(0);
    /* A validation that finished before the signal keeps its result (and its record); one
     * the signal ended (killed, or Python's KeyboardInterrupt exit) was stopped. */
    if (WIFEXITED(status) && !(cli_stop_signal && WEXITSTATUS(status) == VALIDATE_STOPPED))
        return WEXITSTATUS(status);
    if (cli_stop_signal)
        return VALIDATE_STOPPED;
    cli_error("validate: %s was killed by signal %d", cli_quote(python), WTERMSIG(status));
    return -1;
}

/* python3 in the directory of this executable, if there is one. */
static bool python_beside_me(char *out, size_t size)
{
    char self[PATH_MAX];
    ssize_t n = readlink("/proc/self/exe", self, sizeof self - 1);
    if (n <= 0)
        return false;
    self[n] = '\0';
    char *slash = strrchr(self, '/');
    if (!slash)
        return false;
    *slash = '\0';
    int len = snprintf(out, size, "%s/python3", self);
    return len > 0 && (size_t)len < size && access(out, X_OK) == 0;
}

int cli_validate(char *const *args, int n)
{
    const char *chosen = getenv("FERRY_PYTHON");
    char beside[PATH_MAX], tried[3 * PATH_MAX + 64] = "";
    const char *candidates[2];
    int n_candidates = 0;
    if (chosen && *chosen) {
        candidates[n_candidates++] = chosen;
    } else {
        if (python_beside_me(beside, sizeof beside))
            candidates[n_candidates++] = beside;
        candidates[n_candidates++] = "python3";
    }
    for (int i = 0; i < n_candidates; i++) {
        int rc = run_python(candidates[i], args, n);
        if (rc < 0)
            return EXIT_FAIL;
        if (rc == VALIDATE_STOPPED)
            return rc;
        if (rc != CLI_CANNOT_IMPORT)
            return rc;
        size_t used = strlen(tried);
        snprintf(tried + used, sizeof tried - used, "%s%s", used ? ", " : "", candidates[i]);
    }
    cli_error("validate: needs a Python that can import the ferry package (`pip install .` "
              "from ferry's source, or its python/ directory on PYTHONPATH) with transformers, "
              "torch, and onnxruntime, openvino or executorch; tried %s%s", tried,
              chosen && *chosen ? " ($FERRY_PYTHON)" : " (set FERRY_PYTHON to choose one)");
    return EXIT_CANNOT;
}

int cmd_validate(int argc, char **argv)
{
    for (int i = 1; i < argc && strcmp(argv[i], "--") != 0; i++)
        if (!strcmp(argv[i], "-h") || !strcmp(argv[i], "--help")) {
            fputs(usage, stdout);
            return EXIT_OK;
        }
    if (argc < 2) {
        cli_error("validate: expected EXPORT (see ferry validate --help)");
        return EXIT_USAGE;
    }
    cli_catch_stop_signals();
    int rc = cli_validate(argv + 1, argc - 1);
    if (rc == VALIDATE_STOPPED)
        cli_error("validate: interrupted; nothing was recorded");
    cli_die_if_stopped();
    return rc == VALIDATE_STOPPED ? EXIT_FAIL : rc;
}
