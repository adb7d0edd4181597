// device_assert: normal work first, then a kernel whose assert() fails in exactly
// one thread. Synchronisation reports cudaErrorAssert; the error is sticky, so
// later calls (cudaMalloc, cudaMemcpy, launches) fail too. The device prints the
// assertion message on stderr. Exits 0.
#include <cassert>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <cuda_runtime.h>

static const char* base_name(const char* p) { const char* s = strrchr(p, '/'); return s ? s + 1 : p; }
#define CHECK(call) do { cudaError_t e_ = (call); if (e_ != cudaSuccess) { \
    printf("FAIL %s:%d %s\n", base_name(__FILE__), __LINE__, cudaGetErrorName(e_)); exit(1); } } while (0)
#define EXPECT(cond) do { if (!(cond)) { \
    printf("MISMATCH %s:%d %s\n", base_name(__FILE__), __LINE__, #cond); exit(1); } } while (0)

__global__ void square(int* x, int n) {
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) x[i] = x[i] * x[i];
}

__global__ void checked(const int* x, int n, int bad) {
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) {
        int v = x[i];
        if (i == bad) v = -1;
        assert(v >= 0);
    }
}

int main() {
    const int n = 1000;
    int h[n];
    for (int i = 0; i < n; i++) h[i] = i % 100;
    int* d;
    CHECK(cudaMalloc(&d, n * sizeof(int)));
    CHECK(cudaMemcpy(d, h, sizeof(h), cudaMemcpyHostToDevice));
    square<<<(n + 127) / 128, 128>>>(d, n);
    CHECK(cudaGetLastError());
    CHECK(cudaMemcpy(h, d, sizeof(h), cudaMemcpyDeviceToHost));
    long long sum = 0;
    for (int i = 0; i < n; i++) sum += h[i];
    printf("squares: %d %d %d sum=%lld\n", h[1], h[12], h[99], sum);

    for (int i = 0; i < n; i++) h[i] = i;
    CHECK(cudaMemcpy(d, h, sizeof(h), cudaMemcpyHostToDevice));
    checked<<<(n + 127) / 128, 128>>>(d, n, -1);
    CHECK(cudaGetLastError());
    CHECK(cudaDeviceSynchronize());
    printf("passing assert kernel: ok\n");

    fflush(stdout);
    checked<<<(n + 127) / 128, 128>>>(d, n, 437);
    // (No cudaGetLastError here: whether the assert is already visible is a race.)
    cudaError_t e = cudaDeviceSynchronize();
    printf("cudaDeviceSynchronize: %s\n", cudaGetErrorName(e));
    printf("error string: %s\n", cudaGetErrorString(e));
    printf("cudaGetLastError: %s\n", cudaGetErrorName(cudaGetLastError()));
    printf("cudaGetLastError again: %s\n", cudaGetErrorName(cudaGetLastError()));
    printf("cudaPeekAtLastError: %s\n", cudaGetErrorName(cudaPeekAtLastError()));

    void* p = nullptr;
    printf("cudaMalloc after assert: %s\n", cudaGetErrorName(cudaMalloc(&p, 256)));
    printf("cudaMemcpy after assert: %s\n", cudaGetErrorName(cudaMemcpy(h, d, 16, cudaMemcpyDeviceToHost)));
    square<<<1, 32>>>(d, 32);
    printf("launch after assert: %s\n", cudaGetErrorName(cudaGetLastError()));
    printf("cudaDeviceSynchronize again: %s\n", cudaGetErrorName(cudaDeviceSynchronize()));
    printf("cudaFree after assert: %s\n", cudaGetErrorName(cudaFree(d)));
    int dev = -1;
    e = cudaGetDevice(&dev);
    printf("cudaGetDevice after assert: %s dev=%d\n", cudaGetErrorName(e), dev);
    cudaGetLastError();
    printf("done\n");
    return 0;
}
