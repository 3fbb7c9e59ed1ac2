/* grow.h — room in a growable array: the one place that doubles a capacity, checks the size
 * for overflow and calls realloc, for the IR's tables, the byte buffers and the planners. */
#ifndef FERRY_UTIL_GROW_H
#define FERRY_UTIL_GROW_H

#include <stddef.h>

/* Returns `items` (an array of *cap elements of `size` bytes) moved or grown to hold at least
 * `need` elements, updating *cap (doubling, so n appends cost O(n)). Returns NULL, leaving
 * `items` and *cap untouched, when the allocation fails or need * size overflows. */
void *fy_grow(void *items, size_t *cap, size_t need, size_t size);

#endif
