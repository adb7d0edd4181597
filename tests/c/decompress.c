/* decompress: cuMemBatchDecompressAsync (and _ptsz) through the bridge: the guest's
   checks (an empty batch, flags, nonzero padding, which errorIndex names), the host's
   (memory outside the program's), and a well-formed batch reaching the host, whose
   double has no decompression engine (CUDA_ERROR_NOT_SUPPORTED, 801, errorIndex
   SIZE_MAX), as a GPU without one. Prints one line. Driver API only. */
#include <stdint.h>
#include <stdio.h>
#include <string.h>

typedef unsigned long long CUdeviceptr;
typedef struct {
    size_t srcNumBytes, dstNumBytes;
    unsigned* dstActBytes;
    const void* src;
    void* dst;
    int algo;
    unsigned char padding[20];
} Params;

int cuInit(unsigned);
int cuDeviceGet(int*, int);
int cuDevicePrimaryCtxRetain(void**, int);
int cuCtxSetCurrent(void*);
int cuMemAlloc_v2(CUdeviceptr*, size_t);
int cuMemBatchDecompressAsync(Params*, size_t, unsigned, size_t*, void*);
int cuMemBatchDecompressAsync_ptsz(Params*, size_t, unsigned, size_t*, void*);

int main(void) {
    int dev = 0;
    void* ctx = 0;
    CUdeviceptr d = 0;
    int setup = cuInit(0) | cuDeviceGet(&dev, 0) | cuDevicePrimaryCtxRetain(&ctx, dev) |
                cuCtxSetCurrent(ctx) | cuMemAlloc_v2(&d, 1 << 16);
    Params p[2];
    memset(p, 0, sizeof p);
    for (int i = 0; i < 2; i++) {
        p[i].srcNumBytes = 1024;
        p[i].dstNumBytes = 4096;
        p[i].src = (void*)(d + 8192 * i);
        p[i].dst = (void*)(d + 16384 + 8192 * i);
        p[i].dstActBytes = (unsigned*)(d + 64 + 4 * i);
        p[i].algo = 1; /* deflate */
    }
    size_t index = 7;
    int ok = cuMemBatchDecompressAsync(p, 2, 0, &index, 0);
    size_t ok_index = index;
    int ptsz = cuMemBatchDecompressAsync_ptsz(p, 2, 0, 0, 0);
    int empty = cuMemBatchDecompressAsync(p, 0, 0, &index, 0);
    int flags = cuMemBatchDecompressAsync(p, 2, 1, &index, 0);
    p[1].padding[3] = 1;
    index = 7;
    int padding = cuMemBatchDecompressAsync(p, 2, 0, &index, 0);
    size_t padding_index = index;
    p[1].padding[3] = 0;
    p[1].dst = (void*)0xdead0000ull;
    int outside = cuMemBatchDecompressAsync(p, 2, 0, &index, 0);
    printf("setup %d, batch %d index %s, ptsz %d, empty %d, flags %d, padding %d index %zu, "
           "outside %d\n",
           setup, ok, ok_index == SIZE_MAX ? "none" : "SET", ptsz, empty, flags, padding,
           padding_index, outside);
    return 0;
}
