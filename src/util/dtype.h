/* dtype.h — element sizes, names and conversions between the float formats ferry writes. */
#ifndef FERRY_UTIL_DTYPE_H
#define FERRY_UTIL_DTYPE_H

#include <stddef.h>
#include <stdint.h>

#include "ferry.h"

/* Bytes per element; 0 for FERRY_DTYPE_UNDEFINED and for sub-byte types (U4, I4). */
size_t dt_size(ferry_dtype dt);
/* Bits per element (4 for U4/I4). */
int dt_bits(ferry_dtype dt);
/* Bytes of `numel` packed elements (sub-byte types two per byte, rounded up). */
uint64_t dt_nbytes(ferry_dtype dt, uint64_t numel);
/* safetensors' spelling ("F32", "BF16", "BOOL", ...) and its inverse (UNDEFINED if unknown). */
const char *dt_st_name(ferry_dtype dt);
ferry_dtype dt_from_st_name(const char *name);
int dt_is_float(ferry_dtype dt);

/* Converts `n` elements from `src` (of `from`) to `dst` (of `to`). Float formats only
 * (F32, F16, BF16, F64); rounding is to nearest even, as torch's .to() does. Returns 0 on
 * success, -1 if the pair is not supported. src and dst must not overlap unless from == to. */
int dt_convert(void *dst, ferry_dtype to, const void *src, ferry_dtype from, size_t n);

float dt_bf16_to_f32(uint16_t h);
float dt_f16_to_f32(uint16_t h);
uint16_t dt_f32_to_bf16(float f);
uint16_t dt_f32_to_f16(float f);

#endif
