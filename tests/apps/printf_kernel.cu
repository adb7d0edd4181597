// printf_kernel: device printf with many format specifiers, deterministic
// ordering (threads serialised with __syncthreads, one block per launch), output
// delivered at each documented flush point (device/stream/event synchronize,
// blocking memcpy, cudaDeviceReset) and interleaved with host printf.
// stdout is line buffered (as on a terminal) and flushed before each synchronising
// call, so host and device output interleave the same way whether the device
// output is written through stdio or straight to fd 1.
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <cuda_runtime.h>

static const char* base_name(const char* p) { const char* s = strrchr(p, '/'); return s ? s + 1 : p; }
#define CHECK(call) do { cudaError_t e_ = (call); if (e_ != cudaSuccess) { \
    printf("FAIL %s:%d %s\n", base_name(__FILE__), __LINE__, cudaGetErrorName(e_)); exit(1); } } while (0)

__global__ void hello(int launch) {
    if (threadIdx.x == 0) printf("[dev] hello from launch %d block %d\n", launch, blockIdx.x);
}

__global__ void ordered(int tag) {
    for (int t = 0; t < blockDim.x; t++) {
        if (threadIdx.x == t) printf("[dev] tag %d thread %d of %d\n", tag, t, blockDim.x);
        __syncthreads();
    }
}

__global__ void formats(const char* dstr) {
    if (threadIdx.x != 0) return;
    long l = -1234567890123l;
    unsigned long long ull = 18446744073709551615ull;
    printf("[dev] ints: %d %i %u %x %X %o %5d|%-5d|%05d\n", -42, 42, 4000000000u, 0xbeef, 0xbeef, 8, 7, 7, 7);
    printf("[dev] longs: %ld %lld %llu %llx\n", l, -9000000000000ll, ull, 0x1234567890abcdefull);
    printf("[dev] floats: %f %.3f %e %.2E %g %G %10.4f|\n", 3.5f, 2.0 / 3.0, 12345.678, 0.000123, 1e-5, 1e20,
           -1.25);
    printf("[dev] chars/strings: %c%c%c '%s' '%10s' '%-6s' dev='%s' %%\n", 'a', 'b', 'c', "lit", "right", "left",
           dstr);
    printf("[dev] many args: %d %d %d %d %d %d %d %d %d %d %d %d %d %d %d %d %f %f %f %f\n", 1, 2, 3, 4, 5, 6, 7, 8, 9,
           10, 11, 12, 13, 14, 15, 16, 1.5, 2.5, 3.5, 4.5);
    printf("[dev] no newline at end...");
    printf(" continued\n");
}

__global__ void lots(int lines) {
    if (threadIdx.x == 0)
        for (int i = 0; i < lines; i++) printf("[dev] line %03d value %d\n", i, i * i);
}

__global__ void compute_and_print(float* out) {
    __shared__ float s[64];
    s[threadIdx.x] = threadIdx.x * 0.5f;
    __syncthreads();
    if (threadIdx.x == 0) {
        float sum = 0;
        for (int i = 0; i < 64; i++) sum += s[i];
        out[0] = sum;
        printf("[dev] block sum %.2f\n", sum);
    }
}

int main() {
    setvbuf(stdout, nullptr, _IOLBF, 0);
    size_t fifo = 0;
    CHECK(cudaDeviceSetLimit(cudaLimitPrintfFifoSize, 2 << 20));
    CHECK(cudaDeviceGetLimit(&fifo, cudaLimitPrintfFifoSize));
    printf("[host] printf fifo size: %zu\n", fifo);

    printf("[host] before first kernel\n");
    hello<<<1, 32>>>(0);
    fflush(stdout);
    CHECK(cudaDeviceSynchronize());
    printf("[host] after device sync\n");

    for (int l = 1; l <= 4; l++) hello<<<1, 32>>>(l);
    fflush(stdout);
    CHECK(cudaDeviceSynchronize());
    printf("[host] after 4 launches\n");

    ordered<<<1, 8>>>(1);
    fflush(stdout);
    CHECK(cudaDeviceSynchronize());

    char* dstr;
    const char msg[] = "device-memory string";
    CHECK(cudaMalloc(&dstr, sizeof(msg)));
    CHECK(cudaMemcpy(dstr, msg, sizeof(msg), cudaMemcpyHostToDevice));
    formats<<<1, 32>>>(dstr);
    fflush(stdout);
    CHECK(cudaDeviceSynchronize());
    printf("[host] after formats\n");

    // Stream synchronize as the flush point.
    cudaStream_t s;
    CHECK(cudaStreamCreate(&s));
    ordered<<<1, 4, 0, s>>>(2);
    fflush(stdout);
    CHECK(cudaStreamSynchronize(s));
    printf("[host] after stream sync\n");

    // Event synchronize as the flush point.
    cudaEvent_t ev;
    CHECK(cudaEventCreate(&ev));
    ordered<<<1, 3, 0, s>>>(3);
    CHECK(cudaEventRecord(ev, s));
    fflush(stdout);
    CHECK(cudaEventSynchronize(ev));
    printf("[host] after event sync\n");

    // Blocking memcpy as the flush point.
    float* d;
    float h = -1;
    CHECK(cudaMalloc(&d, sizeof(float)));
    compute_and_print<<<1, 64>>>(d);
    fflush(stdout);
    CHECK(cudaMemcpy(&h, d, sizeof(float), cudaMemcpyDeviceToHost));
    printf("[host] after blocking memcpy, value %.2f\n", h);

    // A lot of output in one launch.
    lots<<<1, 1>>>(300);
    fflush(stdout);
    CHECK(cudaDeviceSynchronize());
    printf("[host] after 300 lines\n");

    // Kernel output that is only flushed by context destruction.
    CHECK(cudaEventDestroy(ev));
    CHECK(cudaStreamDestroy(s));
    CHECK(cudaFree(d));
    CHECK(cudaFree(dstr));
    hello<<<1, 32>>>(99);
    fflush(stdout);
    CHECK(cudaDeviceReset());
    printf("[host] after device reset\n");
    printf("done\n");
    return 0;
}
