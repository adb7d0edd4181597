// illegal_address: a kernel writing through a wild pointer. The launch itself
// succeeds; synchronisation reports cudaErrorIllegalAddress, and the error is
// sticky for the rest of the process. Exits 0.
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <cstdint>
#include <cuda_runtime.h>

static const char* base_name(const char* p) { const char* s = strrchr(p, '/'); return s ? s + 1 : p; }
#define CHECK(call) do { cudaError_t e_ = (call); if (e_ != cudaSuccess) { \
    printf("FAIL %s:%d %s\n", base_name(__FILE__), __LINE__, cudaGetErrorName(e_)); exit(1); } } while (0)

__global__ void fill(int* p, int n, int v) {
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) p[i] = v + i;
}

int main() {
    const int n = 256;
    int* d;
    int h[n];
    CHECK(cudaMalloc(&d, n * sizeof(int)));
    fill<<<1, n>>>(d, n, 10);
    CHECK(cudaGetLastError());
    CHECK(cudaMemcpy(h, d, sizeof(h), cudaMemcpyDeviceToHost));
    printf("before: %d %d %d\n", h[0], h[1], h[255]);

    cudaStream_t s;
    CHECK(cudaStreamCreate(&s));
    // Low addresses are never mapped (mmap_min_addr), neither on the GPU nor the host.
    int* wild = (int*)(uintptr_t)0x100;
    fflush(stdout);
    fill<<<4, 64, 0, s>>>(wild, n, 1);
    // (No cudaGetLastError here: whether the fault is already visible is a race.)
    cudaError_t e = cudaStreamSynchronize(s);
    printf("cudaStreamSynchronize: %s\n", cudaGetErrorName(e));
    printf("error string: %s\n", cudaGetErrorString(e));
    printf("cudaDeviceSynchronize: %s\n", cudaGetErrorName(cudaDeviceSynchronize()));
    printf("cudaGetLastError: %s\n", cudaGetErrorName(cudaGetLastError()));
    printf("cudaGetLastError again: %s\n", cudaGetErrorName(cudaGetLastError()));

    void* p = nullptr;
    printf("cudaMalloc after fault: %s\n", cudaGetErrorName(cudaMalloc(&p, 1024)));
    printf("cudaMemcpy after fault: %s\n", cudaGetErrorName(cudaMemcpy(h, d, sizeof(h), cudaMemcpyDeviceToHost)));
    printf("cudaMemset after fault: %s\n", cudaGetErrorName(cudaMemset(d, 0, 16)));
    fill<<<1, 32>>>(d, 32, 0);
    printf("launch after fault: %s\n", cudaGetErrorName(cudaGetLastError()));
    cudaEvent_t ev;
    printf("cudaEventCreate after fault: %s\n", cudaGetErrorName(cudaEventCreate(&ev)));
    printf("cudaStreamQuery after fault: %s\n", cudaGetErrorName(cudaStreamQuery(s)));
    printf("cudaFree after fault: %s\n", cudaGetErrorName(cudaFree(d)));
    cudaGetLastError();
    printf("done\n");
    return 0;
}
