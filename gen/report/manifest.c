/* manifest.c — SHA-256 of the inputs and outputs (OpenSSL's EVP digests). */
#define _DEFAULT_SOURCE /* scandir */
#include "report/manifest.h"

#include <dirent.h>
#include <limits.h>
#include <openssl/evp.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "alloc.h"
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
  bool ok = sha256_file(model_path, hex);
  fprintf(out, MANIFEST_HEADER "\ninput  %s  %s\n", ok ? hex : "?",
          lx_text(slash ? slash + 1 : model_path, name, sizeof name));
  struct dirent **names = NULL; /* scandir leaves it unset when it fails */
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
  return sha256_file(path, hex) && !strcmp(hex, e->sha256);
}

void lx_free_manifest(lx_manifest *m) {
  free(m->entries);
  *m = (lx_manifest){0};
}
