/* manifest.h — manifest.txt: the SHA-256 of the input and of every file
 * lynxgen wrote, so that a user can tell two generated directories apart and
 * check that nothing was edited by hand. */
#ifndef LX_MANIFEST_H
#define LX_MANIFEST_H

#include <stdbool.h>

/* Hashes model_path and every file in dir (sorted by name) into
 * dir/manifest.txt. Names only, never absolute paths. */
bool lx_write_manifest(const char *dir, const char *model_path);

#endif
