/* flatbuf.c — the FlatBuffers builder: objects are pushed at the front of what is built so
 * far, so each is addressed by its distance from the buffer's end (an fb_ref), and an offset
 * from a field to an object built before it is the difference of the two distances, forward.
 * Alignment is kept relative to the end; fb_finish pads the front so that the buffer's start
 * is aligned to the largest alignment used, which makes the two the same. */
#include "io/flatbuf.h"

#include <stdlib.h>
#include <string.h>

/* The largest buffer: offsets are 32-bit */
#define FB_MAX_SIZE ((size_t)1 << 31)

void fb_init(fb_builder *b)
{
    memset(b, 0, sizeof *b);
    b->minalign = 1;
}

void fb_free(fb_builder *b)
{
    free(b->buf);
    memset(b, 0, sizeof *b);
}

/* Room for `n` more bytes at the front, the used bytes kept at the end. */
static bool reserve(fb_builder *b, size_t n)
{
    if (b->failed)
        return false;
    if (n > FB_MAX_SIZE - b->used) {
        b->failed = true;
        return false;
    }
    if (b->used + n <= b->cap)
        return true;
    size_t cap = b->cap ? b->cap : 1024;
    while (cap < b->used + n)
        cap *= 2;
    uint8_t *p = malloc(cap);
    if (!p) {
        b->failed = true;
        return false;
    }
    if (b->used)
        memcpy(p + cap - b->used, b->buf + b->cap - b->used, b->used);
    free(b->buf);
    b->buf = p;
    b->cap = cap;
    return true;
}

/* Pads so that, once `extra` more bytes are pushed, the front is aligned to `align`. */
static bool prep(fb_builder *b, size_t align, size_t extra)
{
    if (align > b->minalign)
        b->minalign = align;
    size_t pad = (align - (b->used + extra) % align) % align;
    if (!reserve(b, pad + extra))
        return false;
    if (pad) {
        memset(b->buf + b->cap - b->used - pad, 0, pad);
        b->used += pad;
    }
    return true;
}

/* Pushes `n` bytes (already aligned by prep) and returns the new front's ref. */
static fb_ref push(fb_builder *b, const void *data, size_t n)
{
    if (!reserve(b, n))
        return 0;
    b->used += n;
    memcpy(b->buf + b->cap - b->used, data, n);
    return (fb_ref)b->used;
}

static void le(uint8_t *out, uint64_t v, size_t size)
{
    for (size_t i = 0; i < size; i++)
        out[i] = (uint8_t)(v >> (8 * i));
}

static fb_ref push_scalar(fb_builder *b, uint64_t v, size_t size)
{
    uint8_t bytes[8];
    le(bytes, v, size);
    return prep(b, size, 0) ? push(b, bytes, size) : 0;
}

/* An offset to `target`, pushed at the front: the distance from its own place, forward. */
static fb_ref push_offset(fb_builder *b, fb_ref target)
{
    if (!prep(b, 4, 0))
        return 0;
    if (target == 0 || target > b->used) {
        b->failed = true; /* an offset to nothing, or to an object not built yet */
        return 0;
    }
    uint8_t bytes[4];
    le(bytes, (uint64_t)(b->used + 4 - target), 4);
    return push(b, bytes, 4);
}

fb_ref fb_string(fb_builder *b, const char *s)
{
    if (b->in_table) {
        b->failed = true;
        return 0;
    }
    size_t n = strlen(s);
    if (!prep(b, 4, n + 1))
        return 0;
    push(b, "", 1);
    push(b, s, n);
    return push_scalar(b, (uint64_t)n, 4);
}

fb_ref fb_vector(fb_builder *b, const void *data, size_t n, size_t size, size_t align)
{
    if (b->in_table || (size != 1 && size != 2 && size != 4 && size != 8) || align < size ||
        (align & (align - 1)) || n > (FB_MAX_SIZE - 8) / size) {
        b->failed = true;
        return 0;
    }
    /* the length's alignment too: the elements follow it */
    if (!prep(b, 4, n * size) || !prep(b, align, n * size))
        return 0;
    if (n)
        push(b, data, n * size);
    return push_scalar(b, (uint64_t)n, 4);
}

fb_ref fb_ref_vector(fb_builder *b, const fb_ref *refs, size_t n)
{
    if (b->in_table || n > (FB_MAX_SIZE - 8) / 4) {
        b->failed = true;
        return 0;
    }
    if (!prep(b, 4, n * 4))
        return 0;
    for (size_t i = n; i-- > 0;)
        push_offset(b, refs[i]);
    return push_scalar(b, (uint64_t)n, 4);
}

void fb_table_start(fb_builder *b)
{
    if (b->in_table)
        b->failed = true;
    b->in_table = true;
    b->table_end = b->used;
    b->n_fields = 0;
    memset(b->field, 0, sizeof b->field);
}

static void field(fb_builder *b, int id, fb_ref at)
{
    if (!b->in_table || id < 0 || id >= FB_MAX_FIELDS) {
        b->failed = true;
        return;
    }
    b->field[id] = at;
    if (id + 1 > b->n_fields)
        b->n_fields = id + 1;
}

static void add_scalar(fb_builder *b, int id, uint64_t v, size_t size)
{
    fb_ref at = push_scalar(b, v, size);
    if (at)
        field(b, id, at);
}

void fb_add_u8(fb_builder *b, int id, uint8_t v, uint8_t dflt)
{
    if (v != dflt)
        add_scalar(b, id, v, 1);
}

void fb_add_u16(fb_builder *b, int id, uint16_t v, uint16_t dflt)
{
    if (v != dflt)
        add_scalar(b, id, v, 2);
}

void fb_add_i32(fb_builder *b, int id, int32_t v, int32_t dflt)
{
    if (v != dflt)
        add_scalar(b, id, (uint32_t)v, 4);
}

void fb_add_u32(fb_builder *b, int id, uint32_t v, uint32_t dflt)
{
    if (v != dflt)
        add_scalar(b, id, v, 4);
}

void fb_add_i64(fb_builder *b, int id, int64_t v, int64_t dflt)
{
    if (v != dflt)
        add_scalar(b, id, (uint64_t)v, 8);
}

void fb_add_u64(fb_builder *b, int id, uint64_t v, uint64_t dflt)
{
    if (v != dflt)
        add_scalar(b, id, v, 8);
}

void fb_add_f64(fb_builder *b, int id, double v, double dflt)
{
    uint64_t bits, dbits;
    memcpy(&bits, &v, 8);
    memcpy(&dbits, &dflt, 8);
    if (bits != dbits)
        add_scalar(b, id, bits, 8);
}

void fb_add_ref(fb_builder *b, int id, fb_ref ref)
{
    if (!ref)
        return;
    fb_ref at = push_offset(b, ref);
    if (at)
        field(b, id, at);
}

void fb_add_union(fb_builder *b, int id, uint8_t type, fb_ref value)
{
    if (id < 1) {
        b->failed = true;
        return;
    }
    fb_add_ref(b, id, value);
    fb_add_u8(b, id - 1, type, 0);
}

fb_ref fb_table_end(fb_builder *b)
{
    if (!b->in_table || b->failed) {
        b->failed = true;
        b->in_table = false;
        return 0;
    }
    b->in_table = false;
    /* the table's first word: its vtable's offset (table - vtable), written below */
    if (!prep(b, 4, 0))
        return 0;
    fb_ref table = push(b, "\0\0\0\0", 4);
    if (!table)
        return 0;
    size_t object = table - b->table_end;
    size_t vt_len = 4 + 2 * (size_t)b->n_fields;
    if (object > 0xffff || vt_len > 0xffff) {
        b->failed = true;
        return 0;
    }
    uint8_t vt[4 + 2 * FB_MAX_FIELDS];
    le(vt, vt_len, 2);
    le(vt + 2, object, 2);
    for (int i = 0; i < b->n_fields; i++)
        le(vt + 4 + 2 * i, b->field[i] ? table - b->field[i] : 0, 2);
    /* the vtable goes in front of the table: a vtable is 2-aligned, the table stays 4 */
    if (!prep(b, 2, vt_len))
        return 0;
    fb_ref vtable = push(b, vt, vt_len);
    if (!vtable)
        return 0;
    le(b->buf + b->cap - table, (uint64_t)(int32_t)(vtable - table), 4);
    return table;
}

const uint8_t *fb_finish(fb_builder *b, fb_ref root, const char *ident, size_t *len)
{
    *len = 0;
    if (b->in_table || !root)
        b->failed = true;
    size_t head = 4 + (ident ? 4 : 0);
    if (!prep(b, b->minalign > 4 ? b->minalign : 4, head))
        return NULL;
    if (ident && !push(b, ident, 4))
        return NULL;
    if (!push_offset(b, root) || b->failed)
        return NULL;
    *len = b->used;
    return b->buf + b->cap - b->used;
}
