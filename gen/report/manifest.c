/* manifest.c — SHA-256 of the inputs and outputs (OpenSSL's EVP digests). */
#define _DEFAULT_SOURCE /* scandir */
#include "report/manifest.h"

#include <dirent.h>
#include <fcntl.h>
#include <limits.h>
#include <openssl/evp.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "alloc.h"
#include "escape.h"

/* Opens a regular file to hash it, and nothing else: a FIFO, a device or a
 * link to one put in a generated file's place would block the open or the
 * read forever (or never end: /dev/zero). It is checked before the open (which
 * has effects on some devices) and after it (it may have been swapped in
 * between); the open does not block either way. With `follow` false, a
 * symbolic link is not followed: a generated file replaced by one is not
 * the file lynxgen wrote. */
static int open_regular(const char *path, bool follow) {
  struct stat named, opened;
  if ((follow ? stat(path, &named) : lstat(path, &named)) != 0 || !S_ISREG(named.st_mode)) return -1;
  int fd = open(path, O_RDONLY | O_NONBLOCK | O_CLOEXEC | (follow ? 0 : O_NOFOLLOW));
  if (fd >= 0 && (fstat(fd, &opened) != 0 || !S_ISREG(opened.st_mode))) {
    close(fd);
    return -1;
  }
  return fd;
}

static bool sha256_file(const char *path, bool follow, char hex[65]) {
  int fd = open_regular(path, follow);
  if (fd < 0) return false;
  EVP_MD_CTX *ctx = EVP_MD_CTX_new();
  EVP_DigestInit_ex(ctx, EVP_sha256(), NULL);
  unsigned char buf[65536], digest[EVP_MAX_MD_SIZE];
  ssize_t got;
  while ((got = read(fd, buf, sizeof buf)) > 0)
    EVP_DigestUpdate(ctx, buf, (size_t)got);
  unsigned int length = 0;
  EVP_DigestFinal_ex(ctx, digest, &length);
  EVP_MD_CTX_free(ctx);
  close(fd);
  for (unsigned int i = 0; i < length; i++)
    snprintf(hex + 2 * i, 3, "%02x", digest[i]);
  return got == 0;
}

#define MANIFEST_HEADER "# lynxgen manifest: SHA-256 of the input and of every generated file"

static int regular_file(const struct dirent *e) {
  return e->d_name[0] != '.' && strcmp(e->d_name, "manifest.txt") != 0;
}

/* Byte order, not the locale's: the manifest is the same on every machine. */
static int by_name(const struct dirent **a, const struct dirent **b) {
  return strcmp((*a)->d_name, (*b)->d_name);
}

bool lx_write_manifest(const char *dir, const char *model_path) {
  char path[PATH_MAX + 64], hex[65], name[LX_TEXT_MAX];
  snprintf(path, sizeof path, "%s/manifest.txt", dir);
  FILE *out = fopen(path, "w");
  if (!out) return false;
  const char *slash = strrchr(model_path, '/');
  bool ok = sha256_file(model_path, true, hex); /* the model may be a link */
  fprintf(out, MANIFEST_HEADER "\ninput  %s  %s\n", ok ? hex : "?",
          lx_text(slash ? slash + 1 : model_path, name, sizeof name));
  struct dirent **names = NULL; /* scandir leaves it unset when it fails */
  int n = scandir(dir, &names, regular_file, by_name);
  for (int i = 0; i < n; i++) {
    snprintf(path, sizeof path, "%s/%s", dir, names[i]->d_name);
    ok = ok && sha256_file(path, false, hex);
    if (ok) fprintf(out, "output %s  %s\n", hex, names[i]->d_name);
    free(names[i]);
  }
  free(names);
  return fclose(out) == 0 && ok && n >= 0;
}

bool lx_read_manifest(const char *dir, lx_manifest *m) {
  *m = (lx_manifest){0};
  char path[PATH_MAX + 64], line[512];
  snprintf(path, sizeof path, "%s/manifest.txt", dir);
  FILE *in = fopen(path, "r");
  if (!in) return false;
  bool ours = fgets(line, sizeof line, in) && !strncmp(line, MANIFEST_HEADER, strlen(MANIFEST_HEADER));
  while (ours && fgets(line, sizeof line, in)) {
    lx_manifest_entry e;
    if (sscanf(line, "output %64[0-9a-f]  %255[^\n]", e.sha256, e.name) != 2) continue;
    m->entries = lx_realloc(m->entries, (size_t)(m->count + 1) * sizeof *m->entries);
    m->entries[m->count++] = e;
  }
  fclose(in);
  if (!ours) lx_free_manifest(m);
  return ours;
}

const lx_manifest_entry *lx_manifest_find(const lx_manifest *m, const char *name) {
  for (int i = 0; i < m->count; i++)
    if (!strcmp(m->entries[i].name, name)) return &m->entries[i];
  return NULL;
}

bool lx_manifest_unchanged(const char *dir, const lx_manifest_entry *e) {
  char path[PATH_MAX + 300], hex[65];
  snprintf(path, sizeof path, "%s/%s", dir, e->name);
  return sha256_file(path, false, hex) && !strcmp(hex, e->sha256);
}

void lx_free_manifest(lx_manifest *m) {
  free(m->entries);
  *m = (lx_manifest){0};
}
