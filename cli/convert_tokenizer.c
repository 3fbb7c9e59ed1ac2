/* convert_tokenizer.c — openvino-tokenizers' conversion of a checkpoint's tokenizer for an
 * OpenVINO export (openvino_tokenizer.xml/.bin, openvino_detokenizer.xml/.bin, which
 * openvino-genai's pipelines read beside the model). The converter is Python, so the command
 * runs ferry's Python package (python/ferry/_tokenizers.py) into a temporary directory, which
 * the export then carries (ferry_export_config.converted_tokenizer_dir). Only where
 * $FERRY_TOKENIZER_PYTHON names the interpreter: the `ferry` command pip installs sets it. */
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <spawn.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#include "cli.h"

extern char **environ;

static const char bootstrap[] = CLI_PYTHON_BOOTSTRAP("ferry._tokenizers");

static const char *const CONVERTED[] = {
    "openvino_tokenizer.xml", "openvino_tokenizer.bin",
    "openvino_detokenizer.xml", "openvino_detokenizer.bin",
};

void cli_remove_converted(const char *dir)
{
    char path[PATH_MAX];
    for (size_t i = 0; i < sizeof CONVERTED / sizeof *CONVERTED; i++)
        if (snprintf(path, sizeof path, "%s/%s", dir, CONVERTED[i]) < (int)sizeof path)
            unlink(path);
    rmdir(dir); /* anything else in it is not ours to guess at: then it stays */
}

/* Runs the converter with its stdout on a pipe, read into `line` (its first line); the exit
 * status, or -1 when it could not be started or waited for, or died of a signal. */
static int run_converter(const char *python, const char *ckpt, const char *dir, char *line,
                         size_t size)
{
    int fds[2];
    if (pipe2(fds, O_CLOEXEC) != 0)
        return -1;
    posix_spawn_file_actions_t acts;
    posix_spawn_file_actions_init(&acts);
    posix_spawn_file_actions_adddup2(&acts, fds[1], STDOUT_FILENO);
    /* the libraries' own chatter (transformers' notices): the module says one line instead */
    posix_spawn_file_actions_addopen(&acts, STDERR_FILENO, "/dev/null", O_WRONLY, 0);
    char *argv[] = {(char *)python, (char *)"-c", (char *)bootstrap, (char *)ckpt, (char *)dir,
                    NULL};
    fflush(stdout);
    fflush(stderr);
    pid_t pid;
    int rc = posix_spawnp(&pid, python, &acts, NULL, argv, environ);
    posix_spawn_file_actions_destroy(&acts);
    close(fds[1]);
    if (rc != 0) {
        close(fds[0]);
        errno = rc;
        return -1;
    }
    cli_stop_child(pid);
    size_t got = 0;
    char buf[512];
    ssize_t n;
    while ((n = read(fds[0], buf, sizeof buf)) != 0) {
        if (n < 0 && errno == EINTR)
            continue;
        if (n < 0)
            break;
        for (ssize_t i = 0; i < n && got + 1 < size; i++)
            line[got++] = buf[i];
    }
    line[got] = '\0';
    line[strcspn(line, "\n")] = '\0';
    close(fds[0]);
    int status;
    while (waitpid(pid, &status, 0) < 0)
        if (errno != EINTR) {
            cli_stop_child(0);
            return -1;
        }
    cli_stop_child(0);
    return WIFEXITED(status) ? WEXITSTATUS(status) : -1;
}

bool cli_convert_tokenizer(const char *ckpt_dir, char *dir, size_t dir_size, char *why,
                           size_t why_size)
{
    const char *python = getenv(CLI_TOKENIZER_PYTHON);
    dir[0] = why[0] = '\0';
    if (!python || !*python)
        return false;
    const char *tmp = getenv("TMPDIR");
    if (snprintf(dir, dir_size, "%s/ferry-ov-tokenizer-XXXXXX", tmp && *tmp ? tmp : "/tmp") >=
            (int)dir_size || !mkdtemp(dir)) {
        snprintf(why, why_size, "no temporary directory to convert the tokenizer into (%s): the "
                 "export carries no openvino_tokenizer.xml", strerror(errno));
        dir[0] = '\0';
        return false;
    }
    char line[1024];
    int rc = run_converter(python, ckpt_dir, dir, line, sizeof line);
    if (rc == 0 && !cli_stop_signal) {
        snprintf(why, why_size, "%s", line); /* "" when it converted it all */
        return true;
    }
    char how[64];
    snprintf(how, sizeof how, rc == CLI_CANNOT_IMPORT ? "cannot import ferry's Python package"
                              : rc < 0 ? "did not run, or was killed" : "exited with status %d",
             rc);
    if (!cli_stop_signal)
        snprintf(why, why_size, "the tokenizer was not converted for openvino-genai: %s ($"
                 CLI_TOKENIZER_PYTHON ") %s; the export carries no openvino_tokenizer.xml",
                 python, how);
    cli_remove_converted(dir);
    dir[0] = '\0';
    return false;
}
