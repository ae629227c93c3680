/* manifest.c — SHA-256 of the inputs and outputs (OpenSSL's EVP digests). */
#define _DEFAULT_SOURCE /* scandir */
#include "manifest.h"

#include <dirent.h>
#include <limits.h>
#include <openssl/evp.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "escape.h"

static bool sha256_file(const char *path, char hex[65]) {
  FILE *f = fopen(path, "rb");
  if (!f) return false;
  EVP_MD_CTX *ctx = EVP_MD_CTX_new();
  EVP_DigestInit_ex(ctx, EVP_sha256(), NULL);
  unsigned char buf[65536], digest[EVP_MAX_MD_SIZE];
  size_t got;
  while ((got = fread(buf, 1, sizeof buf, f)) > 0)
    EVP_DigestUpdate(ctx, buf, got);
  unsigned int length = 0;
  EVP_DigestFinal_ex(ctx, digest, &length);
  EVP_MD_CTX_free(ctx);
  fclose(f);
  for (unsigned int i = 0; i < length; i++)
    snprintf(hex + 2 * i, 3, "%02x", digest[i]);
  return true;
}

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
  bool ok = sha256_file(model_path, hex);
  fprintf(out, "# lynxgen manifest: SHA-256 of the input and of every generated file\ninput  %s  %s\n",
          ok ? hex : "?", lx_text(slash ? slash + 1 : model_path, name, sizeof name));
  struct dirent **names;
  int n = scandir(dir, &names, regular_file, by_name);
  for (int i = 0; i < n; i++) {
    snprintf(path, sizeof path, "%s/%s", dir, names[i]->d_name);
    ok = ok && sha256_file(path, hex);
    if (ok) fprintf(out, "output %s  %s\n", hex, names[i]->d_name);
    free(names[i]);
  }
  free(names);
  return fclose(out) == 0 && ok && n >= 0;
}
