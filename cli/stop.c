/* stop.c — SIGINT, SIGTERM and SIGHUP while `export` or `validate` runs: the first is recorded
 * (the library polls it through ferry_export_config.cancel, and stops and cleans up) and passed
 * on to the child running validation as SIGTERM; a second kills at once. The command then dies
 * of the signal, so that a shell sees 128 + N. */
#include <signal.h>
#include <string.h>
#include <sys/types.h>

#include "cli.h"

volatile sig_atomic_t cli_stop_signal;
static volatile sig_atomic_t child; /* pid_t fits: an int */

_Static_assert(sizeof(sig_atomic_t) == sizeof(int), "cfg.cancel points at an int");
_Static_assert(sizeof(pid_t) <= sizeof(sig_atomic_t), "a child's pid is kept in the handler's");

static void on_stop_signal(int sig)
{
    pid_t running = child;
    if (cli_stop_signal) { /* asked twice: now, and the child with us */
        if (running > 0)
            kill(running, SIGKILL);
        signal(sig, SIG_DFL);
        raise(sig);
        return;
    }
    cli_stop_signal = sig;
    if (running > 0)
        kill(running, SIGTERM);
}

void cli_catch_stop_signals(void)
{
    static const int sigs[] = {SIGINT, SIGTERM, SIGHUP};
    for (size_t i = 0; i < sizeof sigs / sizeof sigs[0]; i++) {
        struct sigaction old, sa;
        /* ignored when we started (nohup's SIGHUP, a background job's SIGINT): stays so */
        if (sigaction(sigs[i], NULL, &old) != 0 || old.sa_handler == SIG_IGN)
            continue;
        memset(&sa, 0, sizeof sa);
        sa.sa_handler = on_stop_signal;
        sa.sa_flags = SA_RESTART;
        sigemptyset(&sa.sa_mask);
        sigaction(sigs[i], &sa, NULL);
    }
}

void cli_stop_child(pid_t pid)
{
    child = pid;
    if (pid > 0 && cli_stop_signal) /* the signal came before the child was known */
        kill(pid, SIGTERM);
}

void cli_die_if_stopped(void)
{
    int sig = cli_stop_signal;
    if (!sig)
        return;
    fflush(NULL);
    signal(sig, SIG_DFL);
    raise(sig);
}
