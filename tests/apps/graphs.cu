// graphs: stream capture into a CUDA graph (kernels, memsets, a device-to-device copy,
// a fork to a second stream and a join back through events), instantiation, several
// launches, node and dependency counts, cudaStreamIsCapturing / GetCaptureInfo
// states, per-thread capture modes (cudaThreadExchangeStreamCaptureMode: a relaxed
// thread may allocate during a capture, a global one may not and invalidates it),
// CUDA's refusals (capture on the legacy stream, pageable copies in a capture, the
// legacy stream during a blocking stream's capture) and cudaGraphDebugDotPrint.
#include <cstdio>
#include <unistd.h>
#include <cstdlib>
#include <cstring>
#include <vector>
#include <cuda_runtime.h>

static const char* base_name(const char* p) { const char* s = strrchr(p, '/'); return s ? s + 1 : p; }
#define CHECK(call) do { cudaError_t e_ = (call); if (e_ != cudaSuccess) { \
    printf("FAIL %s:%d %s\n", base_name(__FILE__), __LINE__, cudaGetErrorName(e_)); exit(1); } } while (0)
#define EXPECT(cond) do { if (!(cond)) { \
    printf("MISMATCH %s:%d %s\n", base_name(__FILE__), __LINE__, #cond); exit(1); } } while (0)

const int N = 1 << 14;
const int LAUNCHES = 3;

__global__ void fill(float* a, float v, int n) {
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) a[i] = v + (float)(i % 7);
}
__global__ void scale(float* a, float f, int n) {
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) a[i] *= f;
}
__global__ void add_into(float* acc, const float* b, float v, int n) {
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) acc[i] += b[i] + v;
}

static const char* status_name(cudaStreamCaptureStatus s) {
    switch (s) {
    case cudaStreamCaptureStatusNone: return "none";
    case cudaStreamCaptureStatusActive: return "active";
    case cudaStreamCaptureStatusInvalidated: return "invalidated";
    }
    return "?";
}

static double sum_of(const float* d, int n) {
    std::vector<float> h(n);
    CHECK(cudaMemcpy(h.data(), d, n * sizeof(float), cudaMemcpyDeviceToHost));
    double s = 0;
    for (float x : h) s += x;
    return s;
}

int main() {
    cudaStream_t s, s2;
    CHECK(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking));
    CHECK(cudaStreamCreateWithFlags(&s2, cudaStreamNonBlocking));
    cudaEvent_t fork, join;
    CHECK(cudaEventCreateWithFlags(&fork, cudaEventDisableTiming));
    CHECK(cudaEventCreateWithFlags(&join, cudaEventDisableTiming));
    float *a, *b, *acc;
    unsigned char *c, *d;
    CHECK(cudaMalloc(&a, N * sizeof(float)));
    CHECK(cudaMalloc(&b, N * sizeof(float)));
    CHECK(cudaMalloc(&acc, N * sizeof(float)));
    CHECK(cudaMalloc(&c, 4096));
    CHECK(cudaMalloc(&d, 4096));
    CHECK(cudaMemset(acc, 0, N * sizeof(float)));
    CHECK(cudaMemset(d, 0, 4096));

    cudaStreamCaptureStatus st;
    CHECK(cudaStreamIsCapturing(s, &st));
    printf("before capture: %s\n", status_name(st));

    // The capture: s does memset, fill, scale, copy; forks to s2 (accumulate) while s
    // scales again; joins; then a memset and a copy on s.
    CHECK(cudaStreamBeginCapture(s, cudaStreamCaptureModeGlobal));
    CHECK(cudaStreamIsCapturing(s, &st));
    printf("during capture: %s\n", status_name(st));
    unsigned long long id = 0;
    CHECK(cudaStreamGetCaptureInfo(s, &st, &id));
    printf("capture info: %s, id nonzero: %s\n", status_name(st), id != 0 ? "yes" : "no");
    CHECK(cudaMemsetAsync(a, 0, N * sizeof(float), s));
    fill<<<N / 256, 256, 0, s>>>(a, 1.0f, N);
    CHECK(cudaGetLastError());
    scale<<<N / 256, 256, 0, s>>>(a, 2.0f, N);
    CHECK(cudaGetLastError());
    // The graph being built, as PyTorch's allocator looks at it during a capture.
    cudaGraph_t building = nullptr;
    const cudaGraphNode_t* frontier = nullptr;
    size_t frontier_len = 0;
    CHECK(cudaStreamGetCaptureInfo(s, &st, nullptr, &building, &frontier, nullptr, &frontier_len));
    size_t so_far = 0;
    CHECK(cudaGraphGetNodes(building, nullptr, &so_far));
    size_t before_last = 0;
    EXPECT(frontier_len == 1);
    CHECK(cudaGraphNodeGetDependencies(frontier[0], nullptr, nullptr, &before_last));
    printf("graph so far: %zu nodes, %zu dependency, which has %zu\n", so_far, frontier_len, before_last);
    CHECK(cudaMemcpyAsync(b, a, N * sizeof(float), cudaMemcpyDeviceToDevice, s));
    CHECK(cudaEventRecord(fork, s));
    CHECK(cudaStreamIsCapturing(s2, &st));
    printf("second stream before the fork: %s\n", status_name(st));
    CHECK(cudaStreamWaitEvent(s2, fork, 0));
    CHECK(cudaStreamIsCapturing(s2, &st));
    printf("second stream after the fork: %s\n", status_name(st));
    add_into<<<N / 256, 256, 0, s2>>>(acc, b, 1.0f, N);
    CHECK(cudaGetLastError());
    scale<<<N / 256, 256, 0, s>>>(a, 3.0f, N);
    CHECK(cudaGetLastError());
    CHECK(cudaEventRecord(join, s2));
    CHECK(cudaStreamWaitEvent(s, join, 0));
    CHECK(cudaMemsetAsync(c, 7, 4096, s));
    CHECK(cudaMemcpyAsync(d, c, 4096, cudaMemcpyDeviceToDevice, s));
    // Nothing ran: the capture only recorded.
    cudaGraph_t graph;
    CHECK(cudaStreamEndCapture(s, &graph));
    printf("the captured graph is the one being built: %s\n", graph == building ? "yes" : "no");
    CHECK(cudaStreamIsCapturing(s, &st));
    printf("after capture: %s\n", status_name(st));
    CHECK(cudaStreamIsCapturing(s2, &st));
    printf("second stream after capture: %s\n", status_name(st));
    unsigned char probe[16];
    CHECK(cudaMemcpy(probe, d, sizeof probe, cudaMemcpyDeviceToHost));
    EXPECT(probe[0] == 0 && probe[15] == 0);

    size_t nodes = 0;
    CHECK(cudaGraphGetNodes(graph, nullptr, &nodes));
    std::vector<cudaGraphNode_t> list(nodes + 2);
    size_t room = list.size();
    CHECK(cudaGraphGetNodes(graph, list.data(), &room));
    EXPECT(room == nodes);
    EXPECT(list[nodes] == nullptr && list[nodes + 1] == nullptr);
    size_t edges = 0, roots = 0, most = 0;
    for (size_t i = 0; i < nodes; i++) {
        size_t n = 0;
        CHECK(cudaGraphNodeGetDependencies(list[i], nullptr, nullptr, &n));
        std::vector<cudaGraphNode_t> deps(n + 1);
        size_t got = deps.size();
        CHECK(cudaGraphNodeGetDependencies(list[i], deps.data(), nullptr, &got));
        EXPECT(got == n);
        for (size_t k = 0; k < n; k++) {
            bool in_graph = false;
            for (size_t j = 0; j < nodes; j++) in_graph |= deps[k] == list[j];
            EXPECT(in_graph);
        }
        edges += n;
        roots += n == 0;
        if (n > most) most = n;
    }
    printf("graph: %zu nodes, %zu edges, %zu root, at most %zu dependencies\n", nodes, edges, roots, most);

    // A path of this process's own: two runs at once (the VM tests run the host's
    // reference runs side by side) must not remove each other's file.
    char dot[64];
    snprintf(dot, sizeof dot, "/tmp/vmcuda-graphs-app-%d.dot", (int)getpid());
    remove(dot);
    CHECK(cudaGraphDebugDotPrint(graph, dot, 0));
    FILE* f = fopen(dot, "r");
    char head[8] = {0};
    if (f) {
        size_t got = fread(head, 1, 7, f);
        (void)got;
        fclose(f);
    }
    remove(dot);
    printf("dot file starts with digraph: %s\n", strncmp(head, "digraph", 7) == 0 ? "yes" : "no");

    cudaGraphExec_t exec;
    CHECK(cudaGraphInstantiateWithFlags(&exec, graph, 0));
    // CUDA 12+'s cudaGraphInstantiate is the same call.
    cudaGraphExec_t exec2 = nullptr;
    CHECK(cudaGraphInstantiate(&exec2, graph, 0));
    CHECK(cudaGraphExecDestroy(exec2));
    CHECK(cudaGraphDestroy(graph));  // the executable graph lives on
    for (int i = 0; i < LAUNCHES; i++) CHECK(cudaGraphLaunch(exec, s));
    CHECK(cudaStreamSynchronize(s));
    CHECK(cudaMemcpy(probe, d + 4080, sizeof probe, cudaMemcpyDeviceToHost));
    EXPECT(probe[0] == 7 && probe[15] == 7);
    printf("memset and copy nodes ran: yes\n");
    // Kernel results (compared with a native run on the GPU).
    printf("a sum=%.1f b sum=%.1f acc sum after %d launches=%.1f\n", sum_of(a, N), sum_of(b, N),
           LAUNCHES, sum_of(acc, N));
    CHECK(cudaGraphExecDestroy(exec));

    // Refusals.
    cudaError_t e = cudaStreamBeginCapture(cudaStreamLegacy, cudaStreamCaptureModeGlobal);
    printf("capture on the legacy stream: %s\n", cudaGetErrorName(e));
    cudaGetLastError();

    // A relaxed thread may allocate during a global capture; a global one may not, and
    // the capture is invalidated.
    CHECK(cudaStreamBeginCapture(s, cudaStreamCaptureModeGlobal));
    cudaStreamCaptureMode mode = cudaStreamCaptureModeRelaxed;
    CHECK(cudaThreadExchangeStreamCaptureMode(&mode));
    printf("previous thread mode: %s\n", mode == cudaStreamCaptureModeGlobal ? "global" : "other");
    void* extra = nullptr;
    e = cudaMalloc(&extra, 4096);
    printf("cudaMalloc in a relaxed thread during capture: %s\n", cudaGetErrorName(e));
    CHECK(cudaThreadExchangeStreamCaptureMode(&mode));
    printf("restored thread mode was: %s\n", mode == cudaStreamCaptureModeRelaxed ? "relaxed" : "other");
    void* refused = nullptr;
    e = cudaMalloc(&refused, 4096);
    printf("cudaMalloc in a global thread during capture: %s\n", cudaGetErrorName(e));
    cudaGetLastError();
    CHECK(cudaStreamIsCapturing(s, &st));
    printf("capture after that: %s\n", status_name(st));
    cudaGraph_t none = (cudaGraph_t)1;
    e = cudaStreamEndCapture(s, &none);
    printf("end of that capture: %s, graph null: %s\n", cudaGetErrorName(e), none == nullptr ? "yes" : "no");
    cudaGetLastError();
    if (extra) CHECK(cudaFree(extra));

    // A pageable copy: CUDA captures it (the node reads the pageable bytes at each
    // replay); so does vmcuda where the host shares memory with it, else it refuses it
    // (docs/graphs.md). Both are checked for consistency; the codes are shown on request.
    std::vector<float> pageable(16, 1.0f);
    CHECK(cudaStreamBeginCapture(s, cudaStreamCaptureModeThreadLocal));
    e = cudaMemcpyAsync(a, pageable.data(), 16 * sizeof(float), cudaMemcpyHostToDevice, s);
    bool pageable_refused = e == cudaErrorStreamCaptureUnsupported;
    printf("pageable copy during capture captured or refused: %s\n",
           e == cudaSuccess || pageable_refused ? "yes" : "no");
    bool show = getenv("GRAPHS_SHOW_CODES") != nullptr;
    if (show) fprintf(stderr, "pageable copy during capture: %s\n", cudaGetErrorName(e));
    cudaGetLastError();
    none = nullptr;
    e = cudaStreamEndCapture(s, &none);
    printf("end of that capture agrees: %s\n",
           (pageable_refused ? e == cudaErrorStreamCaptureInvalidated : e == cudaSuccess) ? "yes" : "no");
    if (show) fprintf(stderr, "end of that capture: %s\n", cudaGetErrorName(e));
    if (e == cudaSuccess && none) CHECK(cudaGraphDestroy(none));
    cudaGetLastError();

    // Asking about the legacy stream while a blocking stream captures.
    cudaStream_t blocking;
    CHECK(cudaStreamCreate(&blocking));
    CHECK(cudaStreamBeginCapture(blocking, cudaStreamCaptureModeThreadLocal));
    e = cudaStreamIsCapturing(cudaStreamLegacy, &st);
    printf("legacy stream during a blocking capture: %s\n", cudaGetErrorName(e));
    cudaGetLastError();
    cudaGraph_t empty = nullptr;
    cudaStreamEndCapture(blocking, &empty);
    cudaGetLastError();
    if (empty) CHECK(cudaGraphDestroy(empty));
    CHECK(cudaStreamDestroy(blocking));

    // A stream made, joined to a capture and destroyed inside it (as NVIDIA's
    // graphMemoryNodes sample does): the capture goes on, and its graph runs.
    {
        cudaStream_t inner;
        CHECK(cudaStreamBeginCapture(s, cudaStreamCaptureModeGlobal));
        CHECK(cudaStreamCreateWithFlags(&inner, cudaStreamNonBlocking));
        CHECK(cudaEventRecord(fork, s));
        CHECK(cudaStreamWaitEvent(inner, fork, 0));
        CHECK(cudaMemsetAsync(c, 7, 64, inner));
        CHECK(cudaEventRecord(join, inner));
        CHECK(cudaStreamWaitEvent(s, join, 0));
        CHECK(cudaStreamDestroy(inner));
        cudaGraph_t g2;
        CHECK(cudaStreamEndCapture(s, &g2));
        cudaGraphExec_t e2;
        CHECK(cudaGraphInstantiate(&e2, g2, 0));
        CHECK(cudaMemset(c, 0, 64));
        CHECK(cudaGraphLaunch(e2, s));
        CHECK(cudaStreamSynchronize(s));
        unsigned char h[64];
        CHECK(cudaMemcpy(h, c, 64, cudaMemcpyDeviceToHost));
        bool sevens = true;
        for (unsigned char v : h) sevens = sevens && v == 7;
        if (!sevens) { printf("FAIL graph with a stream destroyed inside its capture\n"); return 1; }
        printf("a stream destroyed inside a capture: graph runs\n");
        CHECK(cudaGraphExecDestroy(e2));
        CHECK(cudaGraphDestroy(g2));
    }

    // A captured kernel node's parameters read back (cuDNN reads its captured
    // graphs' so to update them): the kernel, shape and arguments as launched; given
    // other arguments, the node keeps them.
    {
        CHECK(cudaStreamBeginCapture(s, cudaStreamCaptureModeGlobal));
        scale<<<3, 64, 0, s>>>(a, 2.5f, 192);
        cudaGraph_t g3;
        CHECK(cudaStreamEndCapture(s, &g3));
        cudaGraphNode_t node;
        size_t count = 1;
        CHECK(cudaGraphGetNodes(g3, &node, &count));
        cudaKernelNodeParams kp;
        memset(&kp, 0, sizeof kp);
        CHECK(cudaGraphKernelNodeGetParams(node, &kp));
        bool as_launched = kp.func == (void*)scale && kp.gridDim.x == 3 && kp.gridDim.y == 1 &&
                           kp.blockDim.x == 64 && kp.sharedMemBytes == 0 && kp.kernelParams &&
                           *(float**)kp.kernelParams[0] == a && *(float*)kp.kernelParams[1] == 2.5f &&
                           *(int*)kp.kernelParams[2] == 192;
        printf("a captured kernel node's parameters are as launched: %s\n", as_launched ? "yes" : "no");
        float f = 4.0f;
        int n = 128;
        void* args[] = {&b, &f, &n};
        kp.kernelParams = args;
        kp.gridDim.x = 2;
        CHECK(cudaGraphKernelNodeSetParams(node, &kp));
        cudaKernelNodeParams again;
        memset(&again, 0, sizeof again);
        CHECK(cudaGraphKernelNodeGetParams(node, &again));
        bool kept = again.gridDim.x == 2 && *(float**)again.kernelParams[0] == b &&
                    *(float*)again.kernelParams[1] == 4.0f && *(int*)again.kernelParams[2] == 128;
        printf("and the ones given after: %s\n", kept ? "yes" : "no");
        cudaGraphExec_t e3;
        CHECK(cudaGraphInstantiate(&e3, g3, 0));
        CHECK(cudaGraphLaunch(e3, s));
        CHECK(cudaStreamSynchronize(s));
        CHECK(cudaGraphExecDestroy(e3));
        CHECK(cudaGraphDestroy(g3));
    }

    CHECK(cudaFree(a));
    CHECK(cudaFree(b));
    CHECK(cudaFree(acc));
    CHECK(cudaFree(c));
    CHECK(cudaFree(d));
    CHECK(cudaEventDestroy(fork));
    CHECK(cudaEventDestroy(join));
    CHECK(cudaStreamDestroy(s));
    CHECK(cudaStreamDestroy(s2));
    printf("PASS graphs\n");
    return 0;
}
