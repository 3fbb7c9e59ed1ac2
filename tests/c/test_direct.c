/* test_direct.c — store/direct.h: runs of every alignment (offset, length, memory) land byte for
 * byte where they belong, from several threads at once; a large run's whole pages really went
 * past the page cache (mincore finds them not resident) where the filesystem takes O_DIRECT
 * and is not a tmpfs; nothing is written between runs;
 * a filesystem that refuses a direct write midway gets the rest buffered, nothing lost; the heads
 * and tails held back land at dw_flush, also when more of them come than the held buffer takes
 * (flushed midway, from two threads). */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include <fcntl.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <linux/magic.h>
#include <sys/mman.h>
#include <sys/vfs.h>
#include <unistd.h>

#include "store/direct.h"

#include "scratch.h"

#define MiB ((size_t)1 << 20)
#define FILE_BYTES (24 * MiB)

static uint8_t pattern(uint64_t at)
{
    return (uint8_t)(at * 2654435761u >> 11);
}

/* A run of the file: `n` bytes at `offset`, handed over from memory `skew` bytes past a
 * page-aligned address. */
typedef struct run {
    uint64_t offset;
    size_t n, skew;
} run;

static const run RUNS[] = {
    {0, 1 * MiB, 0},                        /* aligned everywhere */
    {1 * MiB + 100, 3 * MiB + 7, 3},        /* head, tail, staged through the bounce buffer */
    {5 * MiB, 100, 0},                      /* small: buffered */
    {5 * MiB + 100, 64, 1},
    {6 * MiB + 64, 9 * MiB + 1000, 64},     /* longer than the bounce buffer */
    {16 * MiB, 8 * MiB, 0},                 /* aligned, straight from memory */
};
#define N_RUNS (sizeof RUNS / sizeof RUNS[0])

static int open_new(const char *name, char *path, size_t size)
{
    snprintf(path, size, "%s/%s", tmp_dir, name);
    int fd = open(path, O_RDWR | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
    assert_true(fd >= 0);
    return fd;
}

/* Whether the scratch filesystem is a tmpfs: one that takes O_DIRECT (Linux 6.6 on) still keeps
 * every page in memory and checks no alignment, so only content can be checked there. */
static bool on_tmpfs(const char *path)
{
    struct statfs fs;
    return statfs(path, &fs) == 0 && fs.f_type == TMPFS_MAGIC;
}

/* Whether this scratch filesystem takes O_DIRECT at all (tmpfs on older kernels does not). */
static bool takes_direct(const char *path)
{
    int fd = open(path, O_WRONLY | O_DIRECT | O_CLOEXEC);
    if (fd < 0)
        return false;
    close(fd);
    return true;
}

static void write_run(dw_file *f, dw_bounce *bounce, const run *r)
{
    uint8_t *mem;
    assert_int_equal(posix_memalign((void **)&mem, 4096, r->n + r->skew), 0);
    for (size_t i = 0; i < r->n; i++)
        mem[r->skew + i] = pattern(r->offset + i);
    fy_err err = {0};
    assert_int_equal(dw_pwrite(f, bounce, mem + r->skew, r->n, r->offset, &err), FERRY_OK);
    free(mem);
}

static void flush(dw_file *f)
{
    fy_err err = {0};
    assert_int_equal(dw_flush(f, &err), FERRY_OK);
}

/* Every run's bytes where they belong, and zeros everywhere else (a write past a run's end
 * would show there). */
static void check_file(int fd)
{
    uint8_t *got = malloc(FILE_BYTES), *written = calloc(FILE_BYTES, 1);
    assert_non_null(got);
    assert_non_null(written);
    assert_int_equal(pread(fd, got, FILE_BYTES, 0), (ssize_t)FILE_BYTES);
    for (size_t k = 0; k < N_RUNS; k++)
        for (size_t i = 0; i < RUNS[k].n; i++) {
            if (got[RUNS[k].offset + i] != pattern(RUNS[k].offset + i))
                fail_msg("run %zu: byte %zu of %zu differs", k, i, RUNS[k].n);
            written[RUNS[k].offset + i] = 1;
        }
    for (size_t at = 0; at < FILE_BYTES; at++)
        if (!written[at] && got[at] != 0)
            fail_msg("byte %zu, between runs, is %u", at, got[at]);
    free(written);
    free(got);
}

/* Whether the page holding `offset` is in the page cache. */
static bool resident(int fd, uint64_t offset)
{
    long page = sysconf(_SC_PAGESIZE);
    uint8_t *map = mmap(NULL, FILE_BYTES, PROT_READ, MAP_SHARED, fd, 0);
    assert_true(map != MAP_FAILED);
    unsigned char vec[1];
    assert_int_equal(mincore(map + offset / (uint64_t)page * (uint64_t)page, 1, vec), 0);
    munmap(map, FILE_BYTES);
    return vec[0] & 1;
}

static void every_alignment_lands(void **state)
{
    (void)state;
    char path[256];
    int fd = open_new("runs.bin", path, sizeof path);
    assert_int_equal(ftruncate(fd, FILE_BYTES), 0);
    dw_file f;
    dw_open(&f, fd, path);
    assert_int_equal(f.direct_fd >= 0, takes_direct(path));
    dw_bounce bounce = {0};
    write_run(&f, &bounce, &RUNS[N_RUNS - 1]);
    assert_null(bounce.p);                  /* aligned alike in memory and file: not staged */
    for (size_t k = N_RUNS - 1; k-- > 0;)   /* out of order, as the stream's workers write */
        write_run(&f, &bounce, &RUNS[k]);
    dw_bounce_free(&bounce);
    bool direct = f.direct_fd >= 0;
    flush(&f);
    dw_close(&f);
    if (direct && !on_tmpfs(path)) {
        assert_false(resident(fd, 18 * MiB));           /* inside an aligned run: direct */
        assert_false(resident(fd, 9 * MiB));            /* inside a staged one: direct */
        assert_true(resident(fd, 5 * MiB));             /* a small run: through the cache */
    }
    check_file(fd);
    close(fd);
}

typedef struct worker {
    dw_file *f;
    size_t first;
} worker;

static void *write_every_other(void *arg)
{
    worker *w = arg;
    dw_bounce bounce = {0};
    for (size_t k = w->first; k < N_RUNS; k += 2)
        write_run(w->f, &bounce, &RUNS[k]);
    dw_bounce_free(&bounce);
    return NULL;
}

/* Runs `fn` in two threads at once on `f`, one starting at run 0, the other at run 1. */
static void two_workers(dw_file *f, void *(*fn)(void *))
{
    worker w[2] = {{f, 0}, {f, 1}};
    pthread_t t[2];
    for (int i = 0; i < 2; i++)
        assert_int_equal(pthread_create(&t[i], NULL, fn, &w[i]), 0);
    for (int i = 0; i < 2; i++)
        pthread_join(t[i], NULL);
}

static void threads_at_once(void **state)
{
    (void)state;
    char path[256];
    int fd = open_new("threads.bin", path, sizeof path);
    dw_file f;
    dw_open(&f, fd, path);
    two_workers(&f, write_every_other);
    flush(&f);
    dw_close(&f);
    assert_int_equal(ftruncate(fd, FILE_BYTES), 0);
    check_file(fd);
    close(fd);
}

/* An alignment the device does not take (256 bytes against 512-byte sectors): the first direct
 * write is refused, that run and every later one go through the cache, and the file is whole. */
static void refused_midway_goes_buffered(void **state)
{
    (void)state;
    char path[256];
    int fd = open_new("refused.bin", path, sizeof path);
    assert_int_equal(ftruncate(fd, FILE_BYTES), 0);
    dw_file f;
    dw_open(&f, fd, path);
    if (f.direct_fd >= 0)
        f.align = 256;
    dw_bounce bounce = {0};
    /* runs[1] starts at 1 MiB + 100: its first "aligned" offset is 1 MiB + 256, no sector's */
    write_run(&f, &bounce, &RUNS[1]);
    if (f.direct_fd >= 0 && !on_tmpfs(path))
        assert_true(f.direct_refused);
    for (size_t k = 0; k < N_RUNS; k++)
        if (k != 1)
            write_run(&f, &bounce, &RUNS[k]);
    dw_bounce_free(&bounce);
    flush(&f);
    dw_close(&f);
    check_file(fd);
    close(fd);
}

static void without_direct_all_buffered(void **state)
{
    (void)state;
    char path[256];
    int fd = open_new("plain.bin", path, sizeof path);
    assert_int_equal(ftruncate(fd, FILE_BYTES), 0);
    dw_file f;
    dw_open(&f, fd, path);
    dw_close(&f);                  /* as where O_DIRECT could not be opened */
    dw_bounce bounce = {0};
    for (size_t k = 0; k < N_RUNS; k++)
        write_run(&f, &bounce, &RUNS[k]);
    assert_null(bounce.p);         /* nothing staged: nothing went direct */
    check_file(fd);
    close(fd);
}

/* Runs of 256 KiB + 3000 bytes end to end from 1000 bytes in: each has a head and a tail off
 * the pages, 2 x 300 of them, more than the held buffer (1 MiB) takes at once. */
#define MANY_RUNS 600
#define MANY_LEN ((size_t)256 * 1024 + 3000)
#define MANY_START 1000

static void *write_many(void *arg)
{
    worker *w = arg;
    dw_bounce bounce = {0};
    uint8_t *mem = malloc(MANY_LEN);
    assert_non_null(mem);
    for (size_t k = w->first; k < MANY_RUNS; k += 2) {
        uint64_t at = MANY_START + k * MANY_LEN;
        for (size_t i = 0; i < MANY_LEN; i++)
            mem[i] = pattern(at + i);
        fy_err err = {0};
        assert_int_equal(dw_pwrite(w->f, &bounce, mem, MANY_LEN, at, &err), FERRY_OK);
    }
    free(mem);
    dw_bounce_free(&bounce);
    return NULL;
}

static void held_pieces_overflow_and_land(void **state)
{
    (void)state;
    char path[256];
    int fd = open_new("many.bin", path, sizeof path);
    size_t size = MANY_START + MANY_RUNS * MANY_LEN;
    assert_int_equal(ftruncate(fd, (off_t)size), 0);
    dw_file f;
    dw_open(&f, fd, path);
    two_workers(&f, write_many);
    flush(&f);
    dw_close(&f);
    uint8_t *got = malloc(size);
    assert_non_null(got);
    assert_int_equal(pread(fd, got, size, 0), (ssize_t)size);
    for (size_t at = 0; at < size; at++)
        if (got[at] != (at < MANY_START ? 0 : pattern(at)))
            fail_msg("byte %zu of %zu differs", at, size);
    free(got);
    close(fd);
}

static int setup(void **state)
{
    (void)state;
    return scratch_make("direct");
}

static int teardown(void **state)
{
    (void)state;
    return scratch_remove();
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(every_alignment_lands),
        cmocka_unit_test(threads_at_once),
        cmocka_unit_test(refused_midway_goes_buffered),
        cmocka_unit_test(without_direct_all_buffered),
        cmocka_unit_test(held_pieces_overflow_and_land),
    };
    return cmocka_run_group_tests(tests, setup, teardown);
}
