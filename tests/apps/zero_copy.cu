// zero_copy: kernels reading and writing pinned host memory directly, with no
// cudaMemcpy: cudaHostAlloc(Mapped) through cudaHostGetDevicePointer, cudaMallocHost
// memory used by its host address (UVA), and malloc'd memory after cudaHostRegister.
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <cuda_runtime.h>

static const char* base_name(const char* p) { const char* s = strrchr(p, '/'); return s ? s + 1 : p; }
#define CHECK(call) do { cudaError_t e_ = (call); if (e_ != cudaSuccess) { \
    printf("FAIL %s:%d %s\n", base_name(__FILE__), __LINE__, cudaGetErrorName(e_)); exit(1); } } while (0)

__global__ void fill(int* out, int n, int mul) {
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) out[i] = i * mul;
}

__global__ void scale_in_place(float* x, int n, float by) {
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) x[i] *= by;
}

__global__ void gather(const int* in, int* out, int n) {
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) out[i] = in[n - 1 - i] + 1;
}

static long long sum(const int* v, int n) { long long s = 0; for (int i = 0; i < n; i++) s += v[i]; return s; }

int main() {
    const int n = 1 << 16;

    // 1. Mapped pinned memory written by a kernel through its device pointer.
    int* mapped;
    CHECK(cudaHostAlloc(&mapped, n * sizeof(int), cudaHostAllocMapped));
    memset(mapped, 0, n * sizeof(int));
    int* mapped_dev;
    CHECK(cudaHostGetDevicePointer((void**)&mapped_dev, mapped, 0));
    fill<<<(n + 255) / 256, 256>>>(mapped_dev, n, 3);
    CHECK(cudaDeviceSynchronize());
    printf("mapped: %d %d %d sum=%lld\n", mapped[0], mapped[1], mapped[n - 1], sum(mapped, n));

    // 2. cudaMallocHost memory passed to a kernel by its host address, both ways.
    int* pinned_in;
    int* pinned_out;
    CHECK(cudaMallocHost(&pinned_in, n * sizeof(int)));
    CHECK(cudaMallocHost(&pinned_out, n * sizeof(int)));
    for (int i = 0; i < n; i++) pinned_in[i] = 2 * i;
    gather<<<(n + 255) / 256, 256>>>(pinned_in, pinned_out, n);
    CHECK(cudaDeviceSynchronize());
    printf("pinned: %d %d %d sum=%lld\n", pinned_out[0], pinned_out[1], pinned_out[n - 1], sum(pinned_out, n));

    // 3. Registered malloc'd memory, scaled in place by a kernel.
    float* reg = (float*)malloc(n * sizeof(float) + 100);
    float* x = (float*)((char*)reg + 100);  // deliberately not page aligned
    for (int i = 0; i < n; i++) x[i] = 0.5f * i;
    CHECK(cudaHostRegister(x, n * sizeof(float), cudaHostRegisterMapped));
    float* x_dev;
    CHECK(cudaHostGetDevicePointer((void**)&x_dev, x, 0));
    scale_in_place<<<(n + 255) / 256, 256>>>(x_dev, n, 4.0f);
    CHECK(cudaDeviceSynchronize());
    double s = 0;
    for (int i = 0; i < n; i++) s += x[i];
    printf("registered: %.1f %.1f %.1f sum=%.1f\n", x[0], x[1], x[n - 1], s);
    CHECK(cudaHostUnregister(x));
    // Still the program's memory, with the kernel's results, after unregistering.
    printf("after unregister: %.1f\n", x[n - 1]);
    free(reg);

    CHECK(cudaFreeHost(mapped));
    CHECK(cudaFreeHost(pinned_in));
    CHECK(cudaFreeHost(pinned_out));
    printf("done\n");
    return 0;
}
