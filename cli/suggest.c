/* suggest.c — "did you mean": the known option or command nearest a mistyped one. */
#include <stdio.h>
#include <string.h>

#include "cli.h"

/* Longer words than this are never a typo of an option: no suggestion. */
#define SUGGEST_MAX_LEN 64

/* Edits (insert, delete, substitute, swap two neighbours) from a[0..la) to b[0..lb): a swapped
 * pair ("exprot") is one slip of the fingers, not two. */
static size_t edit_distance(const char *a, size_t la, const char *b, size_t lb)
{
    size_t d[SUGGEST_MAX_LEN + 1][SUGGEST_MAX_LEN + 1];
    for (size_t i = 0; i <= la; i++)
        d[i][0] = i;
    for (size_t j = 0; j <= lb; j++)
        d[0][j] = j;
    for (size_t i = 1; i <= la; i++)
        for (size_t j = 1; j <= lb; j++) {
            size_t best = d[i - 1][j - 1] + (a[i - 1] != b[j - 1]);
            if (d[i - 1][j] + 1 < best)
                best = d[i - 1][j] + 1;
            if (d[i][j - 1] + 1 < best)
                best = d[i][j - 1] + 1;
            if (i > 1 && j > 1 && a[i - 1] == b[j - 2] && a[i - 2] == b[j - 1] &&
                d[i - 2][j - 2] + 1 < best)
                best = d[i - 2][j - 2] + 1;
            d[i][j] = best;
        }
    return d[la][lb];
}

const char *cli_nearest(const char *word, size_t len, const char *const *names, size_t n)
{
    /* close relative to the word's length: one slip in a short name, two from five letters,
     * three from eight; anything further is a different word, and a guess would mislead */
    size_t allowed = len >= 8 ? 3 : len >= 5 ? 2 : len >= 3 ? 1 : 0;
    const char *best = NULL;
    size_t best_d = allowed + 1;
    if (len > SUGGEST_MAX_LEN)
        return NULL;
    for (size_t i = 0; i < n; i++) {
        size_t ln = strlen(names[i]);
        if (ln > SUGGEST_MAX_LEN || (ln > len ? ln - len : len - ln) > allowed)
            continue;
        size_t d = edit_distance(word, len, names[i], ln);
        if (d < best_d) {
            best_d = d;
            best = names[i];
        }
    }
    return best;
}

void cli_unknown_option(const char *cmd, const char *word, const char *const *names, size_t n)
{
    /* "--name=value": the name alone is what was mistyped */
    const char *name = word + 2;
    size_t len = strcspn(name, "=");
    char matches[512] = "";
    size_t n_matches = 0, used = 0;
    for (size_t i = 0; i < n; i++)
        if (len > 0 && strncmp(names[i], name, len) == 0) {
            int k = snprintf(matches + used, sizeof matches - used, "%s--%s",
                             n_matches ? ", " : "", names[i]);
            if (k > 0 && used + (size_t)k < sizeof matches)
                used += (size_t)k;
            n_matches++;
        }
    /* getopt_long takes a unique prefix, so a prefix it refused is one of several names */
    if (n_matches > 1) {
        cli_error("%s: ambiguous option '--%.*s' (%s; see ferry %s --help)", cmd, (int)len,
                  name, matches, cmd);
        return;
    }
    const char *near = cli_nearest(name, len, names, n);
    if (near)
        cli_error("%s: unknown option '--%.*s'; did you mean --%s? (see ferry %s --help)", cmd,
                  (int)len, name, near, cmd);
    else
        cli_error("%s: unknown or incomplete option '%s' (see ferry %s --help)", cmd, word, cmd);
}
