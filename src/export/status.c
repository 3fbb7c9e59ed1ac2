/* status.c — version, status strings and dtype names of the public API. */
#include "ferry.h"
#include "util/dtype.h"
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

const char *ferry_dtype_name(ferry_dtype dtype)
{
    switch (dtype) {
    case FERRY_F32: return "fp32";
    case FERRY_F16: return "fp16";
    case FERRY_BF16: return "bf16";
    case FERRY_U4: return "uint4";
    case FERRY_I4: return "int4";
    default: return dt_st_name(dtype);
    }
}
