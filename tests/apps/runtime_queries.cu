// runtime_queries: runtime calls that answer questions about kernels, pools and
// formats: cudaFuncGetParamInfo, cudaFuncGetName, cudaOccupancyMaxActiveClusters,
// cudaOccupancyMaxPotentialClusterSize, cudaCreateChannelDesc, shared memory bank
// configuration, and the CUDA 13 pool calls that take a location
// (cudaMemGetDefaultMemPool, cudaMemGetMemPool, cudaMemSetMemPool).
// Deterministic output.
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <cuda_runtime.h>

static const char* base_name(const char* p) { const char* s = strrchr(p, '/'); return s ? s + 1 : p; }
#define CHECK(call) do { cudaError_t e_ = (call); if (e_ != cudaSuccess) { \
    printf("FAIL %s:%d %s\n", base_name(__FILE__), __LINE__, cudaGetErrorName(e_)); exit(1); } } while (0)

struct Pair { double a; char b; };

__global__ void mixed(int n, double scale, Pair p, float* out, char tag) {
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) out[i] = (float)(scale * p.a) + p.b + tag;
}

__global__ void __cluster_dims__(2, 1, 1) clustered(float* out) {
    out[blockIdx.x * blockDim.x + threadIdx.x] = 1.0f;
}

int main() {
    for (size_t i = 0; i < 5; i++) {
        size_t offset = 0, size = 0;
        CHECK(cudaFuncGetParamInfo((const void*)mixed, i, &offset, &size));
        printf("mixed param %zu: offset %zu size %zu\n", i, offset, size);
    }
    size_t offset = 0, size = 0;
    cudaError_t past = cudaFuncGetParamInfo((const void*)mixed, 5, &offset, &size);
    cudaGetLastError();
    printf("param 5: %s\n", cudaGetErrorName(past));
    const char* name = nullptr;
    CHECK(cudaFuncGetName(&name, (const void*)mixed));
    printf("name: %s\n", name);

    cudaLaunchConfig_t config = {};
    config.gridDim = dim3(64);
    config.blockDim = dim3(128);
    int clusters = -1;
    CHECK(cudaOccupancyMaxActiveClusters(&clusters, (const void*)clustered, &config));
    printf("clusters of 2 blocks of 128 that fit at once: %s\n", clusters > 0 ? "some" : "none");
    int potential = -1;
    CHECK(cudaOccupancyMaxPotentialClusterSize(&potential, (const void*)mixed, &config));
    printf("largest cluster of blocks of 128: %d\n", potential);

    cudaChannelFormatDesc d = cudaCreateChannelDesc(32, 0, 0, 0, cudaChannelFormatKindFloat);
    printf("channel: %d %d %d %d kind %d\n", d.x, d.y, d.z, d.w, (int)d.f);
    d = cudaCreateChannelDesc<uchar4>();
    printf("uchar4: %d %d %d %d kind %d\n", d.x, d.y, d.z, d.w, (int)d.f);

    cudaSharedMemConfig bank;
    CHECK(cudaDeviceGetSharedMemConfig(&bank));
    CHECK(cudaDeviceSetSharedMemConfig(cudaSharedMemBankSizeEightByte));
    CHECK(cudaFuncSetSharedMemConfig((const void*)mixed, cudaSharedMemBankSizeDefault));
    printf("bank config %d\n", (int)bank);

    cudaMemLocation here = {cudaMemLocationTypeDevice, 0};
    cudaMemPool_t by_location, by_device, current;
    CHECK(cudaMemGetDefaultMemPool(&by_location, &here, cudaMemAllocationTypePinned));
    CHECK(cudaDeviceGetDefaultMemPool(&by_device, 0));
    printf("default pool by location is the device's: %d\n", by_location == by_device);
    cudaMemPoolProps props = {};
    props.allocType = cudaMemAllocationTypePinned;
    props.location = here;
    cudaMemPool_t mine;
    CHECK(cudaMemPoolCreate(&mine, &props));
    CHECK(cudaMemSetMemPool(&here, cudaMemAllocationTypePinned, mine));
    CHECK(cudaMemGetMemPool(&current, &here, cudaMemAllocationTypePinned));
    printf("current pool is the one set: %d\n", current == mine);
    CHECK(cudaMemSetMemPool(&here, cudaMemAllocationTypePinned, by_device));
    CHECK(cudaMemPoolDestroy(mine));

    // The driver's export tables through the runtime (what tools and libraries ask
    // for): function introspection is 99 words long, its size word first.
    const void* table = nullptr;
    cudaUUID_t introspection = {{0x6e, 0x16, 0x3f, (char)0xbe, (char)0xb9, 0x58, 0x44, 0x4d,
                                 (char)0x83, 0x5c, (char)0xe1, (char)0x82, (char)0xaf, (char)0xf1,
                                 (char)0x99, 0x1e}};
    CHECK(cudaGetExportTable(&table, &introspection));
    printf("export table through the runtime: size word %zu\n", table ? *(const size_t*)table : 0);

    float* out;
    CHECK(cudaMalloc(&out, 64 * sizeof(float)));
    Pair p = {2.0, 3};
    mixed<<<1, 64>>>(64, 1.5, p, out, 1);
    CHECK(cudaGetLastError());
    float h[64];
    CHECK(cudaMemcpy(h, out, sizeof h, cudaMemcpyDeviceToHost));
    printf("mixed out[0]=%.1f\n", h[0]);
    CHECK(cudaFree(out));
    printf("done\n");
    return 0;
}
