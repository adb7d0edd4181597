/* managed_pages: managed memory's page model, seen from a program. Device writes are
   copies and memsets (the host-memory test executor runs those, not kernels), so every
   check below is about where bytes are and when they move:
   - fresh pages read as zeros; CPU writes reach the device before device work;
   - device writes reach the CPU on its first touch after a synchronization;
   - prefetches both ways, advice and range attributes, pointer attributes;
   - explicit copy kinds that name managed memory as host memory;
   - four threads, each with its own stream and allocation, at once;
   - the driver API's allocation and attributes;
   - the quota: managed memory counts, and an allocation over it fails.
   Prints one line per check ("ok ..." or "FAIL ...") and exits non-zero on a failure.
   QUOTA_MIB in the environment: the quota in MiB the daemon was given (unset: none). */
#include <pthread.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <fcntl.h>
#include <unistd.h>

typedef void* cudaStream_t;
struct cudaMemLocation { int type; int id; };
struct cudaPointerAttributes { int type; int device; void* devicePointer; void* hostPointer; long reserved[8]; };

int cudaMallocManaged(void**, size_t, unsigned);
int cudaMalloc(void**, size_t);
int cudaFree(void*);
int cudaMemcpy(void*, const void*, size_t, int);
int cudaMemset(void*, int, size_t);
int cudaMemsetAsync(void*, int, size_t, cudaStream_t);
int cudaMemcpyAsync(void*, const void*, size_t, int, cudaStream_t);
int cudaDeviceSynchronize(void);
int cudaStreamCreate(cudaStream_t*);
int cudaStreamSynchronize(cudaStream_t);
int cudaStreamDestroy(cudaStream_t);
int cudaStreamAttachMemAsync(cudaStream_t, void*, size_t, unsigned);
int cudaMemPrefetchAsync(const void*, size_t, struct cudaMemLocation, unsigned, cudaStream_t);
int cudaMemAdvise(const void*, size_t, int, struct cudaMemLocation);
int cudaMemRangeGetAttribute(void*, size_t, int, const void*, size_t);
int cudaPointerGetAttributes(struct cudaPointerAttributes*, const void*);
int cudaDeviceGetAttribute(int*, int, int);
int cudaMemGetInfo(size_t*, size_t*);
int cudaGetLastError(void);
typedef unsigned long long CUdeviceptr;
int cuInit(unsigned);
int cuMemAllocManaged(CUdeviceptr*, size_t, unsigned);
int cuPointerGetAttribute(void*, int, CUdeviceptr);
int cuMemFree_v2(CUdeviceptr);

static int failures;
static void check(int ok, const char* what) {
    printf("%s %s\n", ok ? "ok" : "FAIL", what);
    if (!ok) failures++;
}
#define CALL(x) do { int e_ = (x); if (e_) { printf("FAIL %s = %d\n", #x, e_); failures++; } } while (0)

static const struct cudaMemLocation cpu = {2, 0}, dev0 = {1, 0};
enum { H2H = 0, H2D = 1, D2H = 2, D2D = 3, DEFAULT = 4 };

static int all_bytes(const unsigned char* p, size_t n, unsigned char v) {
    for (size_t i = 0; i < n; i++) if (p[i] != v) return 0;
    return 1;
}

struct worker { int id; int ok; };

static void* work(void* arg) {
    struct worker* w = arg;
    size_t n = 1 << 20;
    cudaStream_t s;
    unsigned char* m;
    w->ok = !cudaStreamCreate(&s) && !cudaMallocManaged((void**)&m, n, 1)
        && !cudaStreamAttachMemAsync(s, m, 0, 4);
    for (int round = 0; w->ok && round < 20; round++) {
        unsigned char mine = (unsigned char)(w->id * 40 + round);
        memset(m, mine, n / 2);                               /* CPU half */
        w->ok &= !cudaMemsetAsync(m + n / 2, mine + 1, n / 2, s); /* device half */
        w->ok &= !cudaStreamSynchronize(s);
        w->ok &= all_bytes(m, n / 2, mine) && all_bytes(m + n / 2, n / 2, mine + 1);
    }
    cudaFree(m);
    cudaStreamDestroy(s);
    return NULL;
}

int main(void) {
    const char* quota = getenv("QUOTA_MIB");
    size_t quota_mib = quota ? strtoul(quota, NULL, 10) : 0;
    int v = -1;
    CALL(cudaDeviceGetAttribute(&v, 83, 0));
    check(v == 1, "managed memory is supported");
    CALL(cudaDeviceGetAttribute(&v, 89, 0));
    check(v == 0, "concurrent managed access is not (the guest's model)");

    size_t n = 8 << 20;
    unsigned char* m = NULL;
    CALL(cudaMallocManaged((void**)&m, n, 1));
    check(m && ((uintptr_t)m & 4095) == 0, "managed allocation is page-aligned");
    check(all_bytes(m, n, 0), "fresh managed memory reads as zeros");

    struct cudaPointerAttributes a;
    CALL(cudaPointerGetAttributes(&a, m + 100));
    check(a.type == 3 && a.devicePointer == m + 100 && a.hostPointer == m + 100,
          "pointer attributes say managed, one address for both");

    for (size_t i = 0; i < n; i++) m[i] = (unsigned char)(i * 7);
    unsigned char* d = NULL;
    unsigned char* back = malloc(n);
    CALL(cudaMalloc((void**)&d, n));
    CALL(cudaMemcpy(d, m, n, DEFAULT));        /* device work: CPU writes go first */
    CALL(cudaMemcpy(back, d, n, D2H));
    int same = 1;
    for (size_t i = 0; i < n; i++) same &= back[i] == (unsigned char)(i * 7);
    check(same, "CPU writes reach the device before device work");

    CALL(cudaMemset(m + (1 << 20), 0x5a, 4096)); /* a device write */
    CALL(cudaDeviceSynchronize());
    check(all_bytes(m + (1 << 20), 4096, 0x5a), "a device write is seen on the CPU's next touch");
    check(m[(1 << 20) + 4096] == (unsigned char)(((1 << 20) + 4096) * 7), "the bytes beside it are intact");

    memset(back, 0x33, 4096);
    CALL(cudaMemcpy(m + 12345, back, 4096, H2D)); /* explicit kind, managed destination */
    CALL(cudaMemcpy(back, m + 12345, 4096, H2H)); /* explicit kind, managed source */
    check(all_bytes(back, 4096, 0x33) && all_bytes(m + 12345, 4096, 0x33),
          "copies whose kind calls managed memory host memory still land");

    CALL(cudaMemPrefetchAsync(m, n, dev0, 0, NULL));
    int last = -5;
    CALL(cudaMemRangeGetAttribute(&last, 4, 4, m, n));
    check(last == 0, "last prefetch location: device 0");
    CALL(cudaMemset(m, 0x11, 4096));
    CALL(cudaMemPrefetchAsync(m, 4096, cpu, 0, NULL));
    CALL(cudaMemRangeGetAttribute(&last, 4, 4, m, 4096));
    check(last == -1 && all_bytes(m, 4096, 0x11), "prefetch to the CPU brings the device's bytes");
    CALL(cudaMemAdvise(m, n, 1, cpu));
    int rm = 0;
    CALL(cudaMemRangeGetAttribute(&rm, 4, 1, m, n));
    check(rm == 1, "read-mostly advice is answered back");
    int bad = cudaMemAdvise(back, 4096, 1, cpu);
    cudaGetLastError();
    check(bad == 1, "advice on memory that is not managed is cudaErrorInvalidValue");

    /* read(2) into a fresh allocation: the kernel writes it, no fault is taken. */
    char path[] = "/tmp/managed_pagesXXXXXX";
    int fd = mkstemp(path);
    memset(back, 0x6b, 100000);
    int wrote = fd >= 0 && write(fd, back, 100000) == 100000;
    unsigned char* filled = NULL;
    CALL(cudaMallocManaged((void**)&filled, 100000, 1));
    int got = wrote && lseek(fd, 0, SEEK_SET) == 0 ? (int)read(fd, filled, 100000) : -1;
    if (fd >= 0) { close(fd); unlink(path); }
    memset(back, 0, 100000);
    CALL(cudaMemcpy(d, filled, 100000, DEFAULT));
    CALL(cudaMemcpy(back, d, 100000, D2H));
    check(got == 100000 && all_bytes(back, 100000, 0x6b), "read(2) into fresh managed memory reaches the device");
    CALL(cudaFree(filled));

    /* Many small allocations (pieces of shared chunks): each its own pages, and all
       of the memory back once they are freed. */
    size_t free0 = 0, free1 = 0, total0 = 0;
    CALL(cudaMemGetInfo(&free0, &total0));
    enum { SMALL = 300 };
    unsigned char* small[SMALL];
    int small_ok = 1;
    for (int i = 0; i < SMALL; i++) {
        CALL(cudaMallocManaged((void**)&small[i], 100 + i, 1));
        small_ok &= small[i] != NULL && ((uintptr_t)small[i] & 4095) == 0;
        memset(small[i], i & 0xff, 100 + i);
    }
    for (int i = 0; i < SMALL; i++) CALL(cudaMemset(small[i] + 50, (i + 1) & 0xff, 50)); /* device writes */
    CALL(cudaDeviceSynchronize());
    for (int i = 0; i < SMALL; i++)
        small_ok &= all_bytes(small[i], 50, i & 0xff) && all_bytes(small[i] + 50, 50, (i + 1) & 0xff)
            && all_bytes(small[i] + 100, i, i & 0xff);
    for (int i = 0; i < SMALL; i += 2) CALL(cudaFree(small[i]));
    for (int i = 1; i < SMALL; i += 2) CALL(cudaFree(small[i]));
    CALL(cudaMemGetInfo(&free1, &total0));
    check(small_ok, "300 small allocations keep their own bytes on both sides");
    check(free1 == free0, "freeing them gives all of their memory back");

    pthread_t t[4];
    struct worker w[4];
    for (int i = 0; i < 4; i++) { w[i].id = i; pthread_create(&t[i], NULL, work, &w[i]); }
    int threads_ok = 1;
    for (int i = 0; i < 4; i++) { pthread_join(t[i], NULL); threads_ok &= w[i].ok; }
    check(threads_ok, "four threads with their own streams and allocations, 20 rounds each");

    CUdeviceptr dm = 0;
    CALL(cuInit(0));
    CALL(cuMemAllocManaged(&dm, 65536, 1));
    unsigned managed = 0;
    CALL(cuPointerGetAttribute(&managed, 8, dm));
    ((volatile unsigned char*)(uintptr_t)dm)[65535] = 9;
    check(managed == 1 && ((unsigned char*)(uintptr_t)dm)[65535] == 9, "driver API: cuMemAllocManaged, IS_MANAGED");
    CALL(cuMemFree_v2(dm));

    if (quota_mib) {
        size_t free_before = 0, free_after = 0, total = 0;
        CALL(cudaMemGetInfo(&free_before, &total));
        unsigned char* q = NULL;
        CALL(cudaMallocManaged((void**)&q, 16 << 20, 1));
        CALL(cudaMemGetInfo(&free_after, &total));
        check(free_before - free_after >= (16 << 20), "managed memory counts against the quota");
        CALL(cudaFree(q));
        int over = cudaMallocManaged((void**)&q, (quota_mib + 1) << 20, 1);
        cudaGetLastError();
        check(over == 2, "managed memory over the quota is cudaErrorMemoryAllocation");
    }

    CALL(cudaFree(m));
    CALL(cudaFree(d));
    printf("%s\n", failures ? "FAILED" : "PASSED");
    return failures ? 1 : 0;
}
