// occupancy_attrs: cudaFuncGetAttributes on kernels with different resource
// usage, the occupancy calculator (max active blocks, max potential block size,
// available dynamic shared memory), cudaFuncSetCacheConfig and the preferred
// shared memory carveout attribute.
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <cuda_runtime.h>

static const char* base_name(const char* p) { const char* s = strrchr(p, '/'); return s ? s + 1 : p; }
#define CHECK(call) do { cudaError_t e_ = (call); if (e_ != cudaSuccess) { \
    printf("FAIL %s:%d %s\n", base_name(__FILE__), __LINE__, cudaGetErrorName(e_)); exit(1); } } while (0)

__constant__ float c_table[512];

__global__ void k_simple(float* x, int n) {
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) x[i] += 1.0f;
}

__global__ void k_static_smem(float* x) {
    __shared__ float tile[2048];
    tile[threadIdx.x] = x[threadIdx.x];
    __syncthreads();
    x[threadIdx.x] = tile[(threadIdx.x + 1) % blockDim.x] + c_table[threadIdx.x % 512];
}

__global__ void __launch_bounds__(128, 4) k_bounded(double* x, int n) {
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) x[i] = sqrt(x[i]) * 2.0;
}

__global__ void k_local(int* out, int sel) {
    int buf[96];
    for (int i = 0; i < 96; i++) buf[i] = i * sel + threadIdx.x;
    out[threadIdx.x] = buf[(sel + threadIdx.x) % 96];
}

__global__ void k_heavy(double* x, int n) {
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i >= n) return;
    double a0 = x[i], a1 = a0 * 1.1, a2 = a1 * 1.2, a3 = a2 * 1.3, a4 = a3 * 1.4, a5 = a4 * 1.5, a6 = a5 * 1.6;
    double a7 = a6 * 1.7;
    for (int k = 0; k < 32; k++) {
        a0 = a0 * a7 + a1; a1 = a1 * a6 + a2; a2 = a2 * a5 + a3; a3 = a3 * a4 + a0;
        a4 = a4 * a3 + a5; a5 = a5 * a2 + a6; a6 = a6 * a1 + a7; a7 = a7 * a0 + a4;
    }
    x[i] = a0 + a1 + a2 + a3 + a4 + a5 + a6 + a7;
}

static void print_attrs(const char* name, const void* f) {
    cudaFuncAttributes a;
    memset(&a, 0, sizeof(a));
    CHECK(cudaFuncGetAttributes(&a, f));
    printf("%-14s numRegs=%d maxThreadsPerBlock=%d sharedSizeBytes=%zu constSizeBytes=%zu localSizeBytes=%zu "
           "ptxVersion=%d binaryVersion=%d maxDynamicSharedSizeBytes=%d preferredShmemCarveout=%d cacheModeCA=%d\n",
           name, a.numRegs, a.maxThreadsPerBlock, a.sharedSizeBytes, a.constSizeBytes, a.localSizeBytes, a.ptxVersion,
           a.binaryVersion, a.maxDynamicSharedSizeBytes, a.preferredShmemCarveout, a.cacheModeCA);
}

template <typename K>
static void occupancy(const char* name, K kernel) {
    const int sizes[] = {32, 64, 96, 128, 256, 512, 1024};
    printf("%-14s max active blocks/SM:", name);
    for (int bs : sizes) {
        int nb = -1;
        cudaError_t e = cudaOccupancyMaxActiveBlocksPerMultiprocessor(&nb, kernel, bs, 0);
        if (e == cudaSuccess) printf(" %d:%d", bs, nb);
        else printf(" %d:%s", bs, cudaGetErrorName(e));
    }
    printf("\n");
    cudaGetLastError();
    int minGrid = -1, block = -1;
    CHECK(cudaOccupancyMaxPotentialBlockSize(&minGrid, &block, kernel, 0, 0));
    printf("%-14s max potential block size: minGrid=%d block=%d\n", name, minGrid, block);
    CHECK(cudaOccupancyMaxPotentialBlockSize(&minGrid, &block, kernel, 4096, 256));
    printf("%-14s max potential block size (4 KiB smem, limit 256): minGrid=%d block=%d\n", name, minGrid, block);
    size_t dyn = 0;
    cudaError_t e = cudaOccupancyAvailableDynamicSMemPerBlock(&dyn, kernel, 2, 128);
    if (e == cudaSuccess) printf("%-14s available dynamic smem (2 blocks x 128): %zu\n", name, dyn);
    else printf("%-14s available dynamic smem (2 blocks x 128): %s\n", name, cudaGetErrorName(e));
    cudaGetLastError();
    int nbf = -1;
    CHECK(cudaOccupancyMaxActiveBlocksPerMultiprocessorWithFlags(&nbf, kernel, 128, 1024, cudaOccupancyDisableCachingOverride));
    printf("%-14s with flags (128 threads, 1 KiB smem): %d\n", name, nbf);
}

int main() {
    print_attrs("k_simple", (const void*)k_simple);
    print_attrs("k_static_smem", (const void*)k_static_smem);
    print_attrs("k_bounded", (const void*)k_bounded);
    print_attrs("k_local", (const void*)k_local);
    print_attrs("k_heavy", (const void*)k_heavy);

    occupancy("k_simple", k_simple);
    occupancy("k_static_smem", k_static_smem);
    occupancy("k_bounded", k_bounded);
    occupancy("k_heavy", k_heavy);

    printf("cudaFuncSetCacheConfig(PreferShared): %s\n",
           cudaGetErrorName(cudaFuncSetCacheConfig(k_simple, cudaFuncCachePreferShared)));
    printf("cudaFuncSetCacheConfig(PreferL1): %s\n",
           cudaGetErrorName(cudaFuncSetCacheConfig(k_heavy, cudaFuncCachePreferL1)));
    cudaFuncCache cc;
    CHECK(cudaDeviceGetCacheConfig(&cc));
    printf("device cache config: %d\n", (int)cc);
    CHECK(cudaFuncSetAttribute(k_static_smem, cudaFuncAttributePreferredSharedMemoryCarveout, 50));
    print_attrs("k_static_smem", (const void*)k_static_smem);
    CHECK(cudaFuncSetAttribute(k_static_smem, cudaFuncAttributePreferredSharedMemoryCarveout,
                               cudaSharedmemCarveoutMaxL1));
    print_attrs("k_static_smem", (const void*)k_static_smem);
    printf("carveout 101: %s\n",
           cudaGetErrorName(cudaFuncSetAttribute(k_simple, cudaFuncAttributePreferredSharedMemoryCarveout, 101)));
    cudaGetLastError();
    occupancy("k_static_smem", k_static_smem);

    // Launch each kernel once so the attributes are backed by real launches.
    float* xf;
    double* xd;
    int* xi;
    CHECK(cudaMalloc(&xf, 1024 * sizeof(float)));
    CHECK(cudaMalloc(&xd, 1024 * sizeof(double)));
    CHECK(cudaMalloc(&xi, 1024 * sizeof(int)));
    CHECK(cudaMemset(xf, 0, 1024 * sizeof(float)));
    CHECK(cudaMemset(xd, 0, 1024 * sizeof(double)));
    float tbl[512];
    for (int i = 0; i < 512; i++) tbl[i] = (float)i;
    CHECK(cudaMemcpyToSymbol(c_table, tbl, sizeof(tbl)));
    k_simple<<<4, 256>>>(xf, 1024);
    k_static_smem<<<1, 1024>>>(xf);
    k_bounded<<<8, 128>>>(xd, 1024);
    k_local<<<1, 256>>>(xi, 5);
    k_heavy<<<8, 128>>>(xd, 1024);
    CHECK(cudaGetLastError());
    CHECK(cudaDeviceSynchronize());
    float hf[2];
    int hi[2];
    CHECK(cudaMemcpy(hf, xf, sizeof(hf), cudaMemcpyDeviceToHost));
    CHECK(cudaMemcpy(hi, xi + 10, sizeof(hi), cudaMemcpyDeviceToHost));
    printf("results: %.2f %.2f %d %d\n", hf[0], hf[1], hi[0], hi[1]);
    k_bounded<<<1, 256>>>(xd, 1024);
    printf("k_bounded with 256 threads: %s\n", cudaGetErrorName(cudaGetLastError()));
    CHECK(cudaFree(xf));
    CHECK(cudaFree(xd));
    CHECK(cudaFree(xi));
    printf("done\n");
    return 0;
}
