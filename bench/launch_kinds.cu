// Back-to-back launches of small kernels, many ways: through cuLaunchKernel on the legacy
// stream, a created non-blocking stream and the per-thread stream; with arguments; four
// kernels of different shapes taking turns; and <<<>>>. Each figure is the median over 7
// runs of 20000 launches and a synchronize, in us a launch; "burst" is the time to
// submit 200 launches, without waiting for them.
//   launch_kinds            (bench/run-launch-batch.sh runs it natively and bridged)
#include <cuda.h>
#include <cuda_runtime.h>
#include <dlfcn.h>
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <vector>

__global__ void empty() {}
__global__ void store(int* p, int v) { p[v & 255] = v; }
__global__ void shaped(int* p, int v) { p[(threadIdx.x + blockIdx.x * blockDim.x + v) & 255] += 1; }
__global__ void shared_fill(int* p, int v) {
    extern __shared__ int s[];
    s[threadIdx.x] = v;
    __syncthreads();
    if (threadIdx.x == 0) p[v & 255] = s[blockDim.x - 1];
}

using clk = std::chrono::steady_clock;
static double us_since(clk::time_point s) { return std::chrono::duration<double, std::micro>(clk::now() - s).count(); }
static double median(std::vector<double> v) { std::sort(v.begin(), v.end()); return v[v.size() / 2]; }
#define CHECK(x) do { cudaError_t e = (x); if (e) { fprintf(stderr, "FAIL %s: %s\n", #x, cudaGetErrorName(e)); exit(1); } } while (0)

int main() {
    void* cuda = dlopen("libcuda.so.1", RTLD_NOW);
    auto launch = cuda ? (decltype(&cuLaunchKernel))dlsym(cuda, "cuLaunchKernel") : nullptr;
    if (!launch) { fprintf(stderr, "FAIL no cuLaunchKernel\n"); return 1; }
    CUfunction fe, fs, fh, fm;
    CHECK(cudaGetFuncBySymbol((cudaFunction_t*)&fe, (const void*)empty));
    CHECK(cudaGetFuncBySymbol((cudaFunction_t*)&fs, (const void*)store));
    CHECK(cudaGetFuncBySymbol((cudaFunction_t*)&fh, (const void*)shaped));
    CHECK(cudaGetFuncBySymbol((cudaFunction_t*)&fm, (const void*)shared_fill));
    cudaStream_t made;
    CHECK(cudaStreamCreateWithFlags(&made, cudaStreamNonBlocking));
    int* d;
    CHECK(cudaMalloc(&d, 1024));
    enum Kind { EMPTY, ARGS, MIXED };
    struct { const char* name; CUstream s; Kind kind; } kinds[] = {
        {"legacy", nullptr, EMPTY},           {"non_blocking", (CUstream)made, EMPTY},
        {"per_thread", CU_STREAM_PER_THREAD, EMPTY}, {"with_args", nullptr, ARGS},
        {"four_kernels", nullptr, MIXED}};
    auto one = [&](Kind k, CUstream s, int i) {
        void* args[] = {&d, &i};
        CUresult r;
        if (k == EMPTY) r = launch(fe, 1, 1, 1, 1, 1, 1, 0, s, nullptr, nullptr);
        else if (k == ARGS) r = launch(fs, 1, 1, 1, 1, 1, 1, 0, s, args, nullptr);
        else switch (i & 3) {
            case 0: r = launch(fs, 1, 1, 1, 1, 1, 1, 0, s, args, nullptr); break;
            case 1: r = launch(fh, 2, 1, 1, 64, 1, 1, 0, s, args, nullptr); break;
            case 2: r = launch(fm, 1, 1, 1, 32, 1, 1, 128, s, args, nullptr); break;
            default: r = launch(fe, 1, 1, 1, 1, 1, 1, 0, s, nullptr, nullptr);
        }
        if (r != CUDA_SUCCESS) { fprintf(stderr, "FAIL cuLaunchKernel %d\n", r); exit(1); }
    };
    for (auto& k : kinds) {
        std::vector<double> burst, run;
        for (int r = 0; r < 7; r++) {
            CHECK(cudaDeviceSynchronize());
            auto s = clk::now();
            for (int i = 0; i < 200; i++) one(k.kind, k.s, i);
            burst.push_back(us_since(s) / 200);
            CHECK(cudaDeviceSynchronize());
            s = clk::now();
            for (int i = 0; i < 20000; i++) one(k.kind, k.s, i);
            CHECK(cudaDeviceSynchronize());
            run.push_back(us_since(s) / 20000);
        }
        printf("RESULT %s %.2f us/launch\n", k.name, median(run));
        printf("RESULT %s_burst %.2f us/launch\n", k.name, median(burst));
    }
    std::vector<double> run;
    for (int r = 0; r < 7; r++) {
        CHECK(cudaDeviceSynchronize());
        auto s = clk::now();
        for (int i = 0; i < 20000; i++) empty<<<1, 1>>>();
        CHECK(cudaDeviceSynchronize());
        run.push_back(us_since(s) / 20000);
    }
    printf("RESULT runtime_legacy %.2f us/launch\n", median(run));
    return 0;
}
