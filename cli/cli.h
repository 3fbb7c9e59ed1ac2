/* cli.h — the ferry command's subcommands and shared helpers. Uses only ferry.h (and cJSON to
 * read manifests). */
#ifndef FERRY_CLI_H
#define FERRY_CLI_H

#include <getopt.h>
#include <signal.h>
#include <stdbool.h>
#include <stdio.h>
#include <sys/types.h>

#include "ferry.h"

/* EXIT_CANNOT: validation could not run here (no Python with ferry and its packages, or the
 * runtime cannot run the export), as distinct from a check that failed. */
enum { EXIT_OK = 0, EXIT_FAIL = 1, EXIT_USAGE = 2, EXIT_CANNOT = 3 };
/* cli_validate's: a stop signal ended validation before it finished (stop.c) */
enum { VALIDATE_STOPPED = 130 };

int cmd_export(int argc, char **argv);
int cmd_inspect(int argc, char **argv);
int cmd_graph(int argc, char **argv);
int cmd_validate(int argc, char **argv);

/* Stop signals (stop.c): the first SIGINT, SIGTERM or SIGHUP is recorded here (0: none yet),
 * for the library to poll (cfg.cancel) and the command to check; it is passed on as SIGTERM to
 * the child given to cli_stop_child; a second one kills at once. Signals ignored at start stay
 * ignored. */
extern volatile sig_atomic_t cli_stop_signal;
void cli_catch_stop_signals(void);
/* The child to pass the signal on to (0: none). */
void cli_stop_child(pid_t pid);
/* Dies of the recorded stop signal, if any (exit status 128 + N in a shell). */
void cli_die_if_stopped(void);

/* Runs validation (python/ferry/validation.py's main) on `args` ("EXPORT", options) in the
 * interpreter `ferry validate --help` describes: its exit status, or EXIT_CANNOT after one line
 * when no interpreter can import ferry (validate_cmd.c). */
int cli_validate(char *const *args, int n);

/* The interpreter that converts a checkpoint's tokenizer for an OpenVINO export (unset or
 * empty: none is converted); the `ferry` command pip installs sets it (convert_tokenizer.c). */
#define CLI_TOKENIZER_PYTHON "FERRY_TOKENIZER_PYTHON"

/* The exit status of CLI_PYTHON_BOOTSTRAP when its module cannot be imported. */
#define CLI_CANNOT_IMPORT 97
#define CLI_STR_(x) #x
#define CLI_STR(x) CLI_STR_(x)
/* The `python -c` program that runs `module`'s main(sys.argv[1:]) and exits with its status,
 * or with CLI_CANNOT_IMPORT. `python -c` puts the working directory first on sys.path: a
 * ferry.py or ferry/ there (an untrusted download, say) would be imported in place of the
 * package, so it comes off first. */
#define CLI_PYTHON_BOOTSTRAP(module)                                 \
    "import sys\n"                                                   \
    "sys.path = [p for p in sys.path if p not in ('', '.')]\n"       \
    "try:\n"                                                         \
    "    from " module " import main\n"                              \
    "except ImportError:\n"                                          \
    "    sys.exit(" CLI_STR(CLI_CANNOT_IMPORT) ")\n"                 \
    "sys.exit(main(sys.argv[1:]))\n"
/* openvino-tokenizers' conversion of the tokenizer of checkpoint `ckpt_dir` into a new temporary
 * directory, by ferry's Python package in $FERRY_TOKENIZER_PYTHON: true with its path in `dir`
 * (free it with cli_remove_converted) and in `why` the line saying what was not converted ("":
 * all was, or the checkpoint has no tokenizer); false, `dir` empty, when none is named (`why`
 * ""), or it failed or was stopped (`why` says so, unless stopped). */
bool cli_convert_tokenizer(const char *ckpt_dir, char *dir, size_t dir_size, char *why,
                           size_t why_size);
/* Removes the converted files cli_convert_tokenizer wrote, then `dir` if it is empty. */
void cli_remove_converted(const char *dir);

/* The options `export` and `graph` share (options.c). */
typedef struct cli_export_opts {
    ferry_export_config cfg;
    const char *revision;
    const char *quant_flag;  /* the first quantizer option on the command line (for messages) */
    bool examples_flag;      /* --example-shape was given: a recipe's example shapes are replaced */
    const char *generation_flag; /* a format option's flag that changes generation exports
                                    only, given on the command line */
    bool inputs_flag;          /* --inputs (plain exports only) was on the command line */
    bool cache_flag;         /* --static-cache or --max-cache-len was given */
    bool decode_flag;        /* --multi-token-decode or --single-token-decode was given */
    bool recipe_given;       /* --config took part in the config */
    int recipe_dims;         /* cfg.dims[0..recipe_dims) came from recipes: a --dim replaces */
} cli_export_opts;

enum {
    CLI_CONTINUE = -1,       /* parsing goes on (any other value is an exit status) */
    CLI_OPT_FORMAT = 1000, CLI_OPT_DYNAMIC, CLI_OPT_DIM, CLI_OPT_EXAMPLE, CLI_OPT_DTYPE,
    CLI_OPT_CONFIG, CLI_OPT_REVISION, CLI_OPT_GENERATION, CLI_OPT_MULTI_TOKEN,
    CLI_OPT_SINGLE_TOKEN,
    CLI_OPT_STATIC_CACHE, CLI_OPT_MAX_CACHE, CLI_OPT_QUANTIZE, CLI_OPT_BLOCK_SIZE,
    CLI_OPT_ASYMMETRIC, CLI_OPT_ACCURACY, CLI_OPT_QUANT_EMBED, CLI_OPT_FLOAT_HEAD,
    CLI_OPT_QUANT_METHOD, CLI_OPT_NO_TOKENIZER, CLI_OPT_INPUTS, CLI_OPT_TEXT_ONLY,
    CLI_OPT_FORMAT_OPTION = 1500, /* the formats' own flags: 1500 + their index in
                                     ferry_format_option_describe */
    CLI_OPT_COMMAND = 2000   /* a command's own long options start here */
};

/* The most long options one command takes: shared, the formats' and its own. */
#define CLI_MAX_OPTIONS 64

/* A command's own option `opt` (its value in `arg`): CLI_CONTINUE or an exit status. */
typedef int (*cli_extra_fn)(int opt, const char *arg, void *user);

/* Parses argv (getopt_long from argv[1]; "-q"/"-h" are the command's) into `o`, handing options
 * that are not shared to `on_extra`. Positional arguments are left at argv[optind..]. Returns
 * CLI_CONTINUE, or the exit status after printing one line. */
int cli_parse_export_options(int argc, char **argv, const char *cmd,
                             const struct option *extra, int n_extra, cli_extra_fn on_extra,
                             void *user, cli_export_opts *o);

/* The help lines of the shared options. */
void cli_print_export_options(FILE *f);
/* Each format's own options, from their tables (ferry_format_option_describe), under the
 * format's name: printed after a command's own options. */
void cli_print_format_options(FILE *f);

/* The exit status of an export or decomposition the library refused with `st`: its
 * FERRY_ERR_INVALID_ARG is a caller's mistake (options that contradict each other or the
 * model's inputs), a bad command line when the command line alone made the config; a recipe's
 * is the file's, as its other errors are (EXIT_FAIL). */
int cli_export_failure_status(const cli_export_opts *o, ferry_status st);

/* Each line of a library warnings text as "ferry: warning: ..." on stderr. */
void cli_print_warnings(const char *warnings);

/* "ferry: error: <msg>" on one line of stderr, the formatted message escaped as a whole
 * (ferry_escape): arguments echoed from the command line can carry control bytes too. */
void cli_error(const char *fmt, ...) __attribute__((format(printf, 1, 2)));
void cli_warn(const char *fmt, ...) __attribute__((format(printf, 1, 2)));

/* The one of names[0..n) nearest word[0..len) by edits (a swapped pair counting one), if it is
 * close for the word's length; else NULL (suggest.c). */
const char *cli_nearest(const char *word, size_t len, const char *const *names, size_t n);
/* One line for an unknown long option `word` ("--name" or "--name=value") of `cmd`, whose
 * options are names[0..n) (without "--"): the nearest as "did you mean", or the names it is an
 * ambiguous prefix of. */
void cli_unknown_option(const char *cmd, const char *word, const char *const *names, size_t n);

/* `text` escaped for printing (ferry_escape) into one of a ring of static buffers, so that one
 * printf can take several; each result stays valid for the next CLI_QUOTE_RING - 1 calls. */
#define CLI_QUOTE_RING 16
const char *cli_quote(const char *text);

#endif
