// mem_pools_explicit: memory pools the program makes, as NCCL makes them during
// communicator init: cudaMemPoolCreate, its attributes (release threshold, reserved
// and used memory), cudaMallocFromPoolAsync with memsets and copies, cudaMemPoolTrimTo,
// cudaMemPoolGetAccess, a device's current pool (cudaDeviceSetMemPool, which
// cudaMallocAsync then allocates from), a pool's maximum size, cudaMemPoolDestroy,
// and the same through the driver API (cuMemPoolCreate, cuMemAllocFromPoolAsync).
// Shareable pools work natively but not in a VM guest (cudaErrorNotSupported):
// stdout only says whether such a call answered success or not-supported.
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <vector>
#include <cuda.h>
#include <cuda_runtime.h>

static const char* base_name(const char* p) { const char* s = strrchr(p, '/'); return s ? s + 1 : p; }
#define CHECK(call) do { cudaError_t e_ = (call); if (e_ != cudaSuccess) { \
    printf("FAIL %s:%d %s\n", base_name(__FILE__), __LINE__, cudaGetErrorName(e_)); exit(1); } } while (0)
#define CHECK_CU(call) do { CUresult r_ = (call); if (r_ != CUDA_SUCCESS) { \
    const char* n_ = nullptr; cuGetErrorName(r_, &n_); \
    printf("FAIL %s:%d %s\n", base_name(__FILE__), __LINE__, n_ ? n_ : "?"); exit(1); } } while (0)

const size_t MiB = 1 << 20;

static unsigned long long u64_attr(cudaMemPool_t pool, cudaMemPoolAttr attr) {
    unsigned long long v = 0;
    CHECK(cudaMemPoolGetAttribute(pool, attr, &v));
    return v;
}

static cudaMemPoolProps device_pool_props(int device) {
    cudaMemPoolProps props;
    memset(&props, 0, sizeof props);
    props.allocType = cudaMemAllocationTypePinned;
    props.handleTypes = cudaMemHandleTypeNone;
    props.location.type = cudaMemLocationTypeDevice;
    props.location.id = device;
    return props;
}

// Fill `bytes` of `p` with `value` on `s` and check a copy of it reads back.
static bool fill_reads_back(void* p, size_t bytes, int value, cudaStream_t s) {
    std::vector<unsigned char> host(bytes, 0);
    CHECK(cudaMemsetAsync(p, value, bytes, s));
    CHECK(cudaMemcpyAsync(host.data(), p, bytes, cudaMemcpyDeviceToHost, s));
    CHECK(cudaStreamSynchronize(s));
    for (size_t i = 0; i < bytes; i++)
        if (host[i] != (unsigned char)value) return false;
    return true;
}

int main() {
    cudaStream_t s;
    CHECK(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking));
    cudaMemPool_t def;
    CHECK(cudaDeviceGetDefaultMemPool(&def, 0));

    // A pool of its own, as NCCL makes one.
    cudaMemPoolProps props = device_pool_props(0);
    cudaMemPool_t pool;
    CHECK(cudaMemPoolCreate(&pool, &props));
    printf("made pool differs from the default pool: %s\n", pool != def ? "yes" : "no");
    printf("made pool's release threshold (default): %llu\n",
           u64_attr(pool, cudaMemPoolAttrReleaseThreshold));
    unsigned long long threshold = ~0ULL;
    CHECK(cudaMemPoolSetAttribute(pool, cudaMemPoolAttrReleaseThreshold, &threshold));
    printf("release threshold reads back as the most: %s\n",
           u64_attr(pool, cudaMemPoolAttrReleaseThreshold) == ~0ULL ? "yes" : "no");
    int reuse = -1;
    CHECK(cudaMemPoolGetAttribute(pool, cudaMemPoolReuseAllowOpportunistic, &reuse));
    printf("opportunistic reuse (default): %d\n", reuse);

    void* p = nullptr;
    CHECK(cudaMallocFromPoolAsync(&p, 4 * MiB, pool, s));
    printf("allocation from the made pool reads back: %s\n",
           fill_reads_back(p, 4 * MiB, 0x5a, s) ? "yes" : "no");
    printf("made pool's used memory is at least 4 MiB: %s\n",
           u64_attr(pool, cudaMemPoolAttrUsedMemCurrent) >= 4 * MiB ? "yes" : "no");
    printf("made pool's reserved memory covers it: %s\n",
           u64_attr(pool, cudaMemPoolAttrReservedMemCurrent) >= 4 * MiB ? "yes" : "no");
    CHECK(cudaFreeAsync(p, s));
    CHECK(cudaStreamSynchronize(s));
    printf("made pool's used memory after the free: %llu\n",
           u64_attr(pool, cudaMemPoolAttrUsedMemCurrent));
    printf("made pool keeps what was freed (threshold at the most): %s\n",
           u64_attr(pool, cudaMemPoolAttrReservedMemCurrent) >= 4 * MiB ? "yes" : "no");
    printf("made pool's used high-water mark is at least 4 MiB: %s\n",
           u64_attr(pool, cudaMemPoolAttrUsedMemHigh) >= 4 * MiB ? "yes" : "no");
    unsigned long long zero = 0;
    CHECK(cudaMemPoolSetAttribute(pool, cudaMemPoolAttrUsedMemHigh, &zero));
    printf("used high-water mark after its reset: %llu\n",
           u64_attr(pool, cudaMemPoolAttrUsedMemHigh));
    CHECK(cudaMemPoolTrimTo(pool, 0));
    printf("made pool's reserved memory after a trim: %llu\n",
           u64_attr(pool, cudaMemPoolAttrReservedMemCurrent));

    cudaMemLocation here;
    here.type = cudaMemLocationTypeDevice;
    here.id = 0;
    cudaMemAccessFlags flags = cudaMemAccessFlagsProtNone;
    CHECK(cudaMemPoolGetAccess(&flags, pool, &here));
    printf("device 0's access to the made pool: %d\n", (int)flags);

    // The device's current pool: cudaMallocAsync allocates from it.
    cudaMemPool_t current;
    CHECK(cudaDeviceGetMemPool(&current, 0));
    printf("current pool is the default pool at first: %s\n", current == def ? "yes" : "no");
    CHECK(cudaDeviceSetMemPool(0, pool));
    CHECK(cudaDeviceGetMemPool(&current, 0));
    printf("current pool after cudaDeviceSetMemPool: %s\n", current == pool ? "made" : "other");
    void* q = nullptr;
    CHECK(cudaMallocAsync(&q, 2 * MiB, s));
    printf("cudaMallocAsync takes from the current pool: %s\n",
           u64_attr(pool, cudaMemPoolAttrUsedMemCurrent) >= 2 * MiB ? "yes" : "no");
    printf("that allocation reads back: %s\n", fill_reads_back(q, 2 * MiB, 0x33, s) ? "yes" : "no");
    CHECK(cudaFreeAsync(q, s));
    CHECK(cudaDeviceSetMemPool(0, def));
    CHECK(cudaDeviceGetMemPool(&current, 0));
    printf("current pool back to the default pool: %s\n", current == def ? "yes" : "no");

    // A pool with a maximum size refuses to grow past it.
    cudaMemPoolProps small = device_pool_props(0);
    small.maxSize = 2 * MiB;
    cudaMemPool_t capped;
    CHECK(cudaMemPoolCreate(&capped, &small));
    void* big = nullptr;
    cudaError_t e = cudaMallocFromPoolAsync(&big, 64 * MiB, capped, s);
    printf("64 MiB from a pool of at most 2 MiB: %s\n", cudaGetErrorName(e));
    cudaGetLastError();
    void* fits = nullptr;
    CHECK(cudaMallocFromPoolAsync(&fits, MiB, capped, s));
    CHECK(cudaFreeAsync(fits, s));
    CHECK(cudaStreamSynchronize(s));
    CHECK(cudaMemPoolDestroy(capped));

    // Bad arguments.
    cudaMemPoolProps elsewhere = device_pool_props(4096);
    cudaMemPool_t none;
    e = cudaMemPoolCreate(&none, &elsewhere);
    printf("a pool on a missing device fails: %s\n", e != cudaSuccess ? "yes" : "no");
    cudaGetLastError();
    e = cudaMemPoolCreate(&none, nullptr);
    printf("a pool without properties: %s\n", cudaGetErrorName(e));
    cudaGetLastError();
    void* huge = nullptr;
    e = cudaMallocFromPoolAsync(&huge, (size_t)1 << 60, pool, s);
    printf("an absurd allocation from the made pool: %s\n", cudaGetErrorName(e));
    cudaGetLastError();

    // Shareable pools: natively possible, refused in a VM guest.
    cudaMemPoolProps shared = device_pool_props(0);
    shared.handleTypes = cudaMemHandleTypePosixFileDescriptor;
    cudaMemPool_t shareable;
    e = cudaMemPoolCreate(&shareable, &shared);
    printf("a shareable pool answered success or not-supported: %s\n",
           e == cudaSuccess || e == cudaErrorNotSupported ? "yes" : "no");
    if (e == cudaSuccess) CHECK(cudaMemPoolDestroy(shareable));
    cudaGetLastError();

    CHECK(cudaMemPoolDestroy(pool));
    e = cudaMemPoolDestroy(def);
    printf("destroying a default pool: %s\n", cudaGetErrorName(e));
    cudaGetLastError();

    // The driver API, as the static runtime (NCCL in torch) reaches it.
    CUmemPoolProps dprops;
    memset(&dprops, 0, sizeof dprops);
    dprops.allocType = CU_MEM_ALLOCATION_TYPE_PINNED;
    dprops.handleTypes = CU_MEM_HANDLE_TYPE_NONE;
    dprops.location.type = CU_MEM_LOCATION_TYPE_DEVICE;
    dprops.location.id = 0;
    CUmemoryPool dpool;
    CHECK_CU(cuMemPoolCreate(&dpool, &dprops));
    cuuint64_t dthreshold = 8 * MiB;
    CHECK_CU(cuMemPoolSetAttribute(dpool, CU_MEMPOOL_ATTR_RELEASE_THRESHOLD, &dthreshold));
    cuuint64_t dvalue = 0;
    CHECK_CU(cuMemPoolGetAttribute(dpool, CU_MEMPOOL_ATTR_RELEASE_THRESHOLD, &dvalue));
    printf("driver: release threshold reads back: %s\n", dvalue == 8 * MiB ? "yes" : "no");
    CUdeviceptr dp = 0;
    CHECK_CU(cuMemAllocFromPoolAsync(&dp, MiB, dpool, (CUstream)s));
    printf("driver: allocation from the pool reads back: %s\n",
           fill_reads_back((void*)dp, MiB, 0x7e, s) ? "yes" : "no");
    CHECK_CU(cuMemPoolGetAttribute(dpool, CU_MEMPOOL_ATTR_USED_MEM_CURRENT, &dvalue));
    printf("driver: used memory is at least 1 MiB: %s\n", dvalue >= MiB ? "yes" : "no");
    CUmemLocation dhere;
    dhere.type = CU_MEM_LOCATION_TYPE_DEVICE;
    dhere.id = 0;
    CUmemAccess_flags dflags = CU_MEM_ACCESS_FLAGS_PROT_NONE;
    CHECK_CU(cuMemPoolGetAccess(&dflags, dpool, &dhere));
    printf("driver: device 0's access: %d\n", (int)dflags);
    CHECK_CU(cuDeviceSetMemPool(0, dpool));
    CUmemoryPool dcurrent;
    CHECK_CU(cuDeviceGetMemPool(&dcurrent, 0));
    printf("driver: current pool is the made pool: %s\n", dcurrent == dpool ? "yes" : "no");
    CUmemoryPool ddefault;
    CHECK_CU(cuDeviceGetDefaultMemPool(&ddefault, 0));
    CHECK_CU(cuDeviceSetMemPool(0, ddefault));
    CHECK_CU(cuMemFreeAsync(dp, (CUstream)s));
    CHECK(cudaStreamSynchronize(s));
    CHECK_CU(cuMemPoolTrimTo(dpool, 0));
    CHECK_CU(cuMemPoolGetAttribute(dpool, CU_MEMPOOL_ATTR_RESERVED_MEM_CURRENT, &dvalue));
    printf("driver: reserved memory after a trim: %llu\n", (unsigned long long)dvalue);
    CHECK_CU(cuMemPoolDestroy(dpool));

    CHECK(cudaStreamDestroy(s));
    printf("mem_pools_explicit done\n");
    return 0;
}
