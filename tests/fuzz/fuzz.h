/* fuzz.h — what every ferry fuzz target checks besides the sanitizers: invariants abort (so
 * libFuzzer records the input), and error messages are one clean line. */
#ifndef FERRY_FUZZ_H
#define FERRY_FUZZ_H

#include <stdio.h>
#include <stdlib.h>

static void check(int ok, const char *what)
{
    if (!ok) {
        fprintf(stderr, "fuzz: invariant broken: %s\n", what);
        abort();
    }
}

/* A refusal says something, on one line, without control bytes a hostile file could have put
 * there (a newline, a terminal escape sequence). */
static void check_message(const char *msg)
{
    check(msg != NULL && msg[0] != '\0', "a refusal has a message");
    for (const unsigned char *p = (const unsigned char *)msg; *p; p++) {
        if (*p < 0x20 || *p == 0x7F) {
            fprintf(stderr, "fuzz: message with control byte 0x%02x: %s\n", *p, msg);
            abort();
        }
    }
}

#endif
