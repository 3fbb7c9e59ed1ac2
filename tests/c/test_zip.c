/* test_zip.c — the zip writer (io/zip.h) read back by a parser written from PKWARE's APPNOTE:
 * end records, central directory, local headers, 64-byte data alignment, CRC-32 against known
 * values, zip64 fields for an entry past 4 GiB (a sparse file: nothing is stored), and a
 * reserved entry's CRC-32 folded from the runs its writers reported (with gaps, out of order,
 * overlapping) equal to that of its bytes. */
#include <fcntl.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cmocka.h>
#include <zlib.h>

#include "io/zip.h"
#include "scratch.h"
#include "util/crc_pieces.h"


/* The CRC-32 the writer says the whole file has is the one its bytes have, read back. */
static void assert_whole_file_crc(const zip_writer *z, const char *path)
{
    uint32_t crc;
    uint64_t size;
    fy_err err = {0};
    assert_int_equal(fy_crc32_file(path, &crc, &size, &err), FERRY_OK);
    assert_int_equal(size, zip_end_offset(z));
    assert_int_equal(zip_file_crc32(z), crc);
}
static uint64_t rd(int fd, uint64_t offset, int width)
{
    uint8_t raw[8] = {0};
    assert_int_equal(pread(fd, raw, (size_t)width, (off_t)offset), width);
    uint64_t v = 0;
    for (int i = width - 1; i >= 0; i--)
        v = v << 8 | raw[i];
    return v;
}

typedef struct parsed {
    char name[64];
    uint64_t size, header_offset, data_offset;
    uint32_t crc;
} parsed;

/* Walks the end records and the central directory, checking each entry's local header. */
static size_t parse(int fd, parsed *out, size_t max)
{
    struct stat st;
    assert_int_equal(fstat(fd, &st), 0);
    uint64_t eocd = (uint64_t)st.st_size - 22;
    assert_int_equal(rd(fd, eocd, 4), 0x06054b50);
    uint64_t locator = eocd - 20;
    assert_int_equal(rd(fd, locator, 4), 0x07064b50);
    uint64_t z64 = rd(fd, locator + 8, 8);
    assert_int_equal(rd(fd, z64, 4), 0x06064b50);
    uint64_t n = rd(fd, z64 + 32, 8), cd_size = rd(fd, z64 + 40, 8), cd = rd(fd, z64 + 48, 8);
    assert_int_equal(cd + cd_size, z64);
    assert_true(n <= max);
    for (uint64_t i = 0; i < n; i++) {
        parsed *p = &out[i];
        assert_int_equal(rd(fd, cd, 4), 0x02014b50);
        assert_int_equal(rd(fd, cd + 10, 2), 0);             /* stored */
        p->crc = (uint32_t)rd(fd, cd + 16, 4);
        p->size = rd(fd, cd + 24, 4);
        assert_int_equal(rd(fd, cd + 20, 4), p->size);       /* compressed = uncompressed */
        size_t name_len = rd(fd, cd + 28, 2), extra = rd(fd, cd + 30, 2);
        p->header_offset = rd(fd, cd + 42, 4);
        assert_true(name_len < sizeof p->name);
        assert_int_equal(pread(fd, p->name, name_len, (off_t)(cd + 46)), (ssize_t)name_len);
        p->name[name_len] = 0;
        uint64_t x = cd + 46 + name_len;
        if (extra) {
            assert_int_equal(rd(fd, x, 2), 0x0001);
            uint64_t at = x + 4;
            if (p->size == 0xFFFFFFFFu) {
                p->size = rd(fd, at, 8);
                at += 16;
            }
            if (p->header_offset == 0xFFFFFFFFu)
                p->header_offset = rd(fd, at, 8);
        }
        uint64_t h = p->header_offset;
        assert_int_equal(rd(fd, h, 4), 0x04034b50);
        assert_int_equal(rd(fd, h + 14, 4), p->crc);
        size_t lname = rd(fd, h + 26, 2), lextra = rd(fd, h + 28, 2);
        assert_int_equal(lname, name_len);
        p->data_offset = h + 30 + lname + lextra;
        assert_int_equal(p->data_offset % ZIP_ALIGN, 0);
        cd = x + extra;
    }
    assert_int_equal(cd, z64);
    return (size_t)n;
}

static int open_new(const char *name, char *path, size_t size)
{
    snprintf(path, size, "%s/%s", tmp_dir, name);
    int fd = open(path, O_RDWR | O_CREAT | O_TRUNC, 0644);
    assert_true(fd >= 0);
    return fd;
}

static void small_and_reserved_entries(void **state)
{
    (void)state;
    char path[256];
    int fd = open_new("small.zip", path, sizeof path);
    fy_err err = {0};
    zip_writer *z = zip_new(fd, path, &err);
    assert_non_null(z);
    assert_int_equal(zip_put(z, "archive/archive_format", "pt2", 3, &err), FERRY_OK);
    uint64_t at;
    assert_int_equal(zip_reserve(z, "archive/data/weights/blob", 5, &at, &err), FERRY_OK);
    assert_int_equal(zip_put(z, "archive/empty", "", 0, &err), FERRY_OK);
    assert_int_equal(pwrite(fd, "hello", 5, (off_t)at), 5);   /* the caller's own write */
    assert_int_equal(zip_close(z, &err), FERRY_OK);
    assert_whole_file_crc(z, path);
    zip_free(z);

    parsed p[4];
    assert_int_equal(parse(fd, p, 4), 3);
    assert_string_equal(p[0].name, "archive/archive_format");
    assert_int_equal(p[0].size, 3);
    assert_int_equal(p[0].crc, 0x28345c30);                   /* CRC-32 of "pt2" */
    assert_string_equal(p[1].name, "archive/data/weights/blob");
    assert_int_equal(p[1].data_offset, at);
    assert_int_equal(p[1].crc, 0x3610a686);                   /* CRC-32 of "hello" */
    assert_int_equal(p[2].size, 0);
    assert_int_equal(p[2].crc, 0);
    char data[4] = {0};
    assert_int_equal(pread(fd, data, 3, (off_t)p[0].data_offset), 3);
    assert_string_equal(data, "pt2");
    close(fd);
}

static void entry_past_four_gib(void **state)
{
    (void)state;
    char path[256];
    int fd = open_new("big.zip", path, sizeof path);
    fy_err err = {0};
    zip_writer *z = zip_new(fd, path, &err);
    uint64_t at, size = (UINT64_C(1) << 32) + 100, tail;
    assert_int_equal(zip_reserve(z, "r/big", size, &at, &err), FERRY_OK);
    assert_int_equal(zip_put(z, "r/after", "x", 1, &err), FERRY_OK);
    /* The big entry stays a hole of zeros but for one byte at its end. */
    assert_int_equal(pwrite(fd, "\1", 1, (off_t)(at + size - 1)), 1);
    assert_int_equal(zip_close(z, &err), FERRY_OK);
    zip_free(z);
    parsed p[2];
    assert_int_equal(parse(fd, p, 2), 2);
    assert_int_equal(p[0].size, size);
    assert_true(p[1].header_offset > UINT64_C(0xFFFFFFFF));   /* offset in the zip64 field */
    tail = rd(fd, p[1].data_offset, 1);
    assert_int_equal(tail, 'x');
    assert_int_equal(rd(fd, p[0].header_offset + 18, 4), 0xFFFFFFFFu);   /* local: zip64 */
    assert_int_equal(rd(fd, p[0].header_offset + 30 + 5 + 4, 8), size);
    close(fd);
}

/* A reserved entry of 1000 bytes: `runs` of it written and reported (in the order given), one
 * written and not reported, the rest left a hole. Its CRC must be that of all 1000 bytes. */
static void reported_runs(const uint64_t (*runs)[2], size_t n_runs, const char *name)
{
    char path[256];
    int fd = open_new(name, path, sizeof path);
    fy_err err = {0};
    zip_writer *z = zip_new(fd, path, &err);
    assert_int_equal(zip_put(z, "a/first", "x", 1, &err), FERRY_OK);
    uint64_t at;
    assert_int_equal(zip_reserve(z, "a/blob", 1000, &at, &err), FERRY_OK);
    assert_int_equal(zip_put(z, "a/after", "y", 1, &err), FERRY_OK);
    uint8_t want[1000] = {0};
    for (size_t i = 0; i < 700; i++)
        want[i] = (uint8_t)(i * 37 + 11);
    assert_int_equal(pwrite(fd, want + 100, 64, (off_t)(at + 100)), 64);   /* unreported */
    for (size_t i = 0; i < n_runs; i++) {
        uint64_t off = runs[i][0], len = runs[i][1];
        assert_int_equal(pwrite(fd, want + off, len, (off_t)(at + off)), (ssize_t)len);
        zip_wrote(z, want + off, len, at + off);
    }
    assert_int_equal(zip_close(z, &err), FERRY_OK);
    assert_whole_file_crc(z, path);
    zip_free(z);
    parsed p[3];
    assert_int_equal(parse(fd, p, 3), 3);
    assert_string_equal(p[1].name, "a/blob");
    assert_int_equal(p[1].crc, (uint32_t)crc32(0, want, sizeof want));
    assert_int_equal(p[0].crc, (uint32_t)crc32(0, (const Bytef *)"x", 1));
    close(fd);
}

static void crc_folded_from_reported_runs(void **state)
{
    (void)state;
    /* out of order, a gap of unreported bytes at 100, a hole from 700 */
    const uint64_t runs[][2] = {{400, 300}, {0, 100}, {164, 236}};
    reported_runs(runs, 3, "runs.zip");
}

static void crc_of_untrusted_runs_read_back(void **state)
{
    (void)state;
    /* reported twice, overlapping: the entry is read back whole */
    const uint64_t twice[][2] = {{0, 100}, {164, 536}, {0, 100}};
    reported_runs(twice, 3, "twice.zip");
    const uint64_t overlap[][2] = {{0, 100}, {164, 300}, {400, 300}};
    reported_runs(overlap, 3, "overlap.zip");
}

/* Two reserved entries and a run reported across from the first into the second, over a run
 * of the second reported earlier with other bytes (the search for an entry's
 * first run skipped the crossing one and trusted the stale run). Both CRCs are the files'. */
static void crc_of_runs_crossing_entries_read_back(void **state)
{
    (void)state;
    char path[256];
    int fd = open_new("cross.zip", path, sizeof path);
    fy_err err = {0};
    zip_writer *z = zip_new(fd, path, &err);
    uint64_t a, b;
    assert_int_equal(zip_reserve(z, "e1", 1000, &a, &err), FERRY_OK);
    assert_int_equal(zip_reserve(z, "e2", 1000, &b, &err), FERRY_OK);
    static uint8_t ys[1000], xs[4000];
    memset(ys, 'Y', sizeof ys);
    memset(xs, 'X', sizeof xs);
    assert_true(b - a + 500 <= sizeof xs);
    assert_int_equal(pwrite(fd, ys, 100, (off_t)(b + 100)), 100);
    zip_wrote(z, ys, 100, b + 100);                       /* later overwritten */
    assert_int_equal(pwrite(fd, ys, 5, (off_t)(a + 10)), 5);
    zip_wrote(z, ys, 5, a + 10);                          /* inside the crossing run */
    size_t n = (size_t)(b - a) + 500, header = (size_t)(b - a - 1000);
    uint8_t e2_header[1024];
    assert_true(header <= sizeof e2_header);
    assert_int_equal(pread(fd, e2_header, header, (off_t)(a + 1000)), (ssize_t)header);
    assert_int_equal(pwrite(fd, xs, n, (off_t)a), (ssize_t)n);
    zip_wrote(z, xs, n, a);                               /* across e1's end into e2 */
    /* e2's local header put back, so that the archive parses */
    assert_int_equal(pwrite(fd, e2_header, header, (off_t)(a + 1000)), (ssize_t)header);
    assert_int_equal(pwrite(fd, ys, 500, (off_t)(b + 500)), 500);
    assert_int_equal(zip_close(z, &err), FERRY_OK);
    assert_whole_file_crc(z, path);
    zip_free(z);
    parsed p[2];
    assert_int_equal(parse(fd, p, 2), 2);
    uint8_t got[1000];
    for (int i = 0; i < 2; i++) {
        assert_int_equal(pread(fd, got, sizeof got, (off_t)p[i].data_offset), (ssize_t)sizeof got);
        assert_int_equal(p[i].crc, (uint32_t)crc32(0, got, sizeof got));
    }
    close(fd);
}

static void name_too_long_is_refused(void **state)
{
    (void)state;
    char path[256], name[70000];
    int fd = open_new("long.zip", path, sizeof path);
    memset(name, 'a', sizeof name - 1);
    name[sizeof name - 1] = 0;
    fy_err err = {0};
    zip_writer *z = zip_new(fd, path, &err);
    assert_int_equal(zip_put(z, name, "", 0, &err), FERRY_ERR_INVALID_ARG);
    assert_non_null(strstr(err.msg, "zip entry name of 69999 bytes"));
    zip_free(z);
    close(fd);
}

static int setup(void **state)
{
    (void)state;
    return scratch_make("zip");
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(small_and_reserved_entries),
        cmocka_unit_test(entry_past_four_gib),
        cmocka_unit_test(crc_folded_from_reported_runs),
        cmocka_unit_test(crc_of_untrusted_runs_read_back),
        cmocka_unit_test(crc_of_runs_crossing_entries_read_back),
        cmocka_unit_test(name_too_long_is_refused),
    };
    return cmocka_run_group_tests(tests, setup, remove_tmp);
}
