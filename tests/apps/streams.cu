// streams: 16 streams (plain, non-blocking, with priority), kernels and async
// copies on each, cudaStreamQuery, cross-stream cudaStreamWaitEvent chains,
// flags/priority getters, host functions and stream callbacks (their order is
// recorded and printed), a host function that blocks the stream, the legacy
// default stream and cudaStreamPerThread.
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <atomic>
#include <vector>
#include <cuda_runtime.h>

static const char* base_name(const char* p) { const char* s = strrchr(p, '/'); return s ? s + 1 : p; }
#define CHECK(call) do { cudaError_t e_ = (call); if (e_ != cudaSuccess) { \
    printf("FAIL %s:%d %s\n", base_name(__FILE__), __LINE__, cudaGetErrorName(e_)); exit(1); } } while (0)
#define EXPECT(cond) do { if (!(cond)) { \
    printf("MISMATCH %s:%d %s\n", base_name(__FILE__), __LINE__, #cond); exit(1); } } while (0)

const int NS = 16, N = 1 << 16;

__global__ void add_k(float* x, float v, int n) {
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) x[i] = x[i] * 1.5f + v;
}
__global__ void accumulate(float* dst, const float* src, int n) {
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) dst[i] += src[i] + 1.0f;
}

static std::atomic<int> g_seq(0);
static int g_order[64];
static std::atomic<int> g_release(0);

struct Tag { int id; };
static void CUDART_CB host_fn(void* p) { g_order[g_seq.fetch_add(1)] = ((Tag*)p)->id; }
static void CUDART_CB stream_cb(cudaStream_t, cudaError_t status, void* p) {
    g_order[g_seq.fetch_add(1)] = ((Tag*)p)->id + (status == cudaSuccess ? 0 : 1000);
}
static void CUDART_CB blocker(void*) {
    while (!g_release.load()) { }
}

int main() {
    int least, greatest;
    CHECK(cudaDeviceGetStreamPriorityRange(&least, &greatest));
    cudaStream_t s[NS];
    for (int i = 0; i < NS; i++) {
        if (i < 6) CHECK(cudaStreamCreate(&s[i]));
        else if (i < 11) CHECK(cudaStreamCreateWithFlags(&s[i], cudaStreamNonBlocking));
        else CHECK(cudaStreamCreateWithPriority(&s[i], i % 2 ? cudaStreamNonBlocking : cudaStreamDefault,
                                                i % 3 == 0 ? greatest : least));
        unsigned fl;
        int prio;
        CHECK(cudaStreamGetFlags(s[i], &fl));
        CHECK(cudaStreamGetPriority(s[i], &prio));
        printf("stream %2d: flags=%u priority=%d query(empty)=%s\n", i, fl, prio, cudaGetErrorName(cudaStreamQuery(s[i])));
    }

    // Independent work on each stream: H2D, kernel, D2H.
    float* pin;
    float* d[NS];
    CHECK(cudaMallocHost(&pin, (size_t)NS * N * sizeof(float)));
    for (int i = 0; i < NS; i++) {
        CHECK(cudaMalloc(&d[i], N * sizeof(float)));
        for (int j = 0; j < N; j++) pin[(size_t)i * N + j] = (float)((i + j) % 64);
    }
    for (int i = 0; i < NS; i++) {
        CHECK(cudaMemcpyAsync(d[i], pin + (size_t)i * N, N * sizeof(float), cudaMemcpyHostToDevice, s[i]));
        add_k<<<N / 256, 256, 0, s[i]>>>(d[i], (float)i, N);
        CHECK(cudaGetLastError());
        CHECK(cudaMemcpyAsync(pin + (size_t)i * N, d[i], N * sizeof(float), cudaMemcpyDeviceToHost, s[i]));
    }
    for (int i = 0; i < NS; i++) {
        CHECK(cudaStreamSynchronize(s[i]));
        EXPECT(cudaStreamQuery(s[i]) == cudaSuccess);
        double sum = 0;
        for (int j = 0; j < N; j++) sum += pin[(size_t)i * N + j];
        printf("stream %2d result: first=%.2f sum=%.1f\n", i, pin[(size_t)i * N], sum);
    }

    // Chain across streams with events: d[i] += d[i-1] + 1, strictly ordered.
    cudaEvent_t ev[NS];
    for (int i = 0; i < NS; i++) CHECK(cudaEventCreateWithFlags(&ev[i], cudaEventDisableTiming));
    for (int i = 0; i < NS; i++) {
        if (i > 0) {
            CHECK(cudaStreamWaitEvent(s[i], ev[i - 1], 0));
            accumulate<<<N / 256, 256, 0, s[i]>>>(d[i], d[i - 1], N);
        }
        CHECK(cudaEventRecord(ev[i], s[i]));
    }
    float last[4];
    CHECK(cudaStreamWaitEvent(s[0], ev[NS - 1], 0));
    CHECK(cudaMemcpyAsync(last, d[NS - 1], sizeof(last), cudaMemcpyDeviceToHost, s[0]));
    CHECK(cudaStreamSynchronize(s[0]));
    printf("event chain result: %.2f %.2f %.2f %.2f\n", last[0], last[1], last[2], last[3]);

    // Host functions and callbacks; cross-stream dependencies make the order deterministic.
    static Tag tags[32];
    for (int i = 0; i < 32; i++) tags[i].id = i + 1;
    g_seq = 0;
    CHECK(cudaLaunchHostFunc(s[0], host_fn, &tags[0]));
    add_k<<<1, 32, 0, s[0]>>>(d[0], 1.0f, 32);
    CHECK(cudaStreamAddCallback(s[0], stream_cb, &tags[1], 0));
    CHECK(cudaEventRecord(ev[0], s[0]));
    for (int i = 1; i < 6; i++) {
        CHECK(cudaStreamWaitEvent(s[i], ev[i - 1], 0));
        CHECK(cudaStreamAddCallback(s[i], stream_cb, &tags[2 * i], 0));
        CHECK(cudaLaunchHostFunc(s[i], host_fn, &tags[2 * i + 1]));
        CHECK(cudaEventRecord(ev[i], s[i]));
    }
    CHECK(cudaDeviceSynchronize());
    printf("callback order (%d):", g_seq.load());
    for (int i = 0; i < g_seq.load(); i++) printf(" %d", g_order[i]);
    printf("\n");

    // A host function that blocks its stream: the stream is reported busy until released.
    g_release = 0;
    CHECK(cudaLaunchHostFunc(s[7], blocker, nullptr));
    CHECK(cudaEventRecord(ev[7], s[7]));
    printf("blocked stream query: %s\n", cudaGetErrorName(cudaStreamQuery(s[7])));
    printf("blocked event query: %s\n", cudaGetErrorName(cudaEventQuery(ev[7])));
    g_release = 1;
    CHECK(cudaStreamSynchronize(s[7]));
    printf("released stream query: %s\n", cudaGetErrorName(cudaStreamQuery(s[7])));
    cudaGetLastError();

    // Legacy default stream and per-thread default stream.
    float h[4] = {1, 2, 3, 4};
    CHECK(cudaMemcpyAsync(d[1], h, sizeof(h), cudaMemcpyHostToDevice, 0));
    add_k<<<1, 4>>>(d[1], 10.0f, 4);
    add_k<<<1, 4, 0, cudaStreamLegacy>>>(d[1], 100.0f, 4);
    CHECK(cudaMemcpyAsync(h, d[1], sizeof(h), cudaMemcpyDeviceToHost, cudaStreamLegacy));
    CHECK(cudaStreamSynchronize(0));
    printf("legacy stream: %.2f %.2f %.2f %.2f\n", h[0], h[1], h[2], h[3]);
    float h2[4] = {5, 6, 7, 8};
    CHECK(cudaMemcpyAsync(d[2], h2, sizeof(h2), cudaMemcpyHostToDevice, cudaStreamPerThread));
    add_k<<<1, 4, 0, cudaStreamPerThread>>>(d[2], -1.0f, 4);
    CHECK(cudaMemcpyAsync(h2, d[2], sizeof(h2), cudaMemcpyDeviceToHost, cudaStreamPerThread));
    CHECK(cudaStreamSynchronize(cudaStreamPerThread));
    printf("per-thread stream: %.2f %.2f %.2f %.2f\n", h2[0], h2[1], h2[2], h2[3]);
    printf("query legacy=%s per-thread=%s\n", cudaGetErrorName(cudaStreamQuery(0)),
           cudaGetErrorName(cudaStreamQuery(cudaStreamPerThread)));
    unsigned fl;
    int prio;
    CHECK(cudaStreamGetFlags(cudaStreamPerThread, &fl));
    CHECK(cudaStreamGetPriority(cudaStreamPerThread, &prio));
    printf("per-thread flags=%u priority=%d\n", fl, prio);

    for (int i = 0; i < NS; i++) {
        CHECK(cudaStreamDestroy(s[i]));
        CHECK(cudaEventDestroy(ev[i]));
        CHECK(cudaFree(d[i]));
    }
    CHECK(cudaFreeHost(pin));
    printf("done\n");
    return 0;
}
