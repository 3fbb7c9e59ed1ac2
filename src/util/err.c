/* err.c — filling fy_err records. */
#include "util/err.h"

#include <stdarg.h>
#include <stdio.h>

#include "util/text.h"

static ferry_status set(fy_err *err, ferry_status status, int replace, const char *fmt, va_list ap)
{
    if (!err)
        return status;
    if (replace || err->status == FERRY_OK) {
        /* Every message is escaped as a whole: paths and values from files reach it through
         * dozens of call sites, and one missed quote would let C1 controls, bidi overrides or
         * invalid UTF-8 through to a terminal. Names are quoted (and cut) where they are
         * inserted as well; escaping twice changes nothing. */
        char raw[2 * sizeof err->msg];
        vsnprintf(raw, sizeof raw, fmt, ap);
        text_quote(raw, err->msg, sizeof err->msg);
        err->status = status;
    }
    return status;
}

ferry_status fy_fail(fy_err *err, ferry_status status, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    set(err, status, 0, fmt, ap);
    va_end(ap);
    return status;
}

ferry_status fy_refail(fy_err *err, ferry_status status, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    set(err, status, 1, fmt, ap);
    va_end(ap);
    return status;
}

void fy_err_clear(fy_err *err)
{
    if (err) {
        err->status = FERRY_OK;
        err->msg[0] = '\0';
    }
}
