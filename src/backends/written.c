/* written.c — the table of files a backend's writer wrote, with their CRC-32s. */
#include <stdio.h>
#include <string.h>

#include "backends/backend.h"

ferry_status be_wrote(be_written *w, const char *file, uint32_t crc, fy_err *err)
{
    if (!w)
        return FERRY_OK;
    if (w->n == BE_MAX_WRITTEN || strlen(file) >= sizeof w->files[0].file)
        return fy_fail(err, FERRY_ERR_INTERNAL, "more files written than recorded (%s)", file);
    snprintf(w->files[w->n].file, sizeof w->files[0].file, "%s", file);
    w->files[w->n++].crc = crc;
    return FERRY_OK;
}
