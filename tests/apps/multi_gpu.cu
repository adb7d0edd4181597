// multi_gpu: several GPUs in one program, with any number of devices from one up.
//   - cudaGetDeviceCount, each device's compute capability, cudaSetDevice of a device
//     that is not there;
//   - host threads on their own devices at once: each sets its device, allocates,
//     copies, launches, reads cudaGetDevice back and asks where its pointer lives;
//   - with two or more devices, devices 0 and 1 against each other:
//     cudaDeviceCanAccessPeer both ways, cudaMemcpyPeer and cudaMemcpyPeerAsync,
//     cudaMemcpy with cudaMemcpyDefault between their pointers (and the host) while
//     device 0 is current, cudaPointerGetAttributes naming the owning device, an event
//     recorded on a device-1 stream and waited for by a device-0 stream; where the two
//     can reach each other, peer access enabled both ways (a second enable says it
//     already is), a kernel on device 0 reading and one writing device 1's memory,
//     peer copies with access on, and peer access disabled again.
// stdout holds nothing that differs between machines of the same devices (no names,
// UUIDs, bus ids or clocks), so a native run and a bridged one print the same.
// Kernel results are checked where a probe kernel shows that kernels execute (the
// host-memory test executor records launches without running them); they are printed
// either way. Everything else is checked always.
#include <atomic>
#include <cstdint>
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

static bool kernels_run = false;

__global__ void probe(unsigned* p) { *p = 0x600df00du; }

__global__ void affine(unsigned* y, const unsigned* x, unsigned a, unsigned b, size_t n) {
    size_t i = (size_t)blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) y[i] = a * x[i] + b;
}

__global__ void add_one(unsigned* p, size_t n) {
    size_t i = (size_t)blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) p[i] += 1;
}

// Keeps its stream busy for a while, so that work waiting on the stream's event
// would read stale data if the wait were not honoured.
__global__ void spin(long long cycles) {
    long long t0 = clock64();
    while (clock64() - t0 < cycles) {
    }
}

static unsigned pattern(size_t i, unsigned seed) { return (unsigned)(i * 2654435761u) ^ (seed * 0x9e3779b9u); }

static std::vector<unsigned> patterned(size_t n, unsigned seed) {
    std::vector<unsigned> v(n);
    for (size_t i = 0; i < n; i++) v[i] = pattern(i, seed);
    return v;
}

static unsigned long long checksum(const unsigned* p, size_t n) {
    unsigned long long s = 0;
    for (size_t i = 0; i < n; i++) s = s * 1000003ull + p[i];
    return s;
}

static int current_device() {
    int d = -1;
    CHECK(cudaGetDevice(&d));
    return d;
}

// Every device idle; the current device is left as it was.
static void sync_all(int count) {
    int cur = current_device();
    for (int d = 0; d < count; d++) {
        CHECK(cudaSetDevice(d));
        CHECK(cudaDeviceSynchronize());
    }
    CHECK(cudaSetDevice(cur));
}

// Device memory read back with its own device current (the plain way, so that what is
// checked is the copy under test, not the read).
static std::vector<unsigned> read_back(int dev, const unsigned* p, size_t n) {
    int cur = current_device();
    CHECK(cudaSetDevice(dev));
    std::vector<unsigned> v(n);
    CHECK(cudaMemcpy(v.data(), p, n * sizeof(unsigned), cudaMemcpyDeviceToHost));
    CHECK(cudaSetDevice(cur));
    return v;
}

static void expect_on(const char* what, const void* p, int dev) {
    cudaPointerAttributes a;
    memset(&a, 0, sizeof(a));
    CHECK(cudaPointerGetAttributes(&a, p));
    printf("pointer attributes of %s: type %s, device %d\n", what,
           a.type == cudaMemoryTypeDevice ? "Device" : "not Device", a.device);
    EXPECT(a.type == cudaMemoryTypeDevice);
    EXPECT(a.device == dev);
}

// ------------------------------------------------------------------ threads

const int ITERS = 6;
const size_t TN = 1 << 16;

struct ThreadResult {
    int device;
    int pointer_device;
    unsigned long long sum;
    size_t wrong;
};

static void worker(int t, int dev, int nthreads, std::atomic<int>* ready, ThreadResult* r) {
    // Every thread sets its device before any starts work, so that the runtime has
    // different current devices on different threads at the same time.
    CHECK(cudaSetDevice(dev));
    ready->fetch_add(1);
    while (ready->load() < nthreads) std::this_thread::yield();
    cudaStream_t s;
    CHECK(cudaStreamCreateWithFlags(&s, t % 2 ? cudaStreamNonBlocking : cudaStreamDefault));
    unsigned *dx, *dy;
    CHECK(cudaMalloc(&dx, TN * sizeof(unsigned)));
    CHECK(cudaMalloc(&dy, TN * sizeof(unsigned)));
    std::vector<unsigned> hy(TN), back(TN);
    r->device = dev;
    r->sum = 0;
    r->wrong = 0;
    const unsigned a = 2 * t + 3;
    for (int it = 0; it < ITERS; it++) {
        std::vector<unsigned> hx = patterned(TN, 100 * t + it);
        const unsigned b = 1000 * dev + it;
        CHECK(cudaMemcpyAsync(dx, hx.data(), TN * sizeof(unsigned), cudaMemcpyHostToDevice, s));
        CHECK(cudaMemsetAsync(dy, 0, TN * sizeof(unsigned), s));
        CHECK(cudaMemcpyAsync(back.data(), dx, TN * sizeof(unsigned), cudaMemcpyDeviceToHost, s));
        affine<<<(TN + 255) / 256, 256, 0, s>>>(dy, dx, a, b, TN);
        CHECK(cudaGetLastError());
        CHECK(cudaMemcpyAsync(hy.data(), dy, TN * sizeof(unsigned), cudaMemcpyDeviceToHost, s));
        CHECK(cudaStreamSynchronize(s));
        EXPECT(memcmp(back.data(), hx.data(), TN * sizeof(unsigned)) == 0);
        for (size_t i = 0; i < TN; i++) {
            if (hy[i] != a * hx[i] + b) r->wrong++;
        }
        r->sum += checksum(hy.data(), TN);
        EXPECT(current_device() == dev);
    }
    cudaPointerAttributes pa;
    memset(&pa, 0, sizeof(pa));
    CHECK(cudaPointerGetAttributes(&pa, dy));
    EXPECT(pa.type == cudaMemoryTypeDevice);
    r->pointer_device = pa.device;
    CHECK(cudaFree(dx));
    CHECK(cudaFree(dy));
    CHECK(cudaStreamDestroy(s));
    EXPECT(current_device() == dev);
}

static void thread_checks(int count) {
    int nthreads = count * 2 < 4 ? 4 : (count * 2 > 8 ? 8 : count * 2);
    std::vector<ThreadResult> res(nthreads);
    std::atomic<int> ready{0};
    std::vector<std::thread> th;
    for (int t = 0; t < nthreads; t++) th.emplace_back(worker, t, t % count, nthreads, &ready, &res[t]);
    for (auto& t : th) t.join();
    for (int t = 0; t < nthreads; t++) {
        const ThreadResult& r = res[t];
        printf("thread %d on device %d: cudaGetDevice ok, pointer on device %d, kernel checksum %llu, wrong %zu\n",
               t, r.device, r.pointer_device, r.sum, r.wrong);
        EXPECT(r.pointer_device == r.device);
        if (kernels_run) EXPECT(r.wrong == 0);
    }
    // The workers' cudaSetDevice calls were theirs alone.
    EXPECT(current_device() == 0);
    printf("threads on their own devices at once: %d threads over %d device(s)\n", nthreads, count);
}

// ------------------------------------------------------------------ peers

static void peer_checks(int count) {
    const size_t N = (4u << 20) / sizeof(unsigned);  // 4 MiB buffers
    const size_t BYTES = N * sizeof(unsigned);
    const unsigned GRID = (unsigned)((N + 255) / 256);
    if (count > 2) printf("peer checks use devices 0 and 1 of %d\n", count);

    int can01 = -1, can10 = -1;
    CHECK(cudaDeviceCanAccessPeer(&can01, 0, 1));
    CHECK(cudaDeviceCanAccessPeer(&can10, 1, 0));
    printf("cudaDeviceCanAccessPeer(0,1): %d, (1,0): %d\n", can01, can10);
    EXPECT(can01 == 0 || can01 == 1);
    EXPECT(can10 == 0 || can10 == 1);

    // Nothing is enabled yet.
    CHECK(cudaSetDevice(0));
    cudaError_t e = cudaDeviceDisablePeerAccess(1);
    printf("cudaDeviceDisablePeerAccess(1) before any enable: %s\n", cudaGetErrorName(e));
    EXPECT(e == cudaErrorPeerAccessNotEnabled);
    cudaGetLastError();

    unsigned *a0, *c0, *b1, *c1, *hp, *hq;
    cudaStream_t s0, s1;
    cudaEvent_t e1;
    CHECK(cudaSetDevice(0));
    CHECK(cudaMalloc(&a0, BYTES));
    CHECK(cudaMalloc(&c0, BYTES));
    CHECK(cudaStreamCreateWithFlags(&s0, cudaStreamNonBlocking));
    CHECK(cudaSetDevice(1));
    CHECK(cudaMalloc(&b1, BYTES));
    CHECK(cudaMalloc(&c1, BYTES));
    CHECK(cudaStreamCreateWithFlags(&s1, cudaStreamNonBlocking));
    CHECK(cudaEventCreateWithFlags(&e1, cudaEventDisableTiming));
    CHECK(cudaHostAlloc(&hp, BYTES, cudaHostAllocPortable));
    CHECK(cudaHostAlloc(&hq, BYTES, cudaHostAllocPortable));
    CHECK(cudaSetDevice(0));

    expect_on("device 0's buffer", a0, 0);
    expect_on("device 1's buffer", b1, 1);
    expect_on("device 1's buffer + 4 KiB", (const char*)b1 + 4096, 1);

    // Peer copies without peer access.
    std::vector<unsigned> src = patterned(N, 1);
    CHECK(cudaMemcpy(a0, src.data(), BYTES, cudaMemcpyHostToDevice));
    CHECK(cudaMemcpyPeer(b1, 1, a0, 0, BYTES));
    sync_all(count);
    EXPECT(read_back(1, b1, N) == src);
    CHECK(cudaMemsetAsync(c0, 0, BYTES, s0));
    CHECK(cudaMemcpyPeerAsync(c0, 0, b1, 1, BYTES, s0));
    CHECK(cudaStreamSynchronize(s0));
    EXPECT(read_back(0, c0, N) == src);
    printf("cudaMemcpyPeer 0->1 and cudaMemcpyPeerAsync 1->0, 4 MiB: ok, checksum %llu\n",
           checksum(src.data(), N));

    // cudaMemcpyDefault with device 0 current: the pointers say where the bytes are.
    std::vector<unsigned> src2 = patterned(N, 2), back(N, 0);
    CHECK(cudaMemcpy(b1, src2.data(), BYTES, cudaMemcpyDefault));  // host -> device 1
    CHECK(cudaMemcpy(c0, b1, BYTES, cudaMemcpyDefault));           // device 1 -> device 0
    CHECK(cudaMemcpy(c1, c0, BYTES, cudaMemcpyDefault));           // device 0 -> device 1
    sync_all(count);
    CHECK(cudaMemcpy(back.data(), c1, BYTES, cudaMemcpyDefault));  // device 1 -> host
    EXPECT(back == src2);
    EXPECT(read_back(0, c0, N) == src2);
    EXPECT(current_device() == 0);
    printf("cudaMemcpyDefault host->1, 1->0, 0->1, 1->host with device 0 current: ok, checksum %llu\n",
           checksum(src2.data(), N));

    // An event of a device-1 stream, waited for by a device-0 stream: device 1 loads,
    // dawdles, then adds one; device 0 copies the result over only after the event.
    std::vector<unsigned> src3 = patterned(N, 3);
    memcpy(hp, src3.data(), BYTES);
    CHECK(cudaSetDevice(1));
    CHECK(cudaMemcpyAsync(b1, hp, BYTES, cudaMemcpyHostToDevice, s1));
    spin<<<1, 1, 0, s1>>>(50 * 1000 * 1000);
    add_one<<<GRID, 256, 0, s1>>>(b1, N);
    CHECK(cudaGetLastError());
    CHECK(cudaEventRecord(e1, s1));
    CHECK(cudaSetDevice(0));
    CHECK(cudaStreamWaitEvent(s0, e1, 0));
    CHECK(cudaMemcpyPeerAsync(c0, 0, b1, 1, BYTES, s0));
    CHECK(cudaMemcpyAsync(hq, c0, BYTES, cudaMemcpyDeviceToHost, s0));
    CHECK(cudaStreamSynchronize(s0));
    // Device 0's stream waited for it, so it has happened.
    CHECK(cudaEventQuery(e1));
    size_t stale = 0;
    for (size_t i = 0; i < N; i++) {
        if (hq[i] != src3[i] + (kernels_run ? 1u : 0u)) stale++;
    }
    printf("event recorded on a device-1 stream, waited for by a device-0 stream: stale words %zu, checksum %llu\n",
           stale, checksum(hq, N));
    EXPECT(stale == 0);

    if (can01 && can10) {
        CHECK(cudaSetDevice(0));
        e = cudaDeviceEnablePeerAccess(1, 0);
        printf("cudaDeviceEnablePeerAccess(1) on device 0: %s\n", cudaGetErrorName(e));
        EXPECT(e == cudaSuccess);
        e = cudaDeviceEnablePeerAccess(1, 0);
        printf("cudaDeviceEnablePeerAccess(1) on device 0 again: %s\n", cudaGetErrorName(e));
        EXPECT(e == cudaErrorPeerAccessAlreadyEnabled);
        cudaError_t last = cudaGetLastError();
        cudaError_t after = cudaGetLastError();
        printf("cudaGetLastError: %s, then %s\n", cudaGetErrorName(last), cudaGetErrorName(after));
        EXPECT(after == cudaSuccess);
        CHECK(cudaSetDevice(1));
        e = cudaDeviceEnablePeerAccess(0, 0);
        printf("cudaDeviceEnablePeerAccess(0) on device 1: %s\n", cudaGetErrorName(e));
        EXPECT(e == cudaSuccess);

        // Kernels on device 0 reading device 1's memory, and writing into it.
        std::vector<unsigned> src4 = patterned(N, 4), src5 = patterned(N, 5);
        CHECK(cudaMemcpy(b1, src4.data(), BYTES, cudaMemcpyHostToDevice));
        CHECK(cudaMemset(c1, 0, BYTES));
        CHECK(cudaSetDevice(0));
        CHECK(cudaMemcpy(a0, src5.data(), BYTES, cudaMemcpyHostToDevice));
        CHECK(cudaMemset(c0, 0, BYTES));
        sync_all(count);
        affine<<<GRID, 256>>>(c0, b1, 5, 11, N);  // reads device 1
        affine<<<GRID, 256>>>(c1, a0, 7, 13, N);  // writes device 1
        CHECK(cudaGetLastError());
        sync_all(count);
        std::vector<unsigned> r0 = read_back(0, c0, N), r1 = read_back(1, c1, N);
        size_t wrong0 = 0, wrong1 = 0;
        for (size_t i = 0; i < N; i++) {
            if (r0[i] != 5 * src4[i] + 11) wrong0++;
            if (r1[i] != 7 * src5[i] + 13) wrong1++;
        }
        printf("kernel on device 0 reading device 1's memory: checksum %llu, wrong %zu\n", checksum(r0.data(), N), wrong0);
        printf("kernel on device 0 writing device 1's memory: checksum %llu, wrong %zu\n", checksum(r1.data(), N), wrong1);
        if (kernels_run) EXPECT(wrong0 == 0 && wrong1 == 0);

        // Peer copies with access on.
        CHECK(cudaMemcpyPeer(c1, 1, a0, 0, BYTES));
        CHECK(cudaMemcpyPeerAsync(c0, 0, b1, 1, BYTES, s0));
        CHECK(cudaStreamSynchronize(s0));
        sync_all(count);
        EXPECT(read_back(1, c1, N) == src5);
        EXPECT(read_back(0, c0, N) == src4);
        printf("cudaMemcpyPeer 0->1 and cudaMemcpyPeerAsync 1->0 with peer access on: ok\n");

        CHECK(cudaSetDevice(0));
        e = cudaDeviceDisablePeerAccess(1);
        printf("cudaDeviceDisablePeerAccess(1) on device 0: %s\n", cudaGetErrorName(e));
        EXPECT(e == cudaSuccess);
        e = cudaDeviceDisablePeerAccess(1);
        printf("cudaDeviceDisablePeerAccess(1) on device 0 again: %s\n", cudaGetErrorName(e));
        EXPECT(e == cudaErrorPeerAccessNotEnabled);
        cudaGetLastError();
        EXPECT(cudaGetLastError() == cudaSuccess);
        CHECK(cudaSetDevice(1));
        e = cudaDeviceDisablePeerAccess(0);
        printf("cudaDeviceDisablePeerAccess(0) on device 1: %s\n", cudaGetErrorName(e));
        EXPECT(e == cudaSuccess);
        CHECK(cudaSetDevice(0));

        // Copies between the devices go on without it.
        CHECK(cudaMemcpyPeer(b1, 1, a0, 0, BYTES));
        sync_all(count);
        EXPECT(read_back(1, b1, N) == src5);
        printf("cudaMemcpyPeer 0->1 after peer access is disabled: ok\n");
    } else {
        CHECK(cudaSetDevice(0));
        e = cudaDeviceEnablePeerAccess(1, 0);
        printf("devices 0 and 1 cannot access each other; cudaDeviceEnablePeerAccess(1) on device 0: %s\n",
               cudaGetErrorName(e));
        EXPECT(e != cudaSuccess);
        cudaGetLastError();
        printf("direct-access checks skipped: no peer access between devices 0 and 1\n");
    }

    CHECK(cudaSetDevice(1));
    CHECK(cudaEventDestroy(e1));
    CHECK(cudaStreamDestroy(s1));
    CHECK(cudaFree(b1));
    CHECK(cudaFree(c1));
    CHECK(cudaSetDevice(0));
    CHECK(cudaStreamDestroy(s0));
    CHECK(cudaFree(a0));
    CHECK(cudaFree(c0));
    CHECK(cudaFreeHost(hp));
    CHECK(cudaFreeHost(hq));
    sync_all(count);
}

// ------------------------------------------------------------------ main

int main() {
    int count = 0;
    CHECK(cudaGetDeviceCount(&count));
    printf("device count: %d\n", count);
    EXPECT(count >= 1);
    for (int d = 0; d < count; d++) {
        int major = -1, minor = -1, uva = -1;
        CHECK(cudaDeviceGetAttribute(&major, cudaDevAttrComputeCapabilityMajor, d));
        CHECK(cudaDeviceGetAttribute(&minor, cudaDevAttrComputeCapabilityMinor, d));
        CHECK(cudaDeviceGetAttribute(&uva, cudaDevAttrUnifiedAddressing, d));
        printf("device %d: compute capability %d.%d, unified addressing %d\n", d, major, minor, uva);
    }
    cudaError_t e = cudaSetDevice(count);
    printf("cudaSetDevice(count): %s\n", cudaGetErrorName(e));
    EXPECT(e == cudaErrorInvalidDevice);
    cudaGetLastError();

    // The runtime comes up on the main thread first, so that an unusable device fails
    // here rather than racily in the workers; the probe tells whether kernels execute.
    CHECK(cudaSetDevice(0));
    unsigned* dp;
    unsigned word = 0;
    CHECK(cudaMalloc(&dp, sizeof(unsigned)));
    CHECK(cudaMemset(dp, 0, sizeof(unsigned)));
    probe<<<1, 1>>>(dp);
    CHECK(cudaGetLastError());
    CHECK(cudaMemcpy(&word, dp, sizeof(unsigned), cudaMemcpyDeviceToHost));
    CHECK(cudaFree(dp));
    kernels_run = word == 0x600df00du;
    printf("kernels execute: %s\n", kernels_run ? "yes" : "no (kernel results are printed, not checked)");

    thread_checks(count);
    if (count < 2) {
        printf("peer checks skipped: 1 device\n");
    } else {
        peer_checks(count);
    }
    printf("PASS multi_gpu\n");
    return 0;
}
