/* output_dir.h — writing the output directory (-o DIR) so that no user file
 * is ever lost: everything is written into a fresh hidden sibling, which then
 * takes DIR's place in one atomic exchange. lynxgen replaces only the files
 * the manifest of DIR says it wrote, and only while they hold what it wrote;
 * files a user added (build products included) move into the new directory.
 * It refuses `/`, the home directory, the working directory or one that holds
 * it, a symbolic link however spelled (lnk/., lnk/x/..), and a non-empty
 * directory without lynxgen's manifest; a refused DIR's missing parents are
 * not created. The new DIR keeps the permissions and group of the one it
 * replaces. Concurrent runs on the same DIR take turns (a lock on DIR's
 * parent); SIGINT, SIGTERM and SIGHUP stop a run, its hidden directory
 * removed, at any time but the exchange itself. */
#ifndef LX_OUTPUT_DIR_H
#define LX_OUTPUT_DIR_H

#include <stdbool.h>

typedef enum {
  LX_OUTPUT_WRITTEN,
  LX_OUTPUT_FAILED,  /* could not write (disk full, permissions): exit 1 */
  LX_OUTPUT_REFUSED, /* DIR is not one lynxgen may replace: exit 2 */
} lx_output_status;

/* Fills the directory `tmp` (empty, fresh) with every output and its
 * manifest.txt; false on failure. */
typedef bool (*lx_output_filler)(const char *tmp, const void *ctx);

/* Writes DIR with `fill`, creating its missing parents; every problem is
 * reported on stderr as one line naming the path. */
lx_output_status lx_write_output_dir(const char *dir, lx_output_filler fill, const void *ctx);

#endif
