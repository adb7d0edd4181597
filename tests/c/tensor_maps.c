/* tensor_maps: cuTensorMapEncodeIm2col, cuTensorMapEncodeIm2colWide and
   cuTensorMapReplaceAddress through the bridge: their checks in the guest (a rank
   below 3 or above 5, a NULL map) and a well-formed call reaching the host, whose
   driver encodes (the host-memory double answers CUDA_ERROR_NOT_SUPPORTED, 801: it has
   no driver to encode with). Prints one line. Driver API only. */
#include <stdio.h>
#include <string.h>

typedef unsigned long long CUdeviceptr;
typedef struct {
    _Alignas(64) unsigned long long opaque[16];
} CUtensorMap;

int cuInit(unsigned);
int cuDeviceGet(int*, int);
int cuDevicePrimaryCtxRetain(void**, int);
int cuCtxSetCurrent(void*);
int cuMemAlloc_v2(CUdeviceptr*, size_t);
int cuTensorMapEncodeIm2col(CUtensorMap*, int, unsigned, void*, const unsigned long long*,
                            const unsigned long long*, const int*, const int*, unsigned, unsigned,
                            const unsigned*, int, int, int, int);
int cuTensorMapEncodeIm2colWide(CUtensorMap*, int, unsigned, void*, const unsigned long long*,
                                const unsigned long long*, int, int, unsigned, unsigned,
                                const unsigned*, int, int, int, int, int);
int cuTensorMapReplaceAddress(CUtensorMap*, void*);

int main(void) {
    int dev = 0;
    void* ctx = 0;
    CUdeviceptr d = 0;
    int setup = cuInit(0) | cuDeviceGet(&dev, 0) | cuDevicePrimaryCtxRetain(&ctx, dev) |
                cuCtxSetCurrent(ctx) | cuMemAlloc_v2(&d, 1 << 20);
    CUtensorMap map;
    memset(&map, 0, sizeof map);
    unsigned long long dims[4] = {16, 8, 8, 2}, strides[3] = {64, 512, 4096};
    int lower[2] = {0, 0}, upper[2] = {0, 0};
    unsigned elements[4] = {1, 1, 1, 1};
    void* g = (void*)d;
    int rank2 = cuTensorMapEncodeIm2col(&map, 7 /* FLOAT32 */, 2, g, dims, strides, lower, upper, 16,
                                        8, elements, 0, 0, 0, 0);
    int rank6 = cuTensorMapEncodeIm2colWide(&map, 7, 6, g, dims, strides, 0, 0, 16, 8, elements,
                                            0, 0, 0, 0, 0);
    int null_map = cuTensorMapEncodeIm2col(0, 7, 4, g, dims, strides, lower, upper, 16, 8,
                                           elements, 0, 0, 0, 0);
    int im2col = cuTensorMapEncodeIm2col(&map, 7, 4, g, dims, strides, lower, upper, 16, 8,
                                         elements, 0, 0, 0, 0);
    int wide = cuTensorMapEncodeIm2colWide(&map, 7, 4, g, dims, strides, 0, 0, 16, 8, elements, 0,
                                           0, 0, 0, 0);
    int replace = cuTensorMapReplaceAddress(&map, (void*)(d + 4096));
    printf("setup %d, rank 2 %d, rank 6 %d, null map %d, im2col %d, wide %d, replace %d\n", setup,
           rank2, rank6, null_map, im2col, wide, replace);
    return 0;
}
