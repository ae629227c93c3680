/* manifest.h — manifest.txt: the SHA-256 of the input and of every file
 * lynxgen wrote, so that a user can tell two generated directories apart and
 * check that nothing was edited by hand. */
#ifndef LX_MANIFEST_H
#define LX_MANIFEST_H

#include <stdbool.h>

/* Hashes model_path and every file in dir (sorted by name) into
 * dir/manifest.txt. Names only, never absolute paths. */
bool lx_write_manifest(const char *dir, const char *model_path);

/* What a manifest.txt says lynxgen wrote: the only files lynxgen may replace
 * (gen/report/output_dir.c). */
typedef struct {
  char name[256];
  char sha256[65];
} lx_manifest_entry;

typedef struct {
  lx_manifest_entry *entries;
  int count;
} lx_manifest;

/* Reads dir/manifest.txt; false when there is none, or it is not lynxgen's. */
bool lx_read_manifest(const char *dir, lx_manifest *m);
/* The entry of file `name`, or NULL when lynxgen did not write it. */
const lx_manifest_entry *lx_manifest_find(const lx_manifest *m, const char *name);
/* Whether dir/NAME still holds the bytes lynxgen wrote. */
bool lx_manifest_unchanged(const char *dir, const lx_manifest_entry *e);
void lx_free_manifest(lx_manifest *m);

#endif
