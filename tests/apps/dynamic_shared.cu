// dynamic_shared: extern __shared__ reductions with several dynamic shared memory
// sizes, the 48 KiB default limit, opting in to 100 KiB with cudaFuncSetAttribute,
// and launches asking for more than allowed.
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <vector>
#include <cuda_runtime.h>

static const char* base_name(const char* p) { const char* s = strrchr(p, '/'); return s ? s + 1 : p; }
#define CHECK(call) do { cudaError_t e_ = (call); if (e_ != cudaSuccess) { \
    printf("FAIL %s:%d %s\n", base_name(__FILE__), __LINE__, cudaGetErrorName(e_)); exit(1); } } while (0)

// Block-wide sum; shared buffer holds blockDim.x floats plus `pad` extra floats.
__global__ void reduce(const float* in, float* out, int n, int pad) {
    extern __shared__ float s[];
    float* buf = s + pad;
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    buf[threadIdx.x] = i < n ? in[i] : 0.0f;
    if (threadIdx.x < pad) s[threadIdx.x] = -1.0f;
    __syncthreads();
    for (int st = blockDim.x / 2; st > 0; st >>= 1) {
        if (threadIdx.x < st) buf[threadIdx.x] += buf[threadIdx.x + st];
        __syncthreads();
    }
    if (threadIdx.x == 0) out[blockIdx.x] = buf[0];
}

// Uses `words` ints of dynamic shared memory as a scratch histogram.
__global__ void big_smem(int* out, int words) {
    extern __shared__ int sh[];
    for (int i = threadIdx.x; i < words; i += blockDim.x) sh[i] = i;
    __syncthreads();
    int acc = 0;
    for (int i = threadIdx.x; i < words; i += blockDim.x) acc += sh[words - 1 - i] & 0xff;
    atomicAdd(out, acc);
}

int main() {
    const int n = 65536 + 123;
    std::vector<float> h(n);
    for (int i = 0; i < n; i++) h[i] = (float)((i * 7) % 13) - 5.0f;
    float *din, *dout;
    CHECK(cudaMalloc(&din, n * sizeof(float)));
    CHECK(cudaMalloc(&dout, 4096 * sizeof(float)));
    CHECK(cudaMemcpy(din, h.data(), n * sizeof(float), cudaMemcpyHostToDevice));

    const int blocks_list[] = {32, 64, 128, 256, 512, 1024};
    const int pads[] = {0, 1, 7, 1000};
    for (int bs : blocks_list)
        for (int pad : pads) {
            int grid = (n + bs - 1) / bs;
            size_t shm = (bs + pad) * sizeof(float);
            reduce<<<grid, bs, shm>>>(din, dout, n, pad);
            CHECK(cudaGetLastError());
            std::vector<float> part(grid);
            CHECK(cudaMemcpy(part.data(), dout, grid * sizeof(float), cudaMemcpyDeviceToHost));
            double sum = 0;
            for (float v : part) sum += v;
            printf("reduce block=%4d pad=%4d shmem=%5zu grid=%4d sum=%.1f first=%.1f\n", bs, pad, shm, grid, sum,
                   part[0]);
        }

    int* dcnt;
    int cnt = 0;
    CHECK(cudaMalloc(&dcnt, sizeof(int)));

    cudaFuncAttributes fa;
    CHECK(cudaFuncGetAttributes(&fa, big_smem));
    printf("big_smem maxDynamicSharedSizeBytes(default)=%d\n", fa.maxDynamicSharedSizeBytes);

    // 48 KiB works without opting in.
    CHECK(cudaMemset(dcnt, 0, sizeof(int)));
    big_smem<<<2, 256, 48 * 1024>>>(dcnt, 12 * 1024);
    printf("launch 48 KiB: %s\n", cudaGetErrorName(cudaGetLastError()));
    CHECK(cudaMemcpy(&cnt, dcnt, sizeof(int), cudaMemcpyDeviceToHost));
    printf("  result=%d\n", cnt);

    // 100 KiB without the attribute must fail.
    big_smem<<<2, 256, 100 * 1024>>>(dcnt, 25 * 1024);
    printf("launch 100 KiB without attribute: %s\n", cudaGetErrorName(cudaGetLastError()));
    printf("  cudaGetLastError again: %s\n", cudaGetErrorName(cudaGetLastError()));

    CHECK(cudaFuncSetAttribute(big_smem, cudaFuncAttributeMaxDynamicSharedMemorySize, 100 * 1024));
    CHECK(cudaFuncGetAttributes(&fa, big_smem));
    printf("big_smem maxDynamicSharedSizeBytes(after set)=%d\n", fa.maxDynamicSharedSizeBytes);
    CHECK(cudaMemset(dcnt, 0, sizeof(int)));
    big_smem<<<2, 256, 100 * 1024>>>(dcnt, 25 * 1024);
    printf("launch 100 KiB with attribute: %s\n", cudaGetErrorName(cudaGetLastError()));
    CHECK(cudaDeviceSynchronize());
    CHECK(cudaMemcpy(&cnt, dcnt, sizeof(int), cudaMemcpyDeviceToHost));
    printf("  result=%d\n", cnt);

    // Still too much: above the attribute, and above the device opt-in maximum.
    big_smem<<<2, 256, 120 * 1024>>>(dcnt, 30 * 1024);
    printf("launch 120 KiB with 100 KiB attribute: %s\n", cudaGetErrorName(cudaGetLastError()));
    cudaError_t e = cudaFuncSetAttribute(big_smem, cudaFuncAttributeMaxDynamicSharedMemorySize, 1024 * 1024);
    printf("cudaFuncSetAttribute(1 MiB): %s\n", cudaGetErrorName(e));
    cudaGetLastError();

    // The context is still healthy.
    CHECK(cudaDeviceSynchronize());
    CHECK(cudaFree(dcnt));
    CHECK(cudaFree(din));
    CHECK(cudaFree(dout));
    printf("done\n");
    return 0;
}
