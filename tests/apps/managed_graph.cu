// managed_graph: a CUDA graph captured from a stream working on managed memory:
// kernels, a cudaMemsetAsync and cudaMemcpyAsync calls on managed buffers, and a graph
// memory node (cudaMallocAsync / cudaFreeAsync inside the capture) whose contents are
// copied into managed memory. The graph is instantiated once and launched several
// times; between launches the CPU rewrites its inputs (all of them, or single words)
// and reads its results, always after synchronizing. Then a second graph, captured
// the same way, reads another managed buffer.
// The captured copies name their direction (cudaMemcpyDeviceToDevice): CUDA does not
// allow cudaMemcpyDefault on managed memory in a memcpy node where a device lacks
// concurrent managed access.
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <vector>
#include <cuda_runtime.h>

static const char* base_name(const char* p) { const char* s = strrchr(p, '/'); return s ? s + 1 : p; }
#define CHECK(call) do { cudaError_t e_ = (call); if (e_ != cudaSuccess) { \
    printf("FAIL %s:%d %s\n", base_name(__FILE__), __LINE__, cudaGetErrorName(e_)); exit(1); } } while (0)
#define EXPECT(cond) do { if (!(cond)) { \
    printf("MISMATCH %s:%d %s\n", base_name(__FILE__), __LINE__, #cond); exit(1); } } while (0)

typedef unsigned int u32;
const int N = 10000;  // 40000 bytes: not a whole number of pages
const int HALF = N / 2;

// out[i] = in[i] * mul + add
__global__ void scale(u32* out, const u32* in, u32 mul, u32 add, int n) {
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) out[i] = in[i] * mul + add;
}
// t[i] = a[i] + b[i] (t: graph-allocated device memory)
__global__ void add(u32* t, const u32* a, const u32* b, int n) {
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) t[i] = a[i] + b[i];
}
__global__ void count(u32* counter) { atomicAdd(counter, 1u); }

// What one launch computes from `in`, on the CPU.
static void expected(const u32* in, std::vector<u32>& out, std::vector<u32>& res) {
    std::vector<u32> aux(N, 0);
    for (int i = 0; i < N; i++) out[i] = in[i] * 3 + 1;
    for (int i = 0; i < HALF; i++) aux[i] = out[i];
    for (int i = 0; i < N; i++) res[i] = out[i] + aux[i];
}

static unsigned long long sum(const u32* p, int n) {
    unsigned long long s = 0;
    for (int i = 0; i < n; i++) s += p[i];
    return s;
}

int main() {
    const size_t bytes = N * sizeof(u32);
    u32 *in, *in2, *out, *aux, *res, *counter;
    CHECK(cudaMallocManaged(&in, bytes));
    CHECK(cudaMallocManaged(&in2, bytes));
    CHECK(cudaMallocManaged(&out, bytes));
    CHECK(cudaMallocManaged(&aux, bytes));
    CHECK(cudaMallocManaged(&res, bytes));
    CHECK(cudaMallocManaged(&counter, sizeof(u32)));
    *counter = 0;
    for (int i = 0; i < N; i++) {
        in[i] = (u32)i;
        in2[i] = (u32)(7 * i + 3);
    }

    cudaStream_t s;
    CHECK(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking));
    const int blocks = (N + 255) / 256;
    // The graph: scale `src` into out, half of it into aux, out + aux through a graph
    // memory node into res, and a counter.
    auto capture = [&](const u32* src) {
        CHECK(cudaStreamBeginCapture(s, cudaStreamCaptureModeGlobal));
        scale<<<blocks, 256, 0, s>>>(out, src, 3, 1, N);
        CHECK(cudaGetLastError());
        CHECK(cudaMemsetAsync(aux, 0, bytes, s));
        CHECK(cudaMemcpyAsync(aux, out, HALF * sizeof(u32), cudaMemcpyDeviceToDevice, s));
        u32* tmp = nullptr;
        CHECK(cudaMallocAsync(&tmp, bytes, s));
        add<<<blocks, 256, 0, s>>>(tmp, out, aux, N);
        CHECK(cudaGetLastError());
        CHECK(cudaMemcpyAsync(res, tmp, bytes, cudaMemcpyDeviceToDevice, s));
        CHECK(cudaFreeAsync(tmp, s));
        count<<<1, 1, 0, s>>>(counter);
        CHECK(cudaGetLastError());
        cudaGraph_t g;
        CHECK(cudaStreamEndCapture(s, &g));
        return g;
    };
    cudaGraph_t graph = capture(in);
    size_t nodes = 0;
    CHECK(cudaGraphGetNodes(graph, nullptr, &nodes));
    // At least the 8 captured operations (vmcuda's host adds a memset that zeroes the
    // graph's allocation, so the count itself is not printed).
    EXPECT(nodes >= 8);
    printf("graph captured\n");
    cudaGraphExec_t exec;
    CHECK(cudaGraphInstantiate(&exec, graph, 0));

    std::vector<u32> want_out(N), want_res(N);
    for (int launch = 0; launch < 5; launch++) {
        // Between launches: the whole input, or single words of it (partial pages).
        if (launch == 1) {
            for (int i = 0; i < N; i++) in[i] = (u32)(N - i);
        } else if (launch > 1) {
            for (int i = launch; i < N; i += 1500) in[i] = (u32)(1000000 * launch + i);
        }
        CHECK(cudaGraphLaunch(exec, s));
        CHECK(cudaStreamSynchronize(s));
        expected(in, want_out, want_res);
        EXPECT(memcmp(out, want_out.data(), bytes) == 0);
        EXPECT(memcmp(res, want_res.data(), bytes) == 0);
        printf("launch %d: counter=%u res[0]=%u res[%d]=%u res[%d]=%u sum(res)=%llu\n", launch, *counter, res[0],
               HALF, res[HALF], N - 1, res[N - 1], sum(res, N));
        // The CPU writes into an output between launches: the next launch overwrites it.
        res[HALF + 1] = 0xdeadbeefu;
    }

    // Two launches back to back, then one look.
    CHECK(cudaGraphLaunch(exec, s));
    CHECK(cudaGraphLaunch(exec, s));
    CHECK(cudaStreamSynchronize(s));
    EXPECT(memcmp(res, want_res.data(), bytes) == 0);
    printf("two more launches: counter=%u\n", *counter);

    // A second graph, captured the same way, reads another managed buffer.
    cudaGraph_t graph2 = capture(in2);
    cudaGraphExec_t exec2;
    CHECK(cudaGraphInstantiate(&exec2, graph2, 0));
    in2[0] = 5;
    CHECK(cudaGraphLaunch(exec2, s));
    CHECK(cudaStreamSynchronize(s));
    expected(in2, want_out, want_res);
    EXPECT(memcmp(res, want_res.data(), bytes) == 0);
    printf("the second graph, on another buffer: counter=%u res[0]=%u sum(res)=%llu\n", *counter, res[0],
           sum(res, N));

    CHECK(cudaGraphExecDestroy(exec));
    CHECK(cudaGraphDestroy(graph));
    CHECK(cudaGraphExecDestroy(exec2));
    CHECK(cudaGraphDestroy(graph2));
    CHECK(cudaStreamDestroy(s));
    CHECK(cudaDeviceSynchronize());
    for (u32* q : {in, in2, out, aux, res, counter}) CHECK(cudaFree(q));
    printf("done\n");
    return 0;
}
