// device_pair: work on two devices from one program, and copies, streams, events and
// frees that cross between them, issued with either device current. The two devices
// are argv[1] and argv[2] (default: 0 and 1 when there are two, else 0 twice), and
// nothing printed depends on which they are, so `device_pair 0 1` over two devices
// prints what `device_pair 0 0` prints natively on one.
//
// With `--wait` it stops after the set-up and reads one line from stdin before the
// second round, then reports each device's calls instead of stopping at the first
// failure: a test loses one device's host there, and the other device must go on.
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
#define EXPECT(cond) do { if (!(cond)) { \
    printf("MISMATCH %s:%d %s\n", base_name(__FILE__), __LINE__, #cond); exit(1); } } while (0)

__global__ void scale(const float* x, float* y, float by, int n) {
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) y[i] = x[i] * by;
}

static const int N = (1 << 18) + 3;

static std::vector<float> pattern(int side) {
    std::vector<float> v(N);
    for (int i = 0; i < N; i++) v[i] = float(i % 1000) + 1000.0f * side;
    return v;
}

static double sum(const std::vector<float>& v) {
    double s = 0;
    for (float f : v) s += f;
    return s;
}

int main(int argc, char** argv) {
    bool wait = false;
    std::vector<int> picked;
    for (int i = 1; i < argc; i++) {
        if (!strcmp(argv[i], "--wait")) wait = true;
        else picked.push_back(atoi(argv[i]));
    }
    int count = 0;
    CHECK(cudaGetDeviceCount(&count));
    int dev[2] = {0, count > 1 ? 1 : 0};
    for (size_t i = 0; i < picked.size() && i < 2; i++) dev[i] = picked[i];
    printf("devices used: 2\n");

    // Each side: its pattern in, a kernel on its own device, both read back.
    float* x[2];
    float* y[2];
    for (int p = 0; p < 2; p++) {
        CHECK(cudaSetDevice(dev[p]));
        int now = -1;
        CHECK(cudaGetDevice(&now));
        EXPECT(now == dev[p]);
        CHECK(cudaMalloc(&x[p], N * sizeof(float)));
        CHECK(cudaMalloc(&y[p], N * sizeof(float)));
        std::vector<float> in = pattern(p);
        CHECK(cudaMemcpy(x[p], in.data(), N * sizeof(float), cudaMemcpyHostToDevice));
        scale<<<(N + 255) / 256, 256>>>(x[p], y[p], float(p + 2), N);
        CHECK(cudaGetLastError());
        std::vector<float> back(N), out(N);
        CHECK(cudaMemcpy(back.data(), x[p], N * sizeof(float), cudaMemcpyDeviceToHost));
        EXPECT(back == in);
        CHECK(cudaMemcpy(out.data(), y[p], N * sizeof(float), cudaMemcpyDeviceToHost));
        printf("side %d: scaled checksum %.1f (expect %.1f)\n", p, sum(out), sum(in) * (p + 2));
    }
    for (int p = 0; p < 2; p++) {
        cudaPointerAttributes a;
        CHECK(cudaPointerGetAttributes(&a, x[p]));
        EXPECT(a.type == cudaMemoryTypeDevice && a.device == dev[p]);
    }
    // No two allocations share an address, whichever device made them.
    EXPECT(x[0] != x[1] && y[0] != y[1] && x[0] != y[1] && x[1] != y[0]);

    // With the first device current: copies into, out of and between the second's memory.
    CHECK(cudaSetDevice(dev[0]));
    CHECK(cudaMemcpyPeer(x[1], dev[1], x[0], dev[0], N * sizeof(float)));
    std::vector<float> got(N);
    CHECK(cudaMemcpy(got.data(), x[1], N * sizeof(float), cudaMemcpyDefault));
    EXPECT(got == pattern(0));
    // A memset runs on the current device: the memory's own device does it (another
    // device reaches it only as a peer). DEVICE_PAIR_NOT_PEERS=1: the two are known not
    // to be peers, so the first device's memset of the second's memory is refused.
    if (getenv("DEVICE_PAIR_NOT_PEERS")) {
        EXPECT(cudaMemset(x[1], 0, 16) == cudaErrorInvalidValue);
        EXPECT(cudaGetLastError() == cudaErrorInvalidValue);
        printf("memset of the other device's memory: refused\n");
    }
    CHECK(cudaSetDevice(dev[1]));
    CHECK(cudaMemset(x[1], 0, 1024 * sizeof(float)));
    CHECK(cudaSetDevice(dev[0]));
    CHECK(cudaMemcpy(x[0], x[1], N * sizeof(float), cudaMemcpyDefault));
    CHECK(cudaMemcpy(got.data(), x[0], N * sizeof(float), cudaMemcpyDeviceToHost));
    EXPECT(got[0] == 0.0f && got[1023] == 0.0f && got[1024] == pattern(0)[1024]);
    printf("cross copies: ok\n");

    // A stream and event of the second device, used with the first current.
    CHECK(cudaSetDevice(dev[1]));
    cudaStream_t s1;
    cudaEvent_t e1;
    CHECK(cudaStreamCreate(&s1));
    CHECK(cudaEventCreate(&e1));
    std::vector<float> two = pattern(1);
    CHECK(cudaMemcpyAsync(y[1], two.data(), N * sizeof(float), cudaMemcpyHostToDevice, s1));
    CHECK(cudaEventRecord(e1, s1));
    CHECK(cudaSetDevice(dev[0]));
    cudaStream_t s0;
    CHECK(cudaStreamCreate(&s0));
    CHECK(cudaStreamWaitEvent(s0, e1, 0));
    CHECK(cudaMemcpyAsync(y[0], y[1], N * sizeof(float), cudaMemcpyDefault, s0));
    CHECK(cudaStreamSynchronize(s0));
    CHECK(cudaEventSynchronize(e1));
    CHECK(cudaStreamSynchronize(s1));
    EXPECT(cudaEventQuery(e1) == cudaSuccess);
    CHECK(cudaMemcpy(got.data(), y[0], N * sizeof(float), cudaMemcpyDeviceToHost));
    EXPECT(got == two);
    printf("streams and events across devices: ok\n");

    // One thread per device, each with its own current device.
    std::vector<std::thread> threads;
    int results[2] = {-1, -1};
    for (int p = 0; p < 2; p++) {
        threads.emplace_back([&, p] {
            if (cudaSetDevice(dev[p]) != cudaSuccess) return;
            int now = -1;
            cudaGetDevice(&now);
            std::vector<float> in = pattern(p), back(N);
            float* z = nullptr;
            bool ok = now == dev[p] && cudaMalloc(&z, N * sizeof(float)) == cudaSuccess &&
                      cudaMemcpy(z, in.data(), N * sizeof(float), cudaMemcpyHostToDevice) == cudaSuccess &&
                      cudaMemcpy(back.data(), z, N * sizeof(float), cudaMemcpyDeviceToHost) == cudaSuccess &&
                      back == in && cudaFree(z) == cudaSuccess;
            results[p] = ok ? 1 : 0;
        });
    }
    for (auto& t : threads) t.join();
    EXPECT(results[0] == 1 && results[1] == 1);
    printf("threads: ok\n");

    if (wait) {
        printf("ready\n");
        fflush(stdout);
        char line[16];
        if (!fgets(line, sizeof line, stdin)) return 2;
        // Each device on its own: one host may be gone.
        for (int p = 0; p < 2; p++) {
            cudaError_t set = cudaSetDevice(dev[p]);
            std::vector<float> back(16);
            cudaError_t copy = cudaMemcpy(back.data(), x[p], 16 * sizeof(float), cudaMemcpyDeviceToHost);
            cudaError_t sync = cudaDeviceSynchronize();
            printf("after: side %d set %s copy %s sync %s data %s\n", p, cudaGetErrorName(set),
                   cudaGetErrorName(copy), cudaGetErrorName(sync),
                   copy == cudaSuccess && back[5] == 0.0f ? "ok" : "-");
        }
        return 0;
    }

    // Frees of the second device's memory with the first current.
    CHECK(cudaSetDevice(dev[0]));
    CHECK(cudaFree(x[1]));
    CHECK(cudaFree(y[1]));
    CHECK(cudaStreamDestroy(s1));
    CHECK(cudaEventDestroy(e1));
    CHECK(cudaStreamDestroy(s0));
    CHECK(cudaFree(x[0]));
    CHECK(cudaFree(y[0]));
    for (int p = 0; p < 2; p++) {
        CHECK(cudaSetDevice(dev[p]));
        CHECK(cudaDeviceSynchronize());
    }
    printf("device_pair: PASS\n");
    return 0;
}
