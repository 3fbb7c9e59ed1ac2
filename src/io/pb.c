/* pb.c — protocol-buffers wire encoding (varint, fixed32, length-delimited). */
#include "io/pb.h"

#include <stdlib.h>
#include <string.h>

#include "util/grow.h"

enum { WIRE_VARINT = 0, WIRE_LEN = 2, WIRE_FIXED32 = 5 };

void pb_free(pb_buf *b)
{
    free(b->data);
    memset(b, 0, sizeof *b);
}

void pb_reset(pb_buf *b)
{
    b->len = 0;
}

static bool reserve(pb_buf *b, size_t extra)
{
    if (b->oom)
        return false;
    if (extra > SIZE_MAX / 2 - b->len) {
        b->oom = true;
        return false;
    }
    uint8_t *grown = fy_grow(b->data, &b->cap, b->len + extra, 1);
    if (!grown) {
        b->oom = true;
        return false;
    }
    b->data = grown;
    return true;
}

void pb_raw(pb_buf *b, const void *data, size_t n)
{
    if (n == 0 || !reserve(b, n))
        return;
    memcpy(b->data + b->len, data, n);
    b->len += n;
}

void pb_varint(pb_buf *b, uint64_t v)
{
    uint8_t tmp[10];
    size_t n = 0;
    do {
        uint8_t byte = v & 0x7f;
        v >>= 7;
        tmp[n++] = byte | (v ? 0x80 : 0);
    } while (v);
    pb_raw(b, tmp, n);
}

void pb_tag(pb_buf *b, uint32_t field, uint32_t wire_type)
{
    pb_varint(b, ((uint64_t)field << 3) | wire_type);
}

void pb_int(pb_buf *b, uint32_t field, int64_t v)
{
    pb_tag(b, field, WIRE_VARINT);
    pb_varint(b, (uint64_t)v); /* negative int64 is ten bytes, two's complement */
}

void pb_float(pb_buf *b, uint32_t field, float v)
{
    uint32_t bits;
    memcpy(&bits, &v, 4);
    uint8_t le[4] = {bits & 0xff, (bits >> 8) & 0xff, (bits >> 16) & 0xff, bits >> 24};
    pb_tag(b, field, WIRE_FIXED32);
    pb_raw(b, le, 4);
}

void pb_bytes(pb_buf *b, uint32_t field, const void *data, size_t n)
{
    pb_tag(b, field, WIRE_LEN);
    pb_varint(b, n);
    pb_raw(b, data, n);
}

void pb_string(pb_buf *b, uint32_t field, const char *s)
{
    pb_bytes(b, field, s, strlen(s));
}

void pb_msg(pb_buf *b, uint32_t field, const pb_buf *sub)
{
    if (sub->oom)
        b->oom = true;
    pb_bytes(b, field, sub->data, sub->len);
}
