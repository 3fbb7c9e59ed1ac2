/* err.c — filling fy_err records. */
#include "util/err.h"

#include <stdarg.h>
#include <stdio.h>

static ferry_status set(fy_err *err, ferry_status status, int replace, const char *fmt, va_list ap)
{
    if (!err)
        return status;
    if (replace || err->status == FERRY_OK) {
        vsnprintf(err->msg, sizeof err->msg, fmt, ap);
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
