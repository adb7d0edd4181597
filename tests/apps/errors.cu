// errors: cudaGetLastError / cudaPeekAtLastError semantics, cudaGetErrorName and
// cudaGetErrorString for a list of codes, and the error codes of deliberately
// wrong calls (bad memcpy kind, bad frees, huge allocations, bad launch
// configurations, null pointers, bad devices, invalid handles). Only non-sticky
// errors are provoked, so the context must still work at the end.
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <cuda_runtime.h>

static const char* base_name(const char* p) { const char* s = strrchr(p, '/'); return s ? s + 1 : p; }
#define CHECK(call) do { cudaError_t e_ = (call); if (e_ != cudaSuccess) { \
    printf("FAIL %s:%d %s\n", base_name(__FILE__), __LINE__, cudaGetErrorName(e_)); exit(1); } } while (0)

__global__ void k(int* p) { if (p) p[threadIdx.x] = threadIdx.x; }
static void not_a_kernel(int*) {}

static void report(const char* what, cudaError_t e) {
    cudaError_t peek = cudaPeekAtLastError();
    cudaError_t last = cudaGetLastError();
    cudaError_t after = cudaGetLastError();
    printf("%-40s -> %s (peek=%s last=%s after=%s)\n", what, cudaGetErrorName(e), cudaGetErrorName(peek),
           cudaGetErrorName(last), cudaGetErrorName(after));
}

int main() {
    printf("initial last error: %s\n", cudaGetErrorName(cudaGetLastError()));

    const int codes[] = {0, 1, 2, 9, 11, 98, 100, 101, 200, 209, 400, 500, 600, 700, 710, 719, 999, 12345};
    for (int c : codes)
        printf("code %5d: %s | %s\n", c, cudaGetErrorName((cudaError_t)c), cudaGetErrorString((cudaError_t)c));

    // Peek does not clear, Get clears.
    void* p = nullptr;
    cudaError_t e = cudaMalloc(&p, 1ull << 50);
    printf("cudaMalloc(1<<50): %s\n", cudaGetErrorName(e));
    printf("  peek: %s\n", cudaGetErrorName(cudaPeekAtLastError()));
    printf("  peek: %s\n", cudaGetErrorName(cudaPeekAtLastError()));
    printf("  get:  %s\n", cudaGetErrorName(cudaGetLastError()));
    printf("  get:  %s\n", cudaGetErrorName(cudaGetLastError()));

    // A later success does not clear the recorded error.
    e = cudaMalloc(&p, 1ull << 50);
    int* d = nullptr;
    CHECK(cudaMalloc(&d, 1024));
    printf("after failure then success, get: %s\n", cudaGetErrorName(cudaGetLastError()));

    int h[256] = {0};
    report("cudaMemcpy kind 7", cudaMemcpy(d, h, 16, (cudaMemcpyKind)7));
    report("cudaMemcpy dst=nullptr", cudaMemcpy(nullptr, h, 16, cudaMemcpyHostToDevice));
    report("cudaMemcpy src=nullptr D2H", cudaMemcpy(h, nullptr, 16, cudaMemcpyDeviceToHost));
    report("cudaMemcpy 0 bytes", cudaMemcpy(d, h, 0, cudaMemcpyHostToDevice));
    report("cudaFree(never allocated)", cudaFree((void*)0x12345678));
    report("cudaFree(interior pointer)", cudaFree(d + 4));
    report("cudaFree(nullptr)", cudaFree(nullptr));
    report("cudaFreeHost(device pointer)", cudaFreeHost(d));
    report("cudaMalloc(1<<50)", cudaMalloc(&p, 1ull << 50));
    report("cudaMallocHost(1<<50)", cudaMallocHost(&p, 1ull << 50));
    report("cudaMemset(nullptr)", cudaMemset(nullptr, 0, 16));
    report("cudaSetDevice(-1)", cudaSetDevice(-1));
    report("cudaSetDevice(1000)", cudaSetDevice(1000));
    int dev = -1;
    report("cudaGetDevice", cudaGetDevice(&dev));
    printf("  current device: %d\n", dev);

    k<<<1, 2048>>>(d);
    report("launch block=2048", cudaSuccess);
    k<<<dim3(1, 70000), 1>>>(d);
    report("launch grid.y=70000", cudaSuccess);
    k<<<dim3(1, 1, 70000), 1>>>(d);
    report("launch grid.z=70000", cudaSuccess);
    k<<<1, dim3(1, 1, 128)>>>(d);
    report("launch block.z=128", cudaSuccess);
    k<<<0, 32>>>(d);
    report("launch grid=0", cudaSuccess);
    k<<<1, 32, 1 << 20>>>(d);
    report("launch shmem=1MiB", cudaSuccess);
    void* args[] = {&d};
    report("cudaLaunchKernel(host function)", cudaLaunchKernel((const void*)not_a_kernel, 1, 1, args, 0, 0));
    cudaFuncAttributes fa;
    report("cudaFuncGetAttributes(host function)", cudaFuncGetAttributes(&fa, (const void*)not_a_kernel));

    cudaEvent_t ev;
    CHECK(cudaEventCreate(&ev));
    report("cudaEventQuery(not recorded)", cudaEventQuery(ev));
    report("cudaEventDestroy(nullptr)", cudaEventDestroy(nullptr));
    cudaStream_t s;
    CHECK(cudaStreamCreate(&s));
    report("cudaStreamWaitEvent(nullptr event)", cudaStreamWaitEvent(s, nullptr, 0));
    cudaStream_t s_bad;
    report("cudaStreamCreateWithFlags(bad)", cudaStreamCreateWithFlags(&s_bad, 0x40));
    int v = 0;
    report("cudaDeviceGetAttribute(dev -1)", cudaDeviceGetAttribute(&v, cudaDevAttrWarpSize, -1));
    report("cudaDeviceSetLimit(bad limit)", cudaDeviceSetLimit((cudaLimit)999, 1));
    report("cudaMemcpyToSymbol(bad symbol)", cudaMemcpyToSymbol(h, h, 4));

    // Nothing above is sticky: the context still works.
    k<<<1, 32>>>(d);
    CHECK(cudaGetLastError());
    CHECK(cudaDeviceSynchronize());
    CHECK(cudaMemcpy(h, d, 32 * sizeof(int), cudaMemcpyDeviceToHost));
    printf("kernel after errors: %d %d %d\n", h[0], h[1], h[31]);
    CHECK(cudaEventDestroy(ev));
    CHECK(cudaStreamDestroy(s));
    CHECK(cudaFree(d));
    printf("final last error: %s\n", cudaGetErrorName(cudaGetLastError()));
    printf("done\n");
    return 0;
}
