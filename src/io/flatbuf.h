/* flatbuf.h — a FlatBuffers builder (the binary format of flatbuffers.dev's specification),
 * for the formats whose container is one: ExecuTorch's Program (.pte) and its XNNPACK delegate
 * graphs. It builds back to front, as the format wants (every offset points forward), in one
 * growable buffer: tables (a vtable each), vectors of scalars, of offsets and of bytes with a
 * forced alignment, strings and union fields. Writers build children before parents and add a
 * table's fields between fb_table_start and fb_table_end; a failure (out of memory, a misuse)
 * is sticky and reported by fb_finish. The bulk data a container refers to (weights) never
 * goes through here: the formats place it in segments after the flatbuffer. */
#ifndef FERRY_IO_FLATBUF_H
#define FERRY_IO_FLATBUF_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

/* An object built so far: its distance from the buffer's end (0: none, an absent field). */
typedef uint32_t fb_ref;

#define FB_MAX_FIELDS 64

typedef struct fb_builder {
    uint8_t *buf;            /* the object bytes occupy buf[cap - used, cap) */
    size_t cap, used;
    size_t minalign;         /* the largest alignment asked for */
    bool failed;             /* out of memory or a misuse: fb_finish returns NULL */
    bool in_table;
    size_t table_end;        /* `used` when the open table started */
    fb_ref field[FB_MAX_FIELDS]; /* the open table's fields by id (0: absent) */
    int n_fields;
} fb_builder;

void fb_init(fb_builder *b);
void fb_free(fb_builder *b);

/* A string (bytes, NUL-terminated as the format keeps it). */
fb_ref fb_string(fb_builder *b, const char *s);
/* A vector of `n` scalars of `size` bytes (1, 2, 4 or 8) from little-endian `data`, its
 * elements aligned to `align` (at least `size`; a schema's force_align, e.g. 16). */
fb_ref fb_vector(fb_builder *b, const void *data, size_t n, size_t size, size_t align);
/* A vector of offsets to objects already built (tables, strings, vectors). */
fb_ref fb_ref_vector(fb_builder *b, const fb_ref *refs, size_t n);

/* Tables: start, add fields by id (a scalar equal to the schema's default is left out, as the
 * format allows), end. Only one table may be open at a time. */
void fb_table_start(fb_builder *b);
void fb_add_u8(fb_builder *b, int id, uint8_t v, uint8_t dflt);
void fb_add_u16(fb_builder *b, int id, uint16_t v, uint16_t dflt); /* short, ushort */
void fb_add_i32(fb_builder *b, int id, int32_t v, int32_t dflt);
void fb_add_u32(fb_builder *b, int id, uint32_t v, uint32_t dflt);
void fb_add_i64(fb_builder *b, int id, int64_t v, int64_t dflt);
void fb_add_u64(fb_builder *b, int id, uint64_t v, uint64_t dflt);
void fb_add_f64(fb_builder *b, int id, double v, double dflt);
/* An offset field (a table, string or vector built before); 0 leaves it out. */
void fb_add_ref(fb_builder *b, int id, fb_ref ref);
/* A union field at id (its type at id - 1, as flatc numbers them: `val_type` then `val`). */
void fb_add_union(fb_builder *b, int id, uint8_t type, fb_ref value);
fb_ref fb_table_end(fb_builder *b);

/* The finished buffer with `root` as its root table and `ident` (4 bytes, or NULL) as its file
 * identifier; *len its size. The buffer is the builder's (valid until fb_free). NULL when a
 * call failed. */
const uint8_t *fb_finish(fb_builder *b, fb_ref root, const char *ident, size_t *len);

#endif
