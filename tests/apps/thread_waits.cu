// thread_waits: one thread waits for its kernel, which spins until a kernel that
// another thread launches only after the wait began sets a flag; natively the second
// launch goes ahead while the first thread waits. Waited three ways:
// cudaStreamSynchronize, cudaEventSynchronize and cudaDeviceSynchronize. The spinning
// kernel gives up after about a second, so a wait that held up the other thread's
// launch shows as "no" instead of hanging.
#include <atomic>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <thread>
#include <cuda_runtime.h>

static const char* base_name(const char* p) { const char* s = strrchr(p, '/'); return s ? s + 1 : p; }
#define CHECK(call) do { cudaError_t e_ = (call); if (e_ != cudaSuccess) { \
    printf("FAIL %s:%d %s\n", base_name(__FILE__), __LINE__, cudaGetErrorName(e_)); exit(1); } } while (0)

__global__ void spin_until(volatile int* flag, int* seen, long long limit) {
    long long start = clock64();
    while (*flag == 0 && clock64() - start < limit) {
    }
    *seen = *flag;
}

__global__ void set_flag(int* flag) { atomicExch(flag, 1); }

int main() {
    int clock_khz = 0;
    CHECK(cudaDeviceGetAttribute(&clock_khz, cudaDevAttrClockRate, 0));
    const long long limit = (long long)clock_khz * 1000;  // about a second
    int *flag, *seen;
    CHECK(cudaMalloc(&flag, sizeof(int)));
    CHECK(cudaMalloc(&seen, sizeof(int)));
    // Both kernels loaded before any wait (with lazy loading, a first launch of a
    // kernel waits for the kernels running).
    set_flag<<<1, 1>>>(flag);
    spin_until<<<1, 1>>>(flag, seen, 1);
    CHECK(cudaDeviceSynchronize());
    const char* ways[] = {"cudaStreamSynchronize", "cudaEventSynchronize", "cudaDeviceSynchronize"};
    for (int way = 0; way < 3; way++) {
        CHECK(cudaMemset(flag, 0, sizeof(int)));
        CHECK(cudaMemset(seen, 0, sizeof(int)));
        CHECK(cudaDeviceSynchronize());
        std::atomic<bool> ready{false}, waiting{false};
        std::thread other([&] {
            cudaStream_t s;
            CHECK(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking));
            ready.store(true);
            while (!waiting.load()) std::this_thread::yield();
            // Well after the first thread began its wait.
            std::this_thread::sleep_for(std::chrono::milliseconds(100));
            set_flag<<<1, 1, 0, s>>>(flag);
            CHECK(cudaStreamSynchronize(s));
            CHECK(cudaStreamDestroy(s));
        });
        while (!ready.load()) std::this_thread::yield();
        cudaStream_t s;
        CHECK(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking));
        cudaEvent_t done;
        CHECK(cudaEventCreateWithFlags(&done, cudaEventDisableTiming));
        spin_until<<<1, 1, 0, s>>>(flag, seen, limit);
        CHECK(cudaEventRecord(done, s));
        waiting.store(true);
        if (way == 0) CHECK(cudaStreamSynchronize(s));
        if (way == 1) CHECK(cudaEventSynchronize(done));
        if (way == 2) CHECK(cudaDeviceSynchronize());
        other.join();
        int h = 0;
        CHECK(cudaMemcpy(&h, seen, sizeof(int), cudaMemcpyDeviceToHost));
        printf("%s: the other thread's kernel ran during the wait: %s\n", ways[way], h ? "yes" : "no");
        CHECK(cudaEventDestroy(done));
        CHECK(cudaStreamDestroy(s));
    }
    CHECK(cudaFree(flag));
    CHECK(cudaFree(seen));
    printf("thread_waits done\n");
    return 0;
}
