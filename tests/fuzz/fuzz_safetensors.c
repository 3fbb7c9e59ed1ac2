/* fuzz_safetensors.c — libFuzzer target for the safetensors reader (st_open): the input is a
 * whole .safetensors file (8-byte length, JSON header, data area), served from a memfd so that
 * st_open sees a real regular file it can fstat and read.
 *
 * Beyond "no crash, no leak, no UB" it checks what st_open promises when it accepts a file:
 * every tensor's byte range lies inside the data area and matches numel * dtype size, names
 * are unique and sorted, and every byte of every tensor can be read with st_read. */
#include <fcntl.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

#include "fuzz.h"
#include "model/safetensors.h"
#include "util/dtype.h"

static int memfd = -1;
static char path[64];

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    if (memfd < 0) {
        memfd = memfd_create("fuzz.safetensors", MFD_CLOEXEC);
        check(memfd >= 0, "memfd_create");
        snprintf(path, sizeof path, "/proc/self/fd/%d", memfd);
    }
    check(ftruncate(memfd, 0) == 0, "ftruncate");
    for (size_t done = 0; done < size;) {
        ssize_t n = pwrite(memfd, data + done, size - done, (off_t)done);
        check(n > 0, "pwrite");
        done += (size_t)n;
    }

    st_file *f = NULL;
    fy_err err = {0};
    ferry_status st = st_open(path, &f, &err);
    if (st != FERRY_OK) {
        check(f == NULL, "a failed open returns no handle");
        check(err.status == st, "the status is recorded");
        check_message(err.msg);
        return 0;
    }
    check(f->file_size == size && f->data_start <= size, "sizes");
    uint64_t data_size = f->file_size - f->data_start;
    static uint8_t buf[4096];
    for (size_t i = 0; i < f->n_tensors; i++) {
        const st_tensor *t = &f->tensors[i];
        check(t->begin <= t->end && t->end <= data_size, "range inside the data area");
        check(t->end - t->begin == t->numel * (uint64_t)dt_size(t->dtype), "byte length");
        check(i == 0 || strcmp(f->tensors[i - 1].name, t->name) < 0, "sorted, unique names");
        check(st_find(f, t->name) == t, "st_find finds every tensor");
        for (uint64_t k = 0; k < t->end - t->begin; k += sizeof buf) {
            uint64_t left = t->end - t->begin - k;
            size_t n = left < sizeof buf ? (size_t)left : sizeof buf;
            check(st_read(t, k, buf, n, &err) == FERRY_OK, "every byte of a tensor reads");
        }
    }
    st_close(f);
    return 0;
}
