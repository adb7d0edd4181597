/* stream_mem_ops: the stream memory operations NCCL and others call through the
   driver: cuStreamWriteValue64 to device and pinned memory, cuStreamWaitValue32/64
   on values already there (each comparison), their checks (alignment, flags), the
   legacy and per-thread names and cuGetProcAddress. Prints one line per group.
   Driver API only. */
#include <stdio.h>
#include <string.h>

typedef unsigned long long CUdeviceptr;
typedef void* CUcontext;
typedef void* CUstream;

enum { GEQ = 0, EQ = 1, AND = 2, NOR = 3, FLUSH = 1 << 30 };

int cuInit(unsigned int);
int cuDeviceGet(int*, int);
int cuDevicePrimaryCtxRetain(CUcontext*, int);
int cuCtxSetCurrent(CUcontext);
int cuMemAlloc_v2(CUdeviceptr*, size_t);
int cuMemHostAlloc(void**, size_t, unsigned int);
int cuMemHostGetDevicePointer_v2(CUdeviceptr*, void*, unsigned int);
int cuMemcpyDtoH_v2(void*, CUdeviceptr, size_t);
int cuStreamCreate(CUstream*, unsigned int);
int cuStreamSynchronize(CUstream);
int cuStreamWriteValue32_v2(CUstream, CUdeviceptr, unsigned int, unsigned int);
int cuStreamWriteValue64_v2(CUstream, CUdeviceptr, unsigned long long, unsigned int);
int cuStreamWaitValue32_v2(CUstream, CUdeviceptr, unsigned int, unsigned int);
int cuStreamWaitValue64_v2(CUstream, CUdeviceptr, unsigned long long, unsigned int);
int cuStreamWriteValue64(CUstream, CUdeviceptr, unsigned long long, unsigned int);
int cuStreamWaitValue32(CUstream, CUdeviceptr, unsigned int, unsigned int);
int cuStreamWaitValue64_ptsz(CUstream, CUdeviceptr, unsigned long long, unsigned int);
int cuGetProcAddress_v2(const char*, void**, int, unsigned long long, int*);

int main(void) {
    int dev = 0;
    CUcontext ctx = 0;
    CUdeviceptr d = 0, mapped = 0;
    CUstream s = 0;
    void* pinned = 0;
    int setup = cuInit(0) | cuDeviceGet(&dev, 0) | cuDevicePrimaryCtxRetain(&ctx, dev) |
                cuCtxSetCurrent(ctx) | cuMemAlloc_v2(&d, 4096) | cuStreamCreate(&s, 1) |
                cuMemHostAlloc(&pinned, 4096, 2 /* DEVICEMAP */) |
                cuMemHostGetDevicePointer_v2(&mapped, pinned, 0);
    printf("setup %d\n", setup);

    /* Writes, to device memory and to pinned host memory. */
    unsigned long long big = 0x1122334455667788ull;
    int w = cuStreamWriteValue64_v2(s, d, big, 0) | cuStreamWriteValue32_v2(s, d + 8, 7, 0) |
            cuStreamWriteValue64_v2(s, mapped + 16, big, 1 /* NO_MEMORY_BARRIER */) |
            cuStreamSynchronize(s);
    unsigned long long back = 0;
    cuMemcpyDtoH_v2(&back, d, 8);
    printf("writes %d device %s pinned %s\n", w, back == big ? "ok" : "WRONG",
           ((unsigned long long*)pinned)[2] == big ? "ok" : "WRONG");

    /* Waits on values already there: each comparison, 32 and 64 bits. */
    int waits = cuStreamWaitValue32_v2(s, d + 8, 7, EQ) | cuStreamWaitValue32_v2(s, d + 8, 5, GEQ) |
                cuStreamWaitValue32_v2(s, d + 8, 4, AND) | cuStreamWaitValue32_v2(s, d + 8, 8, NOR) |
                cuStreamWaitValue64_v2(s, d, big, EQ | FLUSH) |
                cuStreamWaitValue64_v2(s, mapped + 16, big, GEQ) | cuStreamSynchronize(s);
    printf("waits %d\n", waits);

    /* Checks: misaligned words, unknown comparisons, bad write flags. */
    int misaligned32 = cuStreamWaitValue32_v2(s, d + 2, 0, GEQ);
    int misaligned64 = cuStreamWriteValue64_v2(s, d + 4, 0, 0);
    int bad_cmp = cuStreamWaitValue32_v2(s, d, 0, 4);
    int bad_write = cuStreamWriteValue64_v2(s, d, 0, 2);
    cuStreamSynchronize(s);
    printf("misaligned %d %d, bad comparison %d, bad write flags %d\n", misaligned32, misaligned64,
           bad_cmp, bad_write);

    /* The legacy and per-thread names, and cuGetProcAddress. */
    int legacy = cuStreamWriteValue64(s, d + 24, 3, 0) | cuStreamWaitValue32(s, d + 24, 3, EQ) |
                 cuStreamWaitValue64_ptsz(s, d + 24, 3, EQ) | cuStreamSynchronize(s);
    void* f = 0;
    int found = 0;
    int proc = cuGetProcAddress_v2("cuStreamWaitValue64", &f, 12000, 0, &found);
    printf("legacy %d, proc address %d %s\n", legacy, proc, f && found == 0 ? "found" : "missing");
    return 0;
}
