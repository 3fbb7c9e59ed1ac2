/* fuzz.h — what every ferry fuzz target checks besides the sanitizers: invariants abort (so
 * libFuzzer records the input), and error messages are one clean line. */
#ifndef FERRY_FUZZ_H
#define FERRY_FUZZ_H

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "util/text.h"

static void check(int ok, const char *what)
{
    if (!ok) {
        fprintf(stderr, "fuzz: invariant broken: %s\n", what);
        abort();
    }
}

/* A refusal says something, on one line, without control bytes a hostile file could have put
 * there (a newline, a terminal escape sequence), nor C1 controls, bidi or invisible characters
 * or invalid UTF-8: escaping it again changes nothing. */
static void check_message(const char *msg)
{
    check(msg != NULL && msg[0] != '\0', "a refusal has a message");
    for (const unsigned char *p = (const unsigned char *)msg; *p; p++) {
        if (*p < 0x20 || *p == 0x7F) {
            fprintf(stderr, "fuzz: message with control byte 0x%02x: %s\n", *p, msg);
            abort();
        }
    }
    char again[4096];
    if (strcmp(text_quote(msg, again, sizeof again), msg) != 0) {
        fprintf(stderr, "fuzz: message not escaped: %s\n", msg);
        abort();
    }
}

#endif
