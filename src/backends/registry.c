/* registry.c — the formats this build can write. */
#include <string.h>

#include "backends/backend.h"

static const fb_backend *const BACKENDS[] = {&fb_onnx};
#define N_BACKENDS (sizeof BACKENDS / sizeof BACKENDS[0])

const fb_backend *fb_find(ferry_format format)
{
    for (size_t i = 0; i < N_BACKENDS; i++)
        if (BACKENDS[i]->format == format)
            return BACKENDS[i];
    return NULL;
}

const fb_backend *fb_find_name(const char *name)
{
    for (size_t i = 0; i < N_BACKENDS; i++)
        if (strcmp(BACKENDS[i]->name, name) == 0)
            return BACKENDS[i];
    return NULL;
}

const char *fb_names(void)
{
    return "onnx";
}
