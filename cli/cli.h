/* cli.h — the ferry command's subcommands and shared helpers. Uses only ferry.h (and cJSON to
 * read manifests). */
#ifndef FERRY_CLI_H
#define FERRY_CLI_H

enum { EXIT_OK = 0, EXIT_FAIL = 1, EXIT_USAGE = 2 };

int cmd_export(int argc, char **argv);
int cmd_inspect(int argc, char **argv);

/* "ferry: error: <msg>" on one line of stderr, the formatted message escaped as a whole
 * (ferry_escape): arguments echoed from the command line can carry control bytes too. */
void cli_error(const char *fmt, ...) __attribute__((format(printf, 1, 2)));
void cli_warn(const char *fmt, ...) __attribute__((format(printf, 1, 2)));

/* `text` escaped for printing (ferry_escape) into one of a ring of static buffers, so that one
 * printf can take several; each result stays valid for the next CLI_QUOTE_RING - 1 calls. */
#define CLI_QUOTE_RING 16
const char *cli_quote(const char *text);

#endif
