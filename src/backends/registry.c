/* registry.c — the formats this build can write; adding one is its folder plus one line here. */
#include <pthread.h>
#include <stdio.h>
#include <string.h>

#include "backends/backend.h"

static const fb_backend *const BACKENDS[] = {&fb_onnx, &fb_openvino, &fb_pt2,
                                                &fb_executorch};
#define N_BACKENDS (sizeof BACKENDS / sizeof BACKENDS[0])

const fb_backend *fb_find(ferry_format format)
{
    for (size_t i = 0; i < N_BACKENDS; i++)
        if (BACKENDS[i]->format == format)
            return BACKENDS[i];
    return NULL;
}

const fb_backend *fb_at(int i)
{
    return i >= 0 && (size_t)i < N_BACKENDS ? BACKENDS[i] : NULL;
}

const fb_backend *fb_find_name(const char *name)
{
    for (size_t i = 0; i < N_BACKENDS; i++)
        if (strcmp(BACKENDS[i]->name, name) == 0 ||
            (BACKENDS[i]->alias && strcmp(BACKENDS[i]->alias, name) == 0))
            return BACKENDS[i];
    return NULL;
}

static char names[N_BACKENDS * 32];
static pthread_once_t names_once = PTHREAD_ONCE_INIT;

static void list_names(void)
{
    size_t len = 0;
    for (size_t i = 0; i < N_BACKENDS && len < sizeof names; i++)
        len += (size_t)snprintf(names + len, sizeof names - len, "%s%s", i ? ", " : "",
                                BACKENDS[i]->name);
}

const char *fb_names(void)
{
    pthread_once(&names_once, list_names);
    return names;
}

ferry_status ferry_format_from_name(const char *name, ferry_format *out)
{
    const fb_backend *b = name ? fb_find_name(name) : NULL;
    if (!b)
        return FERRY_ERR_UNSUPPORTED;
    *out = b->format;
    return FERRY_OK;
}

const char *ferry_supported_formats(void)
{
    return fb_names();
}

bool be_name_ends_with(const char *name, const char *suffix)
{
    size_t n = strlen(name), k = strlen(suffix);
    return n > k && strcmp(name + n - k, suffix) == 0;
}
