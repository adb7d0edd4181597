/* vmm_access: cuMemGetAccess over mapped memory (none before cuMemSetAccess, then
   what was set, none again once unmapped and mapped again), its checks (memory not
   mapped, a host location), and cuMemMapArrayAsync, which no array of vmcuda's
   (none is sparse) can take. Prints one line per group. Driver API only. */
#include <stdio.h>
#include <string.h>

typedef unsigned long long CUdeviceptr;
typedef unsigned long long CUmemGenericAllocationHandle;
struct prop {
    int type, handle_types, location_type, location_id;
    void* win32;
    unsigned char compression, rdma;
    unsigned short usage;
    unsigned char reserved[4];
};
struct location {
    int type, id;
};
struct access {
    struct location location;
    int flags;
};
int cuInit(unsigned);
int cuDeviceGet(int*, int);
int cuDevicePrimaryCtxRetain(void**, int);
int cuCtxSetCurrent(void*);
int cuMemGetAllocationGranularity(size_t*, const struct prop*, int);
int cuMemCreate(CUmemGenericAllocationHandle*, size_t, const struct prop*, unsigned long long);
int cuMemAddressReserve(CUdeviceptr*, size_t, size_t, CUdeviceptr, unsigned long long);
int cuMemMap(CUdeviceptr, size_t, size_t, CUmemGenericAllocationHandle, unsigned long long);
int cuMemUnmap(CUdeviceptr, size_t);
int cuMemSetAccess(CUdeviceptr, size_t, const struct access*, size_t);
int cuMemGetAccess(unsigned long long*, const struct location*, CUdeviceptr);
int cuMemMapArrayAsync(void*, unsigned int, void*);
int cuMemMapArrayAsync_ptsz(void*, unsigned int, void*);

int main(void) {
    int dev = 0;
    void* ctx = 0;
    struct prop p;
    memset(&p, 0, sizeof p);
    p.type = 1;          /* pinned */
    p.location_type = 1; /* device */
    size_t g = 0;
    CUmemGenericAllocationHandle h = 0;
    CUdeviceptr at = 0;
    int setup = cuInit(0) | cuDeviceGet(&dev, 0) | cuDevicePrimaryCtxRetain(&ctx, dev) |
                cuCtxSetCurrent(ctx) | cuMemGetAllocationGranularity(&g, &p, 0) |
                cuMemCreate(&h, g, &p, 0) | cuMemAddressReserve(&at, 2 * g, 0, 0, 0) |
                cuMemMap(at, g, 0, h, 0);
    printf("setup %d\n", setup);

    struct location here = {1, 0};
    unsigned long long before = 9, after = 9, read_only = 9, again = 9;
    int q0 = cuMemGetAccess(&before, &here, at);
    struct access rw = {{1, 0}, 3}, ro = {{1, 0}, 1};
    int q1 = cuMemSetAccess(at, g, &rw, 1) | cuMemGetAccess(&after, &here, at + g - 1);
    int q2 = cuMemSetAccess(at, g, &ro, 1) | cuMemGetAccess(&read_only, &here, at + 8);
    int q3 = cuMemUnmap(at, g) | cuMemMap(at, g, 0, h, 0) | cuMemGetAccess(&again, &here, at);
    printf("access: none %d %llu, read-write %d %llu, read-only %d %llu, mapped again %d %llu\n",
           q0, before, q1, after, q2, read_only, q3, again);

    unsigned long long flags = 0;
    struct location host = {2, 0};
    int unmapped = cuMemGetAccess(&flags, &here, at + g);
    int host_location = cuMemGetAccess(&flags, &host, at);
    int null_out = cuMemGetAccess(0, &here, at);
    printf("checks: unmapped %d, host %d, null %d\n", unmapped, host_location, null_out);

    char info[96];
    memset(info, 0, sizeof info);
    int empty = cuMemMapArrayAsync(0, 0, 0);
    int one = cuMemMapArrayAsync(info, 1, 0);
    int ptsz = cuMemMapArrayAsync_ptsz(info, 1, 0);
    printf("map array: empty %d, one %d, ptsz %d\n", empty, one, ptsz);
    return 0;
}
