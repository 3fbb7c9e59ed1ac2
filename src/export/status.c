/* status.c — version and status strings of the public API. */
#include "ferry.h"
#include "util/text.h"

const char *ferry_escape(const char *text, char *buf, size_t size)
{
    if (!buf || size < 8)
        return "";
    return text_quote(text ? text : "", buf, size);
}

const char *ferry_version(void)
{
    return FERRY_VERSION;
}

const char *ferry_status_str(ferry_status status)
{
    switch (status) {
    case FERRY_OK: return "ok";
    case FERRY_ERR_INVALID_ARG: return "invalid argument";
    case FERRY_ERR_IO: return "input/output error";
    case FERRY_ERR_FORMAT: return "malformed input";
    case FERRY_ERR_UNSUPPORTED: return "unsupported";
    case FERRY_ERR_NOMEM: return "out of memory";
    case FERRY_ERR_EXISTS: return "output exists";
    case FERRY_ERR_NOSPACE: return "no space left";
    case FERRY_ERR_INTERNAL: return "internal error";
    case FERRY_ERR_CANCELLED: return "cancelled";
    }
    return "unknown status";
}

