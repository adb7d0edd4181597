// vmcuda benchmark: one program, run natively and through the bridge in the same run
// (bench/run.sh), printing "RESULT <name> <value> <unit>" lines.
//   bench               every measurement
//   bench --bandwidth MiB --seconds S   pinned H2D then D2H copies of MiB for S seconds
//                       (one of N concurrent clients)
//   bench --latency     only the small copies, launches (runtime and driver API) and
//                       cudaMalloc
//   bench --peer        only cudaMemcpyPeer from device 0 to device 1 (a note, and no
//                       results, where there is one device)
//   bench --managed     only managed memory: the CPU writes a buffer, a kernel updates
//                       it, the CPU reads it, with prefetches and without
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <vector>
#include <cuda.h>
#include <cuda_runtime.h>
#include <dlfcn.h>

#define CHECK(call) do { cudaError_t e_ = (call); if (e_ != cudaSuccess) { \
    fprintf(stderr, "FAIL %s:%d %s\n", __FILE__, __LINE__, cudaGetErrorName(e_)); exit(1); } } while (0)

using clk = std::chrono::steady_clock;
static double us_since(clk::time_point t) { return std::chrono::duration<double, std::micro>(clk::now() - t).count(); }
static double median(std::vector<double> v) { std::sort(v.begin(), v.end()); return v[v.size() / 2]; }
static void result(const char* name, double v, const char* unit) { printf("RESULT %s %.3f %s\n", name, v, unit); fflush(stdout); }

__global__ void empty() {}

__global__ void sgemm(int n, const float* a, const float* b, float* c) {
    __shared__ float ta[16][16], tb[16][16];
    int row = blockIdx.y * 16 + threadIdx.y, col = blockIdx.x * 16 + threadIdx.x;
    float acc = 0;
    for (int k0 = 0; k0 < n; k0 += 16) {
        ta[threadIdx.y][threadIdx.x] = a[row * n + k0 + threadIdx.x];
        tb[threadIdx.y][threadIdx.x] = b[(k0 + threadIdx.y) * n + col];
        __syncthreads();
        for (int k = 0; k < 16; k++) acc += ta[threadIdx.y][k] * tb[k][threadIdx.x];
        __syncthreads();
    }
    c[row * n + col] = acc;
}

static void latency(const char* name, bool pinned, bool h2d) {
    char* host;
    if (pinned) CHECK(cudaMallocHost(&host, 64)); else host = (char*)malloc(64);
    memset(host, 1, 64);
    char* dev;
    CHECK(cudaMalloc(&dev, 64));
    std::vector<double> t;
    for (int i = 0; i < 2000; i++) {
        auto s = clk::now();
        if (h2d) CHECK(cudaMemcpy(dev, host, 64, cudaMemcpyHostToDevice));
        else CHECK(cudaMemcpy(host, dev, 64, cudaMemcpyDeviceToHost));
        if (i >= 100) t.push_back(us_since(s));
    }
    result(name, median(t), "us");
    CHECK(cudaFree(dev));
    if (pinned) CHECK(cudaFreeHost(host)); else free(host);
}

static double copy_gbps(size_t bytes, bool pinned, bool h2d, int reps) {
    char* host;
    if (pinned) CHECK(cudaMallocHost(&host, bytes)); else host = (char*)malloc(bytes);
    memset(host, 7, bytes);
    char* dev;
    CHECK(cudaMalloc(&dev, bytes));
    double best = 1e30;
    for (int i = 0; i < reps + 1; i++) {
        auto s = clk::now();
        if (h2d) CHECK(cudaMemcpy(dev, host, bytes, cudaMemcpyHostToDevice));
        else CHECK(cudaMemcpy(host, dev, bytes, cudaMemcpyDeviceToHost));
        double us = us_since(s);
        if (i > 0) best = std::min(best, us);  // the first is warm-up
    }
    CHECK(cudaFree(dev));
    if (pinned) CHECK(cudaFreeHost(host)); else free(host);
    return bytes / best / 1e3;
}

static void sync_devices(int a, int b) {
    CHECK(cudaSetDevice(b)); CHECK(cudaDeviceSynchronize());
    CHECK(cudaSetDevice(a)); CHECK(cudaDeviceSynchronize());
}

// cudaMemcpyPeer from device 0 to device 1: GB/s of each size, the median of 7 timed
// rounds after one warm-up. A round is enough back-to-back copies to move 256 MiB (a
// lone 1 MiB copy is over before the clock can tell), then both devices synchronized:
// a device-to-device copy may return before it is done. First without peer access,
// then with it where the devices allow it, as a program copying between GPUs does.
static void peer_copies() {
    int count = 0;
    CHECK(cudaGetDeviceCount(&count));
    if (count < 2) {
        printf("NOTE peer copies skipped: %d device\n", count);
        return;
    }
    int can01 = 0, can10 = 0;
    CHECK(cudaDeviceCanAccessPeer(&can01, 0, 1));
    CHECK(cudaDeviceCanAccessPeer(&can10, 1, 0));
    printf("NOTE peer access between devices 0 and 1: %s\n", can01 && can10 ? "possible" : "not possible");
    const int sizes_mib[] = {1, 16, 64, 256};
    const size_t max_bytes = (size_t)256 << 20;
    char *src, *dst;
    CHECK(cudaSetDevice(1));
    CHECK(cudaMalloc(&dst, max_bytes));
    CHECK(cudaMemset(dst, 0, max_bytes));
    CHECK(cudaSetDevice(0));
    CHECK(cudaMalloc(&src, max_bytes));
    CHECK(cudaMemset(src, 5, max_bytes));
    for (int access = 0; access < 2; access++) {
        if (access) {
            if (!(can01 && can10)) break;
            CHECK(cudaDeviceEnablePeerAccess(1, 0));
            CHECK(cudaSetDevice(1));
            CHECK(cudaDeviceEnablePeerAccess(0, 0));
            CHECK(cudaSetDevice(0));
        }
        for (int mib : sizes_mib) {
            size_t bytes = (size_t)mib << 20;
            int copies = (int)(max_bytes / bytes);
            std::vector<double> t;
            for (int round = 0; round < 8; round++) {
                sync_devices(0, 1);
                auto s = clk::now();
                for (int i = 0; i < copies; i++) CHECK(cudaMemcpyPeer(dst, 1, src, 0, bytes));
                sync_devices(0, 1);
                double us = us_since(s);
                if (round > 0) t.push_back(us);
            }
            char name[64];
            snprintf(name, sizeof name, "peer_0to1_%dMiB%s", mib, access ? "" : "_no_access");
            result(name, (double)copies * bytes / median(t) / 1e3, "GB/s");
        }
    }
    // What arrived is what was sent.
    char last[4096];
    CHECK(cudaSetDevice(1));
    CHECK(cudaMemcpy(last, dst + max_bytes - sizeof last, sizeof last, cudaMemcpyDeviceToHost));
    for (char c : last) if (c != 5) { fprintf(stderr, "FAIL peer copy arrived wrong\n"); exit(1); }
    CHECK(cudaSetDevice(0));
    if (can01 && can10) {
        CHECK(cudaDeviceDisablePeerAccess(1));
        CHECK(cudaSetDevice(1));
        CHECK(cudaDeviceDisablePeerAccess(0));
        CHECK(cudaSetDevice(0));
    }
    CHECK(cudaFree(src));
    CHECK(cudaFree(dst));
}

__global__ void twice_plus_one(float* y, size_t n) {
    for (size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x; i < n; i += (size_t)gridDim.x * blockDim.x)
        y[i] = 2 * y[i] + 1;
}

// The CPU's read: eight independent sums, so that it runs at memory speed and the
// round measures the data's moves rather than one long chain of additions.
static double cpu_sum(const float* y, size_t n) {
    double part[8] = {0, 0, 0, 0, 0, 0, 0, 0};
    size_t i = 0;
    for (; i + 8 <= n; i += 8)
        for (int k = 0; k < 8; k++) part[k] += y[i + k];
    for (; i < n; i++) part[0] += y[i];
    double sum = 0;
    for (double p : part) sum += p;
    return sum;
}

// One round on managed memory of `bytes`: the CPU writes all of it, the kernel
// y = 2y + 1 runs over it, the device is synchronized, and the CPU reads and sums all
// of it; with `prefetch`, cudaMemPrefetchAsync to the device before the kernel and to
// the host after it, else the pages move when first touched. Checks what it read.
static void managed_round(float* y, size_t bytes, int round, bool prefetch) {
    size_t n = bytes / sizeof(float);
    for (size_t i = 0; i < n; i++) y[i] = (float)((i + round) & 1023);
    cudaMemLocation dev = {cudaMemLocationTypeDevice, 0}, host = {cudaMemLocationTypeHost, 0};
    if (prefetch) CHECK(cudaMemPrefetchAsync(y, bytes, dev, 0, 0));
    twice_plus_one<<<(int)std::min<size_t>(n / 256, 4096), 256>>>(y, n);
    CHECK(cudaGetLastError());
    if (prefetch) CHECK(cudaMemPrefetchAsync(y, bytes, host, 0, 0));
    CHECK(cudaDeviceSynchronize());
    double sum = cpu_sum(y, n);
    // Every residue mod 1024 appears n / 1024 times: the sum is 1024 n whatever the round.
    if (sum != 1024.0 * n || y[0] != (float)(2 * (round & 1023) + 1) ||
        y[n - 1] != (float)(2 * ((n - 1 + round) & 1023) + 1)) {
        fprintf(stderr, "FAIL managed round %d (%zu MiB, prefetch %d): sum %.0f\n", round, bytes >> 20, prefetch, sum);
        exit(1);
    }
}

// Managed memory, 16, 64 and 256 MiB: GB/s = 2 x size (to the device and back) over
// the time of a whole round (managed_round), the median of the timed rounds after one
// warm-up that places the pages. managed_cpu_only is the CPU's part alone (the same
// writes and reads on malloc'd memory, no GPU), the ceiling for the other two.
static void managed() {
    int concurrent = 0;
    CHECK(cudaDeviceGetAttribute(&concurrent, cudaDevAttrConcurrentManagedAccess, 0));
    printf("NOTE concurrentManagedAccess %d\n", concurrent);
    cudaMemLocation dev = {cudaMemLocationTypeDevice, 0};
    bool can_prefetch = true;
    {
        // CUDA documents a device as prefetch target only with concurrent managed access.
        float* probe;
        CHECK(cudaMallocManaged(&probe, 1 << 20));
        cudaError_t e = cudaMemPrefetchAsync(probe, 1 << 20, dev, 0, 0);
        if (e != cudaSuccess) {
            printf("NOTE prefetch to the device refused (%s): no prefetch-path results\n", cudaGetErrorName(e));
            (void)cudaGetLastError();
            can_prefetch = false;
        }
        CHECK(cudaDeviceSynchronize());
        CHECK(cudaFree(probe));
    }
    const int sizes_mib[] = {16, 64, 256};
    for (int mib : sizes_mib) {
        size_t bytes = (size_t)mib << 20, n = bytes / sizeof(float);
        int rounds = mib >= 256 ? 9 : mib >= 64 ? 15 : 31;
        char name[64];
        for (int mode = 0; mode < 3; mode++) {  // 0: prefetch, 1: fault, 2: CPU only
            if (mode == 0 && !can_prefetch) continue;
            float* y;
            if (mode < 2) CHECK(cudaMallocManaged(&y, bytes));
            else y = (float*)malloc(bytes);
            std::vector<double> t;
            for (int r = 0; r <= rounds; r++) {
                auto s = clk::now();
                if (mode < 2) {
                    managed_round(y, bytes, r, mode == 0);
                } else {
                    for (size_t i = 0; i < n; i++) y[i] = (float)((i + r) & 1023);
                    double sum = cpu_sum(y, n);
                    if (sum != 511.5 * n) { fprintf(stderr, "FAIL cpu-only sum %.0f\n", sum); exit(1); }
                }
                double us = us_since(s);
                if (r > 0) t.push_back(us);
            }
            if (mode < 2) CHECK(cudaFree(y));
            else free(y);
            static const char* kind[] = {"prefetch", "fault", "cpu_only"};
            snprintf(name, sizeof name, "managed_%s_%dMiB", kind[mode], mib);
            result(name, 2.0 * bytes / median(t) / 1e3, "GB/s");
        }
    }
}

static void matmul(int n) {
    size_t bytes = (size_t)n * n * sizeof(float);
    std::vector<float> a(n * (size_t)n), b(n * (size_t)n), c(n * (size_t)n);
    for (size_t i = 0; i < a.size(); i++) { a[i] = (float)(i % 7) - 3; b[i] = (float)(i % 5) - 2; }
    std::vector<double> t;
    for (int rep = 0; rep < 3; rep++) {
        auto s = clk::now();
        float *da, *db, *dc;
        CHECK(cudaMalloc(&da, bytes)); CHECK(cudaMalloc(&db, bytes)); CHECK(cudaMalloc(&dc, bytes));
        CHECK(cudaMemcpy(da, a.data(), bytes, cudaMemcpyHostToDevice));
        CHECK(cudaMemcpy(db, b.data(), bytes, cudaMemcpyHostToDevice));
        sgemm<<<dim3(n / 16, n / 16), dim3(16, 16)>>>(n, da, db, dc);
        CHECK(cudaGetLastError());
        CHECK(cudaMemcpy(c.data(), dc, bytes, cudaMemcpyDeviceToHost));
        CHECK(cudaFree(da)); CHECK(cudaFree(db)); CHECK(cudaFree(dc));
        t.push_back(us_since(s) / 1e3);
    }
    double sum = 0;
    for (size_t i = 0; i < c.size(); i += 997) sum += c[i];
    char name[64];
    snprintf(name, sizeof name, "matmul_%d_with_transfers", n);
    result(name, median(t), "ms");
    printf("CHECK matmul_%d %.1f\n", n, sum);
}

int main(int argc, char** argv) {
    if (argc == 5 && !strcmp(argv[1], "--bandwidth")) {
        size_t bytes = (size_t)atoi(argv[2]) << 20;
        double secs = atof(argv[4]);
        char* host; char* dev;
        CHECK(cudaMallocHost(&host, bytes)); CHECK(cudaMalloc(&dev, bytes));
        memset(host, 3, bytes);
        auto s = clk::now();
        double moved = 0;
        while (us_since(s) < secs * 1e6) {
            CHECK(cudaMemcpy(dev, host, bytes, cudaMemcpyHostToDevice));
            CHECK(cudaMemcpy(host, dev, bytes, cudaMemcpyDeviceToHost));
            moved += 2.0 * bytes;
        }
        result("client_copy_throughput", moved / us_since(s) / 1e3, "GB/s");
        return 0;
    }
    if (argc == 2 && !strcmp(argv[1], "--peer")) {
        peer_copies();
        return 0;
    }
    if (argc == 2 && !strcmp(argv[1], "--managed")) {
        managed();
        return 0;
    }
    CHECK(cudaFree(0));
    latency("copy_64B_h2d_pageable", false, true);
    latency("copy_64B_d2h_pageable", false, false);
    latency("copy_64B_h2d_pinned", true, true);
    latency("copy_64B_d2h_pinned", true, false);

    std::vector<double> t;
    for (int i = 0; i < 2000; i++) {
        auto s = clk::now();
        empty<<<1, 1>>>();
        CHECK(cudaDeviceSynchronize());
        if (i >= 100) t.push_back(us_since(s));
    }
    result("launch_and_sync", median(t), "us");

    // The median of five runs of 20000 launches: one run is at the mercy of whatever
    // else the machine is doing for its 100 ms.
    t.clear();
    for (int run = 0; run < 5; run++) {
        CHECK(cudaDeviceSynchronize());
        auto s = clk::now();
        const int launches = 20000;
        for (int i = 0; i < launches; i++) empty<<<1, 1>>>();
        CHECK(cudaDeviceSynchronize());
        t.push_back(us_since(s) / launches);
    }
    result("launch_back_to_back", median(t), "us/launch");

    // The same through the driver API (what NVIDIA's libraries and plain-nvcc programs
    // launch with): cuLaunchKernel from libcuda.so.1, the real one natively and
    // vmcuda's bridged, on the CUfunction of the same kernel.
    if (void* cuda = dlopen("libcuda.so.1", RTLD_NOW)) {
        auto launch = (decltype(&cuLaunchKernel))dlsym(cuda, "cuLaunchKernel");
        cudaFunction_t f = nullptr;
        CHECK(cudaGetFuncBySymbol(&f, (const void*)empty));
        t.clear();
        for (int run = 0; launch && run < 5; run++) {
            CHECK(cudaDeviceSynchronize());
            auto s = clk::now();
            const int launches = 20000;
            for (int i = 0; i < launches; i++) {
                if (launch((CUfunction)f, 1, 1, 1, 1, 1, 1, 0, nullptr, nullptr, nullptr) != CUDA_SUCCESS) {
                    fprintf(stderr, "FAIL cuLaunchKernel\n");
                    exit(1);
                }
            }
            CHECK(cudaDeviceSynchronize());
            t.push_back(us_since(s) / launches);
        }
        if (!t.empty()) result("driver_launch_back_to_back", median(t), "us/launch");
    }

    t.clear();
    for (int i = 0; i < 300; i++) {
        void* p;
        auto s2 = clk::now();
        CHECK(cudaMalloc(&p, 1 << 20));
        CHECK(cudaFree(p));
        if (i >= 20) t.push_back(us_since(s2));
    }
    result("malloc_free_1MiB", median(t), "us");

    if (argc == 2 && !strcmp(argv[1], "--latency")) return 0;
    for (int mib = 1; mib <= 1024; mib *= 4) {
        // Best of this many: more for the small copies, which a hiccup spoils.
        int reps = mib >= 256 ? 2 : mib >= 64 ? 5 : mib >= 16 ? 10 : mib >= 4 ? 20 : 50;
        for (int pinned = 0; pinned < 2; pinned++) {
            for (int h2d = 1; h2d >= 0; h2d--) {
                char name[64];
                snprintf(name, sizeof name, "bw_%s_%s_%dMiB", h2d ? "h2d" : "d2h", pinned ? "pinned" : "pageable", mib);
                result(name, copy_gbps((size_t)mib << 20, pinned, h2d, reps), "GB/s");
            }
        }
    }
    matmul(2048);
    matmul(4096);
    return 0;
}
