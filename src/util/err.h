/* err.h — the error record every internal function fills: a status plus one line naming the
 * file, tensor or key at fault. Handles copy it into their own message on the way out. */
#ifndef FERRY_UTIL_ERR_H
#define FERRY_UTIL_ERR_H

#include "ferry.h"

typedef struct fy_err {
    ferry_status status;
    char msg[1024];
} fy_err;

/* Records `status` and a printf-style message in `err` (which may be NULL); returns `status` so
 * that callers can write `return fy_fail(err, FERRY_ERR_FORMAT, "...")`. The message is stored
 * escaped by text_quote (util/text.h): one line, no control, bidi or invisible characters. The first failure wins:
 * a message already set is kept, because the innermost one names the real culprit. */
ferry_status fy_fail(fy_err *err, ferry_status status, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));

/* Like fy_fail but always replaces an earlier message. */
ferry_status fy_refail(fy_err *err, ferry_status status, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));

void fy_err_clear(fy_err *err);

#endif
