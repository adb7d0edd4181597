// events: cudaEventCreate / CreateWithFlags (DisableTiming, BlockingSync),
// record on streams, synchronize, query (incl. never-recorded and blocked events),
// elapsed time (only its sign is printed) and its error cases,
// cudaEventRecordWithFlags, cudaStreamWaitEvent and destroy.
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <atomic>
#include <cuda_runtime.h>

static const char* base_name(const char* p) { const char* s = strrchr(p, '/'); return s ? s + 1 : p; }
#define CHECK(call) do { cudaError_t e_ = (call); if (e_ != cudaSuccess) { \
    printf("FAIL %s:%d %s\n", base_name(__FILE__), __LINE__, cudaGetErrorName(e_)); exit(1); } } while (0)
#define EXPECT(cond) do { if (!(cond)) { \
    printf("MISMATCH %s:%d %s\n", base_name(__FILE__), __LINE__, #cond); exit(1); } } while (0)

__global__ void spin_work(float* x, int n, int iters) {
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i >= n) return;
    float v = x[i];
    for (int k = 0; k < iters; k++) v = v * 0.999f + 0.5f;
    x[i] = v;
}

static std::atomic<int> g_release(0);
static void CUDART_CB blocker(void*) { while (!g_release.load()) { } }

static const char* en(cudaError_t e) { return cudaGetErrorName(e); }

int main() {
    const int n = 1 << 18;
    float* d;
    CHECK(cudaMalloc(&d, n * sizeof(float)));
    CHECK(cudaMemset(d, 0, n * sizeof(float)));

    cudaEvent_t e_def, e_def2, e_nt, e_bs, e_bsnt;
    CHECK(cudaEventCreate(&e_def));
    CHECK(cudaEventCreateWithFlags(&e_def2, cudaEventDefault));
    CHECK(cudaEventCreateWithFlags(&e_nt, cudaEventDisableTiming));
    CHECK(cudaEventCreateWithFlags(&e_bs, cudaEventBlockingSync));
    CHECK(cudaEventCreateWithFlags(&e_bsnt, cudaEventBlockingSync | cudaEventDisableTiming));
    cudaEvent_t bad;
    printf("create with invalid flags: %s\n", en(cudaEventCreateWithFlags(&bad, 0x100)));
    cudaGetLastError();

    // Never recorded events.
    printf("query(never recorded): %s\n", en(cudaEventQuery(e_def)));
    printf("synchronize(never recorded): %s\n", en(cudaEventSynchronize(e_def)));
    float ms = -1;
    printf("elapsed(never recorded): %s\n", en(cudaEventElapsedTime(&ms, e_def, e_def2)));
    cudaGetLastError();

    cudaStream_t s1, s2;
    CHECK(cudaStreamCreate(&s1));
    CHECK(cudaStreamCreateWithFlags(&s2, cudaStreamNonBlocking));

    // Timed region on s1.
    CHECK(cudaEventRecord(e_def, s1));
    spin_work<<<n / 256, 256, 0, s1>>>(d, n, 2000);
    CHECK(cudaGetLastError());
    CHECK(cudaEventRecord(e_def2, s1));
    CHECK(cudaEventRecord(e_nt, s1));
    CHECK(cudaEventSynchronize(e_def2));
    printf("query after sync: %s\n", en(cudaEventQuery(e_def2)));
    EXPECT(cudaEventQuery(e_def) == cudaSuccess);
    EXPECT(cudaEventQuery(e_nt) == cudaSuccess);
    CHECK(cudaEventElapsedTime(&ms, e_def, e_def2));
    printf("elapsed >= 0: %s\n", ms >= 0.0f ? "yes" : "no");
    CHECK(cudaEventElapsedTime(&ms, e_def2, e_def));
    printf("reversed elapsed <= 0: %s\n", ms <= 0.0f ? "yes" : "no");
    printf("elapsed with DisableTiming end: %s\n", en(cudaEventElapsedTime(&ms, e_def, e_nt)));
    printf("elapsed with DisableTiming start: %s\n", en(cudaEventElapsedTime(&ms, e_nt, e_def2)));
    cudaGetLastError();

    // Cross-stream dependency: s2 waits for an event recorded on s1.
    CHECK(cudaEventRecord(e_bs, s1));
    spin_work<<<n / 256, 256, 0, s1>>>(d, n, 500);
    CHECK(cudaEventRecord(e_bs, s1));
    CHECK(cudaStreamWaitEvent(s2, e_bs, 0));
    spin_work<<<n / 256, 256, 0, s2>>>(d, n, 10);
    CHECK(cudaEventRecordWithFlags(e_bsnt, s2, cudaEventRecordDefault));
    CHECK(cudaEventSynchronize(e_bsnt));
    printf("blocking-sync event query: %s\n", en(cudaEventQuery(e_bsnt)));
    EXPECT(cudaEventQuery(e_bs) == cudaSuccess);
    EXPECT(cudaStreamQuery(s1) == cudaSuccess);
    EXPECT(cudaStreamQuery(s2) == cudaSuccess);
    float h[3];
    CHECK(cudaMemcpy(h, d, sizeof(h), cudaMemcpyDeviceToHost));
    printf("data: %.4f %.4f %.4f\n", h[0], h[1], h[2]);

    // An event behind a blocked host function is deterministically not ready.
    g_release = 0;
    CHECK(cudaLaunchHostFunc(s2, blocker, nullptr));
    CHECK(cudaEventRecord(e_def, s2));
    printf("query(blocked): %s\n", en(cudaEventQuery(e_def)));
    printf("elapsed(pending end): %s\n", en(cudaEventElapsedTime(&ms, e_def2, e_def)));
    g_release = 1;
    CHECK(cudaEventSynchronize(e_def));
    printf("query(released): %s\n", en(cudaEventQuery(e_def)));
    cudaGetLastError();

    // Record flags: external recording is only meaningful in graph capture.
    printf("record with cudaEventRecordExternal (not capturing): %s\n",
           en(cudaEventRecordWithFlags(e_def, s1, cudaEventRecordExternal)));
    cudaGetLastError();
    CHECK(cudaStreamSynchronize(s1));
    printf("record with bad flags: %s\n", en(cudaEventRecordWithFlags(e_def, s1, 0x80)));
    cudaGetLastError();

    // Default-stream records.
    CHECK(cudaEventRecord(e_def));
    CHECK(cudaEventRecord(e_def2, 0));
    CHECK(cudaEventSynchronize(e_def2));
    CHECK(cudaEventElapsedTime(&ms, e_def, e_def2));
    printf("default-stream elapsed >= 0: %s\n", ms >= 0.0f ? "yes" : "no");

    CHECK(cudaEventDestroy(e_def));
    CHECK(cudaEventDestroy(e_def2));
    CHECK(cudaEventDestroy(e_nt));
    CHECK(cudaEventDestroy(e_bs));
    CHECK(cudaEventDestroy(e_bsnt));
    CHECK(cudaStreamDestroy(s1));
    CHECK(cudaStreamDestroy(s2));
    CHECK(cudaFree(d));
    printf("done\n");
    return 0;
}
