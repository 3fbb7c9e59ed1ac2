/* zip.h — a writer for the archive formats that are zips (torch.export's .pt2): every entry
 * stored, not compressed, its data starting on a 64-byte boundary (padding in an extra field of
 * id 0x4246 in the local header, as torch's own writer does), zip64 records where a size or an
 * offset needs them, and a zip64 end record always, as torch writes.
 *
 * Entries are laid out as they are declared: zip_put writes a small entry at once; zip_reserve
 * declares an entry of a known size and returns the file offset of its data, which the caller
 * writes itself (the weight stream's pwrite, from many threads), telling zip_wrote what it wrote.
 * zip_close folds those runs' CRC-32s into each reserved entry's (reading back from the file
 * only the bytes nobody reported: padding, bands copied in the kernel), writes them into the
 * local headers, and writes the central directory. Nothing is kept in memory but the entry
 * table and one record per reported run. */
#ifndef FERRY_IO_ZIP_H
#define FERRY_IO_ZIP_H

#include <stddef.h>
#include <stdint.h>

#include "util/err.h"

#define ZIP_ALIGN 64

typedef struct zip_writer zip_writer;

/* A writer for `fd` (the file `path`, named in errors), positioned at offset 0. */
zip_writer *zip_new(int fd, const char *path, fy_err *err);
void zip_free(zip_writer *z);

/* Writes entry `name` holding `data` (n bytes). */
ferry_status zip_put(zip_writer *z, const char *name, const void *data, size_t n, fy_err *err);
/* Declares entry `name` of `size` bytes; *data_offset is where its bytes go in the file. */
ferry_status zip_reserve(zip_writer *z, const char *name, uint64_t size, uint64_t *data_offset,
                         fy_err *err);
/* Reports `n` bytes `data`, just written at file offset `offset` inside a reserved entry; safe
 * to call from several threads at once. Runs that overlap (one reported twice included) make
 * zip_close read every reserved entry back whole; one crossing an entry's bounds, that entry. */
void zip_wrote(zip_writer *z, const void *data, size_t n, uint64_t offset);
/* zip_wrote in the shape of a weight stream's observer (ws_observer.wrote); `user` is the
 * zip_writer. */
void zip_wrote_observer(void *user, const void *data, size_t n, uint64_t offset);
/* The file offset the next entry's local header starts at (a layout's size, once done). */
uint64_t zip_end_offset(const zip_writer *z);
/* CRCs of the reserved entries, then the central directory and end records. */
ferry_status zip_close(zip_writer *z, fy_err *err);
/* After zip_close: the CRC-32 of the whole file as written, without reading it back. */
uint32_t zip_file_crc32(const zip_writer *z);

#endif
