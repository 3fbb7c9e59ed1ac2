/* pb.h — a minimal protocol-buffers encoder: varints, tags, length-delimited fields, written
 * into growable buffers. Enough to emit onnx.proto messages without libprotobuf. */
#ifndef FERRY_ONNX_PB_H
#define FERRY_ONNX_PB_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

typedef struct pb_buf {
    uint8_t *data;
    size_t len, cap;
    bool oom;                /* set once an allocation failed; later writes are dropped */
} pb_buf;

void pb_free(pb_buf *b);
void pb_reset(pb_buf *b);    /* len = 0, keeps the allocation */

void pb_raw(pb_buf *b, const void *data, size_t n);
void pb_varint(pb_buf *b, uint64_t v);
void pb_tag(pb_buf *b, uint32_t field, uint32_t wire_type);

/* Field writers (wire types 0 and 2 as onnx.proto uses them). */
void pb_int(pb_buf *b, uint32_t field, int64_t v);           /* int64/int32/enum: varint */
void pb_float(pb_buf *b, uint32_t field, float v);           /* fixed32 */
void pb_bytes(pb_buf *b, uint32_t field, const void *data, size_t n);
void pb_string(pb_buf *b, uint32_t field, const char *s);
/* Appends `sub` as an embedded message. */
void pb_msg(pb_buf *b, uint32_t field, const pb_buf *sub);

#endif
