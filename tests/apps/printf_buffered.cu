// printf_buffered: kernel printf interleaved with host printf WITHOUT any flushing.
// With stdout redirected to a file or pipe, C stdio buffers fully; natively the
// driver writes kernel output into the same stdout buffer at each synchronizing call,
// so the order in the file is the program order of host prints and sync points.
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <cuda_runtime.h>

static const char* base_name(const char* p) { const char* s = strrchr(p, '/'); return s ? s + 1 : p; }
#define CHECK(call) do { cudaError_t e_ = (call); if (e_ != cudaSuccess) { \
    printf("FAIL %s:%d %s\n", base_name(__FILE__), __LINE__, cudaGetErrorName(e_)); exit(1); } } while (0)

__global__ void say(int round, int value) {
    for (int t = 0; t < blockDim.x; t++) {
        if (threadIdx.x == t) printf("[dev] round %d thread %d value %d\n", round, t, value + t);
        __syncthreads();
    }
}

int main() {
    printf("host: before any kernel\n");
    say<<<1, 3>>>(1, 100);
    printf("host: launched round 1 (not yet synchronized)\n");
    CHECK(cudaDeviceSynchronize());
    printf("host: after device sync\n");

    cudaStream_t s;
    CHECK(cudaStreamCreate(&s));
    say<<<1, 2, 0, s>>>(2, 200);
    CHECK(cudaStreamSynchronize(s));
    printf("host: after stream sync\n");

    int* d;
    int h = 0;
    CHECK(cudaMalloc(&d, sizeof(int)));
    say<<<1, 2>>>(3, 300);
    CHECK(cudaMemcpy(&h, d, sizeof(int), cudaMemcpyDeviceToHost));
    printf("host: after blocking memcpy\n");
    CHECK(cudaFree(d));
    CHECK(cudaStreamDestroy(s));
    printf("host: done\n");
    return 0;
}
