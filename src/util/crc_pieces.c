/* crc_pieces.c — CRC-32 arithmetic over GF(2)[x] modulo its polynomial, in the bit-reflected
 * form CRC-32 is computed in (bit 31 holds the coefficient of x^0); libdeflate computes the
 * remainders of the pieces themselves. */
#include "util/crc_pieces.h"

#include <errno.h>
#include <fcntl.h>
#include <libdeflate.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#define POLY 0xedb88320u     /* x^32 + x^26 + ... + 1, reflected, without x^32 */
#define ONE 0x80000000u      /* x^0 */
/* x^-1 = (G(x) - 1) / x: the polynomial's coefficients of x^1..x^31, each moved down by one,
 * and x^31 for x^32 */
#define X_INVERSE (((POLY << 1) & 0xffffffffu) | 1u)
#define READ_CHUNK ((size_t)4 << 20)

/* a * b mod G */
static uint32_t mul(uint32_t a, uint32_t b)
{
    uint32_t p = 0;
    for (uint32_t m = ONE; m; m >>= 1) {
        if (a & m)
            p ^= b;
        b = b & 1 ? (b >> 1) ^ POLY : b >> 1;
    }
    return p;
}

/* base^n mod G */
static uint32_t power(uint32_t base, uint64_t n)
{
    uint32_t r = ONE;
    for (; n; n >>= 1) {
        if (n & 1)
            r = mul(r, base);
        base = mul(base, base);
    }
    return r;
}

/* x^(8n): n zero bytes appended */
static uint32_t bytes_forward(uint64_t n)
{
    return power(ONE >> 8, n);
}

/* x^(-8n) */
static uint32_t bytes_back(uint64_t n)
{
    uint32_t inv8 = X_INVERSE;
    for (int i = 0; i < 3; i++)
        inv8 = mul(inv8, inv8);
    return power(inv8, n);
}

/* The remainder of `data` alone (register started at zero, no final inversion): libdeflate
 * starts its register at ~crc and inverts the result. */
static uint32_t remainder_of(const void *data, size_t n)
{
    return ~libdeflate_crc32(0xffffffffu, data, n);
}

void fy_crc_pieces_add(fy_crc_pieces *c, const void *data, size_t n, uint64_t offset)
{
    if (!n)
        return;
    uint32_t moved = mul(remainder_of(data, n), bytes_back(offset + n));
    __atomic_fetch_xor(&c->sum, moved, __ATOMIC_RELAXED);
}

void fy_crc_pieces_add_crc(fy_crc_pieces *c, uint32_t crc, uint64_t n, uint64_t offset)
{
    if (!n)
        return;
    /* crc = ~(ones moved through n bytes + the remainder): solved for the remainder */
    uint32_t remainder = ~crc ^ mul(bytes_forward(n), 0xffffffffu);
    __atomic_fetch_xor(&c->sum, mul(remainder, bytes_back(offset + n)), __ATOMIC_RELAXED);
}

void fy_crc_pieces_observer(void *user, const void *data, size_t n, uint64_t offset)
{
    fy_crc_pieces_add(user, data, n, offset);
}

uint32_t fy_crc_pieces_value(const fy_crc_pieces *c, uint64_t size)
{
    /* the register after the whole file, started at all ones as CRC-32's is: the ones moved
     * through `size` bytes plus the pieces' sum moved to the end; then inverted */
    uint32_t sum = __atomic_load_n(&c->sum, __ATOMIC_RELAXED);
    return ~mul(bytes_forward(size), 0xffffffffu ^ sum);
}

uint32_t fy_crc32(const void *data, size_t len)
{
    return libdeflate_crc32(0, data, len);
}

ferry_status fy_crc32_file(const char *path, uint32_t *crc, uint64_t *size, fy_err *err)
{
    int fd = open(path, O_RDONLY | O_CLOEXEC);
    if (fd < 0)
        return fy_fail(err, FERRY_ERR_IO, "%s: %s", path, strerror(errno));
    unsigned char *buf = malloc(READ_CHUNK);
    if (!buf) {
        close(fd);
        return fy_fail(err, FERRY_ERR_NOMEM, "out of memory");
    }
    posix_fadvise(fd, 0, 0, POSIX_FADV_SEQUENTIAL);
    uint32_t c = 0;
    uint64_t total = 0;
    ferry_status st = FERRY_OK;
    for (;;) {
        ssize_t k = read(fd, buf, READ_CHUNK);
        if (k < 0 && errno == EINTR)
            continue;
        if (k < 0) {
            st = fy_fail(err, FERRY_ERR_IO, "%s: read failed: %s", path, strerror(errno));
            break;
        }
        if (k == 0)
            break;
        c = libdeflate_crc32(c, buf, (size_t)k);
        total += (uint64_t)k;
    }
    free(buf);
    close(fd);
    *crc = c;
    *size = total;
    return st;
}
