// build: --default-stream per-thread
// per_thread_stream: a program built with `--default-stream per-thread`, so every call
// that names the default stream (or none) goes to the calling thread's own default
// stream: the runtime's _ptsz and _ptds entry points. Four threads each fill, copy,
// memset, use a __device__ symbol and a pitched copy on their default stream; two
// threads' default streams run side by side (a kernel on one waits for a flag a kernel
// on the other sets); the main thread checks that the legacy stream waits for a
// per-thread default stream, and captures a graph from its default stream and launches
// it there. Deterministic output.
#include <atomic>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <thread>
#include <vector>
#include <cuda_runtime.h>

static const char* base_name(const char* p) { const char* s = strrchr(p, '/'); return s ? s + 1 : p; }
#define CHECK(call) do { cudaError_t e_ = (call); if (e_ != cudaSuccess) { \
    printf("FAIL %s:%d %s\n", base_name(__FILE__), __LINE__, cudaGetErrorName(e_)); exit(1); } } while (0)

const int N = 1 << 16;
__device__ int table[4][64];  // a row per thread

__global__ void fill(int* p, int n, int base, int row) {
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) p[i] = base + i % 1000 + table[row][i % 64];
}

__global__ void slow_add(int* p, int n, int v) {
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    // Long enough that a copy not ordered after it would see the old values.
    long long start = clock64();
    while (clock64() - start < 2000000) {}
    if (i < n) p[i] += v;
}

// Waits (up to 5 s of GPU time) for `flag`; `seen` says whether it came.
__global__ void wait_flag(volatile int* flag, int* seen) {
    unsigned long long start, now;
    asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(start));
    do {
        if (*flag) { *seen = 1; return; }
        asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(now));
    } while (now - start < 5000000000ull);
    *seen = 0;
}

__global__ void set_flag(volatile int* flag) { *flag = 1; }

// Thread a's default stream waits for a flag that thread b sets from its own default
// stream: natively they run side by side; one stream shared by both would make a's
// kernel time out first. Neither thread waits for its stream (the main thread waits
// for the device): through vmcuda a waited-for call holds the process's connection
// until its answer, so a thread's later calls would queue behind it.
static void side_by_side() {
    int *flag = nullptr, *seen = nullptr;
    CHECK(cudaMalloc(&flag, sizeof(int)));
    CHECK(cudaMalloc(&seen, sizeof(int)));
    // Both kernels run once first: with lazy loading (CUDA's default) a kernel's first
    // launch loads its module, which waits for the kernels running on the device.
    CHECK(cudaMemset(flag, 0xff, sizeof(int)));
    set_flag<<<1, 1>>>(flag);
    wait_flag<<<1, 1>>>(flag, seen);
    CHECK(cudaStreamSynchronize(0));
    CHECK(cudaMemset(flag, 0, sizeof(int)));
    CHECK(cudaMemset(seen, 0, sizeof(int)));
    std::atomic<bool> launched{false};
    std::thread a([&] {
        wait_flag<<<1, 1>>>(flag, seen);
        CHECK(cudaGetLastError());
        launched = true;
    });
    std::thread b([&] {
        while (!launched) std::this_thread::yield();
        std::this_thread::sleep_for(std::chrono::milliseconds(50));
        set_flag<<<1, 1>>>(flag);
        CHECK(cudaGetLastError());
    });
    a.join();
    b.join();
    CHECK(cudaDeviceSynchronize());
    int s = -1;
    CHECK(cudaMemcpy(&s, seen, sizeof(int), cudaMemcpyDeviceToHost));
    printf("two threads' default streams run side by side: %s\n", s == 1 ? "yes" : "no");
    CHECK(cudaFree(flag));
    CHECK(cudaFree(seen));
}

static std::string work(int t) {
    std::vector<int> host(N), sym(64);
    for (int i = 0; i < 64; i++) sym[i] = t * 7 + i;
    int* d = nullptr;
    CHECK(cudaMalloc(&d, N * sizeof(int)));
    const size_t row = sizeof(int) * 64;
    CHECK(cudaMemcpyToSymbol(table, sym.data(), row, t * row));       // _ptds
    fill<<<(N + 255) / 256, 256>>>(d, N, t * 100000, t);               // the thread's stream
    CHECK(cudaGetLastError());
    CHECK(cudaMemset(d + 10, 0, 4 * sizeof(int)));                    // _ptds
    CHECK(cudaMemcpy(host.data(), d, N * sizeof(int), cudaMemcpyDeviceToHost));
    long long sum = 0;
    for (int v : host) sum += v;
    // A pitched copy: the first 8 ints of 4 rows of 1024.
    std::vector<int> rows(4 * 8);
    CHECK(cudaMemcpy2D(rows.data(), 8 * sizeof(int), d, 1024 * sizeof(int), 8 * sizeof(int), 4,
                       cudaMemcpyDeviceToHost));                      // _ptds
    std::vector<int> back(64);
    CHECK(cudaMemcpyFromSymbol(back.data(), table, row, t * row));    // _ptds
    CHECK(cudaStreamSynchronize(0));
    CHECK(cudaStreamQuery(0));
    unsigned flags = 99;
    CHECK(cudaStreamGetFlags(0, &flags));
    CHECK(cudaFree(d));
    char line[256];
    snprintf(line, sizeof line, "thread %d: sum %lld d[10..13]=%d,%d d[14]=%d rows %d %d %d back[63]=%d flags %u\n", t,
             sum, host[10], host[13], host[14], rows[0], rows[8], rows[31], back[63], flags);
    return line;
}

int main() {
    std::vector<std::string> out(4);
    std::vector<std::thread> threads;
    for (int t = 0; t < 4; t++) threads.emplace_back([t, &out] { out[t] = work(t); });
    for (auto& th : threads) th.join();
    for (auto& s : out) fputs(s.c_str(), stdout);
    side_by_side();

    // The legacy stream waits for the per-thread default stream (which is blocking).
    int* x = nullptr;
    CHECK(cudaMalloc(&x, 256 * sizeof(int)));
    CHECK(cudaMemset(x, 0, 256 * sizeof(int)));
    slow_add<<<1, 256>>>(x, 256, 5);
    CHECK(cudaGetLastError());
    int* h = nullptr;
    CHECK(cudaMallocHost(&h, 256 * sizeof(int)));
    CHECK(cudaMemcpyAsync(h, x, 256 * sizeof(int), cudaMemcpyDeviceToHost, cudaStreamLegacy));
    CHECK(cudaStreamSynchronize(cudaStreamLegacy));
    printf("legacy after per-thread: h[0]=%d h[255]=%d\n", h[0], h[255]);

    // A capture from the thread's default stream, launched there.
    cudaGraph_t g;
    CHECK(cudaStreamBeginCapture(cudaStreamPerThread, cudaStreamCaptureModeThreadLocal));
    cudaStreamCaptureStatus st;
    CHECK(cudaStreamIsCapturing(0, &st));
    slow_add<<<1, 256>>>(x, 256, 1);
    CHECK(cudaStreamEndCapture(cudaStreamPerThread, &g));
    cudaGraphExec_t exec;
    CHECK(cudaGraphInstantiate(&exec, g, 0));
    for (int i = 0; i < 3; i++) CHECK(cudaGraphLaunch(exec, 0));
    CHECK(cudaMemcpy(h, x, 256 * sizeof(int), cudaMemcpyDeviceToHost));
    printf("captured while capturing=%d; after 3 launches h[7]=%d\n", (int)st, h[7]);
    CHECK(cudaGraphExecDestroy(exec));
    CHECK(cudaGraphDestroy(g));
    CHECK(cudaFreeHost(h));
    CHECK(cudaFree(x));
    // The default streams cannot be destroyed.
    printf("destroy cudaStreamPerThread: %s\n", cudaGetErrorName(cudaStreamDestroy(cudaStreamPerThread)));
    printf("done\n");
    return 0;
}
