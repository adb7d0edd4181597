// ipc_copy: what CUDA IPC costs a process that opens another's memory. The program
// forks before touching CUDA; the parent allocates 1 GiB, fills it and passes its IPC
// handle over a pipe; the child opens it and measures
//   open_first_us      the first cudaIpcOpenMemHandle of the handle
//   open_close_us      a cudaIpcCloseMemHandle and a cudaIpcOpenMemHandle again (median
//                      of 50)
//   import_copy_GBps   device-to-device copies of the whole 1 GiB from the opened memory
//                      into its own allocation (bytes copied over the time, median of 5
//                      runs of 10 copies, timed with events)
//   own_copy_GBps      the same between two allocations of its own, for reference
// and checks the bytes it copied. Prints `RESULT key value unit` lines, then PASS or FAIL.
#include <algorithm>
#include <chrono>
#include <vector>

// The checks, pipe reads and writes and the child's fork of the IPC test programs.
#include "../tests/apps/ipc_common.h"

// IPC_COPY_MIB=N copies N MiB instead (a quick check on the test double).
static size_t BYTES = size_t(1) << 30;

static double now_us() {
    return std::chrono::duration<double, std::micro>(
               std::chrono::steady_clock::now().time_since_epoch()).count();
}

static double median(std::vector<double> v) {
    std::sort(v.begin(), v.end());
    return v[v.size() / 2];
}

// GB/s of `dst <- src` copies of BYTES: median of 5 runs of 10.
static double copy_rate(void* dst, const void* src, cudaStream_t s) {
    cudaEvent_t a, b;
    CHECK(cudaEventCreate(&a));
    CHECK(cudaEventCreate(&b));
    CHECK(cudaMemcpyAsync(dst, src, BYTES, cudaMemcpyDeviceToDevice, s));
    CHECK(cudaStreamSynchronize(s));
    std::vector<double> rates;
    for (int run = 0; run < 5; run++) {
        CHECK(cudaEventRecord(a, s));
        for (int i = 0; i < 10; i++)
            CHECK(cudaMemcpyAsync(dst, src, BYTES, cudaMemcpyDeviceToDevice, s));
        CHECK(cudaEventRecord(b, s));
        CHECK(cudaEventSynchronize(b));
        float ms = 0;
        CHECK(cudaEventElapsedTime(&ms, a, b));
        rates.push_back(10.0 * BYTES / (ms * 1e-3) / 1e9);
    }
    CHECK(cudaEventDestroy(a));
    CHECK(cudaEventDestroy(b));
    return median(rates);
}

static int importer(int, int from_parent, int to_parent) {
    cudaIpcMemHandle_t handle;
    get(from_parent, &handle, sizeof handle);
    CHECK(cudaSetDevice(0));
    void* own = nullptr;
    void* other = nullptr;
    CHECK(cudaMalloc(&own, BYTES));
    CHECK(cudaMalloc(&other, BYTES));
    cudaStream_t s;
    CHECK(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking));
    void* theirs = nullptr;
    double t0 = now_us();
    CHECK(cudaIpcOpenMemHandle(&theirs, handle, cudaIpcMemLazyEnablePeerAccess));
    printf("RESULT open_first_us %.1f us\n", now_us() - t0);
    std::vector<double> cycles;
    for (int i = 0; i < 50; i++) {
        double t = now_us();
        CHECK(cudaIpcCloseMemHandle(theirs));
        CHECK(cudaIpcOpenMemHandle(&theirs, handle, cudaIpcMemLazyEnablePeerAccess));
        cycles.push_back(now_us() - t);
    }
    printf("RESULT open_close_us %.1f us\n", median(cycles));
    printf("RESULT import_copy_GBps %.1f GB/s\n", copy_rate(own, theirs, s));
    printf("RESULT own_copy_GBps %.1f GB/s\n", copy_rate(other, own, s));
    // The parent filled its memory with bytes of 0x5a: the copies carried them.
    std::vector<unsigned char> probe(1 << 20);
    bool same = true;
    for (size_t at : {size_t(0), BYTES / 2, BYTES - probe.size()}) {
        CHECK(cudaMemcpy(probe.data(), (char*)own + at, probe.size(), cudaMemcpyDeviceToHost));
        same &= std::all_of(probe.begin(), probe.end(), [](unsigned char c) { return c == 0x5a; });
    }
    CHECK(cudaIpcCloseMemHandle(theirs));
    CHECK(cudaFree(own));
    CHECK(cudaFree(other));
    char done = same ? 'Y' : 'N';
    put(to_parent, &done, 1);
    return same ? 0 : 1;
}

int main() {
    if (const char* mib = getenv("IPC_COPY_MIB")) BYTES = size_t(atoi(mib)) << 20;
    Child child = fork_importer(false, importer);
    CHECK(cudaSetDevice(0));
    void* mine = nullptr;
    CHECK(cudaMalloc(&mine, BYTES));
    CHECK(cudaMemset(mine, 0x5a, BYTES));
    CHECK(cudaDeviceSynchronize());
    cudaIpcMemHandle_t handle;
    CHECK(cudaIpcGetMemHandle(&handle, mine));
    put(child.to_child, &handle, sizeof handle);
    char done = 0;
    get(child.from_child, &done, 1);
    int rc = wait_for_exit(child);
    CHECK(cudaFree(mine));
    bool ok = done == 'Y' && rc == 0;
    printf("%s ipc_copy\n", ok ? "PASS" : "FAIL");
    return ok ? 0 : 1;
}
