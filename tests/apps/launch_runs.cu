// launch_runs: long runs of launches back to back, as a training loop makes them: one
// kernel with changing arguments, several kernels of different shapes, dynamic shared
// memory and a large by-value argument mixed in one run, on the legacy stream, a created
// stream and the per-thread stream; a memset and an event between runs, another stream
// waiting for one; cudaLaunchKernel with an argument array. Every result is printed
// with whether it agrees with the same sums done on the CPU, so a launch dropped,
// repeated, reordered or given another launch's arguments shows.
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <cuda_runtime.h>

static const char* base_name(const char* p) { const char* s = strrchr(p, '/'); return s ? s + 1 : p; }
#define CHECK(call) do { cudaError_t e_ = (call); if (e_ != cudaSuccess) { \
    printf("FAIL %s:%d %s\n", base_name(__FILE__), __LINE__, cudaGetErrorName(e_)); exit(1); } } while (0)

const int SLOTS = 64;
// Sums wrap alike on both sides.
typedef unsigned long long ULL;

// Order matters: acc[slot] = acc[slot] * 3 + value, so a reordered pair gives another sum.
__global__ void step(ULL* acc, int slot, int value) {
    acc[slot] = acc[slot] * 3 + (ULL)(long long)value;
}

// A shaped grid: every thread adds its linear index times `tag`.
__global__ void shaped(ULL* out, int tag) {
    int block = blockIdx.x + gridDim.x * (blockIdx.y + gridDim.y * blockIdx.z);
    int thread = threadIdx.x + blockDim.x * (threadIdx.y + blockDim.y * threadIdx.z);
    int i = block * blockDim.x * blockDim.y * blockDim.z + thread;
    atomicAdd(&out[i % SLOTS], (ULL)(i * tag));
}

// Dynamic shared memory: the block sums its threads' values through it.
__global__ void shared_sum(ULL* out, int base) {
    extern __shared__ int s[];
    s[threadIdx.x] = base + (int)threadIdx.x;
    __syncthreads();
    if (threadIdx.x == 0) {
        ULL t = 0;
        for (unsigned i = 0; i < blockDim.x; i++) t += s[i];
        out[blockIdx.x % SLOTS] += t;
    }
}

struct Big { int v[48]; };

// A 192-byte argument by value.
__global__ void big_arg(ULL* out, Big b, int slot) {
    ULL t = 0;
    for (int i = 0; i < 48; i++) t += (ULL)(b.v[i] * (i + 1));
    out[slot] = out[slot] * 5 + t;
}

static ULL host[SLOTS];

static void report(const char* what, const ULL* d, const ULL* model) {
    CHECK(cudaMemcpy(host, d, sizeof host, cudaMemcpyDeviceToHost));
    ULL sum = 0;
    bool same = true;
    for (int i = 0; i < SLOTS; i++) {
        sum = sum * 31 + host[i];
        same = same && host[i] == model[i];
    }
    printf("%s: checksum %llu, agrees with the CPU: %s\n", what, sum, same ? "yes" : "no");
}

// One kernel, changing arguments, `n` launches on `s`.
static void steps(ULL* d, ULL* model, cudaStream_t s, int n, int seed) {
    for (int i = 0; i < n; i++) {
        int slot = (i * 7 + seed) % SLOTS, value = (i * 13 + seed) % 101 - 50;
        step<<<1, 1, 0, s>>>(d, slot, value);
        model[slot] = model[slot] * 3 + (ULL)(long long)value;
    }
}

// Several kernels, shapes, shared memory and a large argument, mixed.
static void mixed(ULL* d, ULL* model, cudaStream_t s, int n) {
    for (int i = 0; i < n; i++) {
        switch (i % 4) {
        case 0: {
            dim3 grid(1 + i % 3, 2, 1), block(4, 1 + i % 2, 2);
            shaped<<<grid, block, 0, s>>>(d, i % 5 + 1);
            int blocks = grid.x * grid.y * grid.z, threads = block.x * block.y * block.z;
            for (int k = 0; k < blocks * threads; k++) model[k % SLOTS] += (ULL)(k * (i % 5 + 1));
            break;
        }
        case 1: {
            int threads = 32 + (i % 3) * 32;
            shared_sum<<<3, threads, threads * sizeof(int), s>>>(d, i);
            ULL t = 0;
            for (int k = 0; k < threads; k++) t += i + k;
            for (int b = 0; b < 3; b++) model[b] += t;
            break;
        }
        case 2: {
            Big b;
            for (int k = 0; k < 48; k++) b.v[k] = (i + k) % 17;
            int slot = 10 + i % 20;
            big_arg<<<1, 1, 0, s>>>(d, b, slot);
            ULL t = 0;
            for (int k = 0; k < 48; k++) t += (ULL)(b.v[k] * (k + 1));
            model[slot] = model[slot] * 5 + t;
            break;
        }
        default: {
            int slot = 40 + i % 20, value = i % 9;
            void* args[] = {&d, &slot, &value};
            CHECK(cudaLaunchKernel((const void*)step, dim3(1), dim3(1), args, 0, s));
            model[slot] = model[slot] * 3 + (ULL)(long long)value;
        }
        }
    }
}

int main() {
    ULL *a, *b;
    CHECK(cudaMalloc(&a, sizeof host));
    CHECK(cudaMalloc(&b, sizeof host));
    ULL ma[SLOTS] = {}, mb[SLOTS] = {};
    CHECK(cudaMemset(a, 0, sizeof host));
    CHECK(cudaMemset(b, 0, sizeof host));

    steps(a, ma, 0, 1500, 1);
    report("one kernel, legacy stream", a, ma);

    cudaStream_t s1, s2;
    CHECK(cudaStreamCreate(&s1));
    CHECK(cudaStreamCreateWithFlags(&s2, cudaStreamNonBlocking));
    steps(a, ma, s1, 1000, 2);
    // A memset between two runs on the stream: the first run's work is lost to it.
    CHECK(cudaMemsetAsync(a, 0, sizeof host, s1));
    for (int i = 0; i < SLOTS; i++) ma[i] = 0;
    steps(a, ma, s1, 1000, 3);
    CHECK(cudaStreamSynchronize(s1));
    report("one kernel, created stream, memset between runs", a, ma);

    mixed(b, mb, s2, 1200);
    CHECK(cudaStreamSynchronize(s2));
    report("mixed kernels, non-blocking stream", b, mb);

    // s2 copies a's slots once s1's run is done, through an event.
    cudaEvent_t done;
    CHECK(cudaEventCreateWithFlags(&done, cudaEventDisableTiming));
    steps(a, ma, s1, 800, 4);
    CHECK(cudaEventRecord(done, s1));
    CHECK(cudaStreamWaitEvent(s2, done, 0));
    CHECK(cudaMemcpyAsync(b, a, sizeof host, cudaMemcpyDeviceToDevice, s2));
    memcpy(mb, ma, sizeof mb);
    mixed(b, mb, s2, 400);
    CHECK(cudaDeviceSynchronize());
    report("a run after an event from another stream's run", b, mb);

    steps(a, ma, cudaStreamPerThread, 900, 5);
    mixed(a, ma, cudaStreamPerThread, 300);
    CHECK(cudaStreamSynchronize(cudaStreamPerThread));
    report("per-thread stream", a, ma);

    // The legacy stream after the others: ordered behind the blocking stream's work.
    steps(a, ma, s1, 600, 6);
    steps(a, ma, 0, 600, 7);
    CHECK(cudaDeviceSynchronize());
    report("legacy stream behind a blocking stream", a, ma);

    CHECK(cudaGetLastError());
    CHECK(cudaEventDestroy(done));
    CHECK(cudaStreamDestroy(s1));
    CHECK(cudaStreamDestroy(s2));
    CHECK(cudaFree(a));
    CHECK(cudaFree(b));
    printf("launch_runs done\n");
    return 0;
}
