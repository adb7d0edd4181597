// multithread: 8 host threads, each with cudaSetDevice(0), its own stream,
// buffers and kernel parameters, running 20 iterations of copy-in / kernel /
// copy-out. Pure memcpy round trips are self-checked inside the threads; kernel
// results are collected and printed by main in thread order.
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <thread>
#include <vector>
#include <cuda_runtime.h>

static const char* base_name(const char* p) { const char* s = strrchr(p, '/'); return s ? s + 1 : p; }
#define CHECK(call) do { cudaError_t e_ = (call); if (e_ != cudaSuccess) { \
    printf("FAIL %s:%d %s\n", base_name(__FILE__), __LINE__, cudaGetErrorName(e_)); exit(1); } } while (0)
#define EXPECT(cond) do { if (!(cond)) { \
    printf("MISMATCH %s:%d %s\n", base_name(__FILE__), __LINE__, #cond); exit(1); } } while (0)

const int NT = 8, ITERS = 20, N = 50000;

__global__ void saxpb(float* y, const float* x, float a, float b, int n) {
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) y[i] = a * x[i] + b;
}

struct Result { double sum[ITERS]; float first[ITERS]; int ok; };

static void worker(int tid, Result* r) {
    CHECK(cudaSetDevice(0));
    cudaStream_t s;
    CHECK(cudaStreamCreateWithFlags(&s, tid % 2 ? cudaStreamNonBlocking : cudaStreamDefault));
    float *dx, *dy, *hx, *hy;
    CHECK(cudaMalloc(&dx, N * sizeof(float)));
    CHECK(cudaMalloc(&dy, N * sizeof(float)));
    CHECK(cudaMallocHost(&hx, N * sizeof(float)));
    std::vector<float> hy_v(N), back(N);
    hy = hy_v.data();
    for (int it = 0; it < ITERS; it++) {
        for (int i = 0; i < N; i++) hx[i] = (float)((i + tid * 31 + it * 7) % 97);
        CHECK(cudaMemcpyAsync(dx, hx, N * sizeof(float), cudaMemcpyHostToDevice, s));
        // Round trip without any kernel: must always match.
        CHECK(cudaMemcpyAsync(back.data(), dx, N * sizeof(float), cudaMemcpyDeviceToHost, s));
        saxpb<<<(N + 255) / 256, 256, 0, s>>>(dy, dx, (float)(tid + 1), (float)it, N);
        CHECK(cudaGetLastError());
        CHECK(cudaMemcpyAsync(hy, dy, N * sizeof(float), cudaMemcpyDeviceToHost, s));
        CHECK(cudaStreamSynchronize(s));
        EXPECT(memcmp(back.data(), hx, N * sizeof(float)) == 0);
        double sum = 0;
        for (int i = 0; i < N; i++) sum += hy[i];
        r->sum[it] = sum;
        r->first[it] = hy[1];
        if (it % 5 == 4) {
            int dev = -1;
            CHECK(cudaGetDevice(&dev));
            EXPECT(dev == 0);
            CHECK(cudaStreamQuery(s));
        }
    }
    CHECK(cudaFree(dx));
    CHECK(cudaFree(dy));
    CHECK(cudaFreeHost(hx));
    CHECK(cudaStreamDestroy(s));
    r->ok = 1;
}

int main() {
    // Initialise the runtime on the main thread first, so an unusable device fails
    // here deterministically rather than racily in the workers.
    CHECK(cudaSetDevice(0));
    CHECK(cudaFree(0));
    static Result res[NT];
    std::vector<std::thread> th;
    for (int t = 0; t < NT; t++) th.emplace_back(worker, t, &res[t]);
    for (auto& t : th) t.join();
    CHECK(cudaDeviceSynchronize());
    for (int t = 0; t < NT; t++) {
        double total = 0;
        for (int it = 0; it < ITERS; it++) total += res[t].sum[it];
        printf("thread %d ok=%d first[0]=%.1f first[19]=%.1f sum[0]=%.1f sum[19]=%.1f total=%.1f\n", t, res[t].ok,
               res[t].first[0], res[t].first[ITERS - 1], res[t].sum[0], res[t].sum[ITERS - 1], total);
    }
    printf("done\n");
    return 0;
}
