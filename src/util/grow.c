/* grow.c — see grow.h. */
#include "util/grow.h"

#include <stdint.h>
#include <stdlib.h>

void *fy_grow(void *items, size_t *cap, size_t need, size_t size)
{
    if (need <= *cap && items)
        return items;
    if (size == 0 || need > SIZE_MAX / size)
        return NULL;
    size_t n = *cap ? *cap : 16;
    while (n < need)
        n = n > SIZE_MAX / 2 / size ? need : n * 2;
    void *grown = realloc(items, n * size);
    if (grown)
        *cap = n;
    return grown;
}
