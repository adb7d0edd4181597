// A measuring libcuda.so.1 for the GPU machine (built by build-probe.sh): it forwards
// every export of the real driver and watches what NVIDIA's libraries do with the
// export tables the guest driver does not serve yet.
//
// - Every slot of the tables named in PROBE_TABLES (hex ids, comma-separated; default:
//   function introspection 6e163fbe, da9151d3 and 1734dc26) is wrapped: each call's
//   first ten argument words (twelve are passed on), what readable memory they point to (64 bytes, before and after the
//   call), and the return value go to PROBE_LOG.
// - Function introspection slot 7 (a walk over a module's functions with the caller's
//   callback) also has its callback wrapped: each function record handed to it is
//   dumped (PROBE_RECORD_BYTES, default 0x600).
// - PROBE_KEEP substitutes the records: the callback gets a copy of our own, in which
//   only the listed byte offsets (comma-separated, hex; "all" for every word) hold the
//   driver's words and the rest is PROBE_FILL (a byte, default 0). Every driver call
//   (by name or through cuGetProcAddress), and every wrapped slot, gets the driver's record
//   back for the copy. Whether a library still works shows which words it reads.
// - PROBE_DUMP (export names, comma-separated; with PROBE_KEEP) dumps those calls too.
#define _GNU_SOURCE
#include <dlfcn.h>
#include <pthread.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/uio.h>
#include <unistd.h>

#include "probe-names.h" // written by build-probe.sh: every export but the three below

typedef uint64_t u64;
typedef u64 (*fn10)(u64, u64, u64, u64, u64, u64, u64, u64, u64, u64, u64, u64);
typedef int (*gpa_t)(const char *, void **, int, u64, int *);
typedef int (*get_t)(const void **, const unsigned char *);

static void *real_lib;
static FILE *logf;
static gpa_t real_gpa_v2, real_gpa;
static get_t real_get;
static pthread_mutex_t lock = PTHREAD_MUTEX_INITIALIZER;

// Reads memory that may not be mapped without faulting: a failed read is just "no".
static int safe_read(u64 addr, void *buf, size_t n) {
  if (addr < 0x10000 || addr > 0x7fffffffffffULL) return 0;
  struct iovec local = {buf, n}, remote = {(void *)addr, n};
  return process_vm_readv(getpid(), &local, 1, &remote, 1, 0) == (ssize_t)n;
}

static void dump(const char *what, u64 addr, size_t n) {
  unsigned char b[4096];
  if (n > sizeof b) n = sizeof b;
  if (!safe_read(addr, b, n)) return;
  fprintf(logf, "    %s @%#lx:", what, (unsigned long)addr);
  for (size_t i = 0; i < n; i += 8) {
    u64 w;
    memcpy(&w, b + i, 8);
    if (w) fprintf(logf, " +%#zx=%#lx", i, (unsigned long)w);
  }
  int printable = 1;
  size_t len = 0;
  for (; len < n && b[len]; len++)
    if (b[len] < 9 || b[len] > 126) printable = 0;
  if (printable && len >= 3) fprintf(logf, " str=\"%.*s\"", (int)(len > 200 ? 200 : len), b);
  fprintf(logf, "\n");
}

// ---- record copies (PROBE_KEEP) --------------------------------------------------
#define MAX_COPIES 8192
static struct { u64 copy, real; } copies[MAX_COPIES];
static int n_copies;
static size_t record_bytes = 0x600;
static unsigned char keep[0x2000 / 8];
static int keep_all, substitute, fill;

static u64 to_real(u64 v) {
  if (!substitute) return v;
  for (int i = 0; i < n_copies; i++)
    if (copies[i].copy == v) return copies[i].real;
  return v;
}

static u64 copy_of(u64 real) {
  pthread_mutex_lock(&lock);
  for (int i = 0; i < n_copies; i++)
    if (copies[i].real == real) {
      pthread_mutex_unlock(&lock);
      return copies[i].copy;
    }
  unsigned char *c = malloc(record_bytes);
  memset(c, fill, record_bytes);
  unsigned char *r = (unsigned char *)real;
  for (size_t off = 0; off < record_bytes; off += 8)
    if (keep_all || keep[off / 8]) memcpy(c + off, r + off, 8);
  if (n_copies < MAX_COPIES) copies[n_copies++] = (typeof(copies[0])){(u64)c, real};
  pthread_mutex_unlock(&lock);
  return (u64)c;
}

// ---- trampolines: a pool of wrappers, each with a label and the real target ------
#define POOL 1536
static fn10 pool_real[POOL];
static char pool_label[POOL][64];
static int pool_dump[POOL]; // 1: dump what the arguments point to
static unsigned long pool_calls[POOL];
static int pool_used;

static u64 call_through(int i, u64 *a) {
  unsigned long k = __atomic_fetch_add(&pool_calls[i], 1, __ATOMIC_RELAXED);
  int verbose = k < 40;
  u64 b[12];
  int translated = 0;
  for (int j = 0; j < 12; j++) {
    b[j] = to_real(a[j]);
    if (b[j] != a[j]) translated |= 1 << j;
  }
  if (translated && k < 40) fprintf(logf, "USE %s args-mask=%#x\n", pool_label[i], translated);
  if (verbose && pool_dump[i]) {
    fprintf(logf, "CALL %s", pool_label[i]);
    for (int j = 0; j < 10; j++) fprintf(logf, " %#lx", (unsigned long)a[j]);
    fprintf(logf, "\n");
    for (int j = 0; j < 10; j++) {
      char w[16];
      snprintf(w, sizeof w, "arg%d", j + 1);
      dump(w, b[j], 64);
    }
  }
  u64 r = pool_real[i](b[0], b[1], b[2], b[3], b[4], b[5], b[6], b[7], b[8], b[9], b[10], b[11]);
  if (verbose && pool_dump[i]) {
    fprintf(logf, "RET %s = %#lx\n", pool_label[i], (unsigned long)r);
    for (int j = 0; j < 10; j++) {
      char w[16];
      snprintf(w, sizeof w, "arg%d-after", j + 1);
      dump(w, b[j], 256);
    }
  }
  return r;
}

// Trampoline names are four digits: 1-3, then 0-7 three times; SLOT makes them 0..1535.
#define SLOT(i) \
  ((((i) / 1000) - 1) * 512 + (((i) / 100) % 10) * 64 + (((i) / 10) % 10) * 8 + (i) % 10)
#define T(i)                                                                             \
  static u64 tramp##i(u64 a0, u64 a1, u64 a2, u64 a3, u64 a4, u64 a5, u64 a6, u64 a7,   \
                      u64 a8, u64 a9, u64 a10, u64 a11) {                               \
    u64 a[12] = {a0, a1, a2, a3, a4, a5, a6, a7, a8, a9, a10, a11};                      \
    return call_through(SLOT(i), a);                                                     \
  }
#define T8(i) T(i##0) T(i##1) T(i##2) T(i##3) T(i##4) T(i##5) T(i##6) T(i##7)
#define T64(i) T8(i##0) T8(i##1) T8(i##2) T8(i##3) T8(i##4) T8(i##5) T8(i##6) T8(i##7)
#define T512(i) T64(i##0) T64(i##1) T64(i##2) T64(i##3) T64(i##4) T64(i##5) T64(i##6) T64(i##7)
T512(1) T512(2) T512(3)
#define R(i) (void *)tramp##i,
#define R8(i) R(i##0) R(i##1) R(i##2) R(i##3) R(i##4) R(i##5) R(i##6) R(i##7)
#define R64(i) R8(i##0) R8(i##1) R8(i##2) R8(i##3) R8(i##4) R8(i##5) R8(i##6) R8(i##7)
#define R512(i) R64(i##0) R64(i##1) R64(i##2) R64(i##3) R64(i##4) R64(i##5) R64(i##6) R64(i##7)
static void *pool_fn[POOL] = {R512(1) R512(2) R512(3)};

static void *wrap_with(void *real, const char *label, int dump_args) {
  pthread_mutex_lock(&lock);
  for (int i = 0; i < pool_used; i++)
    if ((void *)pool_real[i] == real && strcmp(pool_label[i], label) == 0) {
      pthread_mutex_unlock(&lock);
      return pool_fn[i];
    }
  if (pool_used == POOL) {
    pthread_mutex_unlock(&lock);
    return real;
  }
  int i = pool_used++;
  pool_real[i] = (fn10)real;
  snprintf(pool_label[i], sizeof pool_label[i], "%s", label);
  pool_dump[i] = dump_args;
  pthread_mutex_unlock(&lock);
  return pool_fn[i];
}

// ---- function introspection slot 7 -------------------------------------------------
typedef u64 (*cb_t)(u64, u64, u64, u64, u64, u64);
static __thread cb_t user_cb;
static fn10 real_walk;

static u64 cb_wrap(u64 a, u64 rec, u64 c, u64 d, u64 e, u64 f) {
  fprintf(logf, "CALLBACK args %#lx %#lx %#lx %#lx %#lx %#lx\n", (unsigned long)a,
          (unsigned long)rec, (unsigned long)c, (unsigned long)d, (unsigned long)e,
          (unsigned long)f);
  dump("record", rec, record_bytes);
  dump("arg3", c, 64);
  dump("opaque-before", a, 64);
  u64 handed = substitute ? copy_of(rec) : rec;
  u64 r = user_cb(a, handed, c, d, e, f);
  fprintf(logf, "CALLBACK returned %#lx (record handed %#lx)\n", (unsigned long)r,
          (unsigned long)handed);
  dump("opaque-after", a, 64);
  return r;
}

static u64 walk_wrap(u64 a0, u64 a1, u64 a2, u64 a3, u64 a4, u64 a5, u64 a6, u64 a7, u64 a8,
                     u64 a9, u64 a10, u64 a11) {
  fprintf(logf, "WALK args %#lx %#lx %#lx %#lx %#lx %#lx %#lx\n", (unsigned long)a0,
          (unsigned long)a1, (unsigned long)a2, (unsigned long)a3, (unsigned long)a4,
          (unsigned long)a5, (unsigned long)a6);
  dump("arg1", a0, 64);
  dump("arg2", a1, 64);
  dump("arg6", a5, 64);
  user_cb = (cb_t)a2;
  u64 r = real_walk(a0, a1, a2 ? (u64)cb_wrap : 0, a3, a4, a5, a6, a7, a8, a9, a10, a11);
  fprintf(logf, "WALK returned %#lx\n", (unsigned long)r);
  dump("opaque-final", a3, 16);
  return r;
}

// ---- the driver's entry points ---------------------------------------------------
static int hex_id_matches(const unsigned char *id, const char *list) {
  char h[33];
  for (int i = 0; i < 16; i++) sprintf(h + 2 * i, "%02x", id[i]);
  return strstr(list, h) != NULL;
}

int cuGetExportTable(const void **table, const unsigned char *id) {
  int r = real_get(table, id);
  char h[33];
  for (int i = 0; i < 16; i++) sprintf(h + 2 * i, "%02x", id[i]);
  const char *watch = getenv("PROBE_TABLES");
  if (!watch)
    watch = "6e163fbeb958444d835ce182aff1991e,da9151d33ae6cc41a5c04f26d533e328,"
            "1734dc26800d47458726c0f1e7dd8bca";
  fprintf(logf, "EXPORT_TABLE %s rc=%d size=%lu\n", h, r,
          (r == 0 && *table) ? (unsigned long)*(const u64 *)*table : 0UL);
  if (r != 0 || !*table || !hex_id_matches(id, watch)) return r;
  static struct { char id[33]; void **copy; } made[16];
  static int n_made;
  pthread_mutex_lock(&lock);
  for (int i = 0; i < n_made; i++)
    if (strcmp(made[i].id, h) == 0) {
      *table = made[i].copy;
      pthread_mutex_unlock(&lock);
      return r;
    }
  pthread_mutex_unlock(&lock);
  const u64 *t = *table;
  u64 bytes = t[0];
  // Some tables have no size word: then up to the first NULL, at most 128 words.
  size_t words = (bytes >= 16 && bytes < 4096 && bytes % 8 == 0) ? bytes / 8 : 0;
  if (!words)
    while (words < 128 && t[words]) words++;
  void **copy = calloc(words + 1, sizeof(void *));
  copy[0] = (void *)t[0];
  for (size_t s = 1; s < words; s++) {
    char label[64];
    snprintf(label, sizeof label, "%.8s.%zu", h, s);
    if (strncmp(h, "6e163fbe", 8) == 0 && s == 7) {
      real_walk = (fn10)t[s];
      copy[s] = (void *)walk_wrap;
    } else {
      copy[s] = wrap_with((void *)t[s], label, 1);
    }
  }
  if (bytes < 16 || bytes >= 4096) copy[0] = wrap_with((void *)t[0], "table.0", 1);
  pthread_mutex_lock(&lock);
  if (n_made < 16) {
    snprintf(made[n_made].id, 33, "%s", h);
    made[n_made++].copy = copy;
  }
  pthread_mutex_unlock(&lock);
  *table = copy;
  return r;
}

int cuGetProcAddress_v2(const char *sym, void **pfn, int ver, u64 flags, int *st);
int cuGetProcAddress(const char *sym, void **pfn, int ver, u64 flags);
static int lookup(gpa_t f, const char *sym, void **pfn, int ver, u64 flags, int *st) {
  int r = f(sym, pfn, ver, flags, st);
  if (r != 0 || !*pfn) return r;
  if (strcmp(sym, "cuGetExportTable") == 0) *pfn = (void *)cuGetExportTable;
  else if (strcmp(sym, "cuGetProcAddress") == 0)
    *pfn = ver >= 12000 ? (void *)cuGetProcAddress_v2 : (void *)cuGetProcAddress;
  else if (substitute) {
    char label[64];
    snprintf(label, sizeof label, "%s/%lu", sym, (unsigned long)flags);
    *pfn = wrap_with(*pfn, label, 0);
  }
  return r;
}
int cuGetProcAddress_v2(const char *sym, void **pfn, int ver, u64 flags, int *st) {
  return lookup(real_gpa_v2, sym, pfn, ver, flags, st);
}
int cuGetProcAddress(const char *sym, void **pfn, int ver, u64 flags) {
  return lookup((gpa_t)real_gpa, sym, pfn, ver, flags, NULL);
}

__attribute__((constructor)) static void init(void) {
  const char *p = getenv("PROBE_REAL");
  real_lib = dlopen(p ? p : "/usr/lib/x86_64-linux-gnu/libcuda.so.1", RTLD_NOW | RTLD_LOCAL);
  if (!real_lib) {
    fprintf(stderr, "probe: %s\n", dlerror());
    abort();
  }
  for (size_t i = 0; i < sizeof probe_names / sizeof *probe_names; i++)
    *probe_ptrs[i] = dlsym(real_lib, probe_names[i]);
  real_gpa_v2 = (gpa_t)dlsym(real_lib, "cuGetProcAddress_v2");
  real_gpa = (gpa_t)dlsym(real_lib, "cuGetProcAddress");
  real_get = (get_t)dlsym(real_lib, "cuGetExportTable");
  const char *l = getenv("PROBE_LOG");
  logf = fopen(l ? l : "/tmp/probe.log", "a");
  setvbuf(logf, NULL, _IOLBF, 0);
  const char *k = getenv("PROBE_KEEP");
  if (k) {
    substitute = 1;
    if (strcmp(k, "all") == 0) keep_all = 1;
    for (char *s = (char *)k; *s;) {
      char *end;
      unsigned long off = strtoul(s, &end, 16);
      if (end == s) break;
      if (off < sizeof keep * 8) keep[off / 8] = 1;
      s = *end ? end + 1 : end;
    }
  }
  // Substituting: the exports themselves are wrapped too (a library may call them by
  // name rather than through cuGetProcAddress).
  if (substitute)
    for (size_t i = 0; i < sizeof probe_names / sizeof *probe_names; i++)
      if (*probe_ptrs[i]) {
        char label[64];
        snprintf(label, sizeof label, "direct:%s", probe_names[i]);
        const char *d = getenv("PROBE_DUMP");
        char want[80];
        snprintf(want, sizeof want, ",%s,", probe_names[i]);
        char list[4096];
        snprintf(list, sizeof list, ",%s,", d ? d : "");
        *probe_ptrs[i] = wrap_with(*probe_ptrs[i], label, strstr(list, want) != NULL);
      }
  if (getenv("PROBE_FILL")) fill = (int)strtol(getenv("PROBE_FILL"), NULL, 0);
  if (getenv("PROBE_RECORD_BYTES")) record_bytes = strtoul(getenv("PROBE_RECORD_BYTES"), NULL, 0);
  if (record_bytes > 0x2000) record_bytes = 0x2000;
  fprintf(logf, "pid %d start keep=%s fill=%#x\n", getpid(), k ? k : "-", fill);
}

__attribute__((destructor)) static void fini(void) {
  for (int i = 0; i < pool_used; i++)
    if (pool_calls[i] && (pool_dump[i] || substitute))
      fprintf(logf, "COUNT %s %lu\n", pool_label[i], pool_calls[i]);
}
