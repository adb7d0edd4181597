// graph_edges: graph edges with data (programmatic dependent launch in graphs).
// Programmatic edges added by hand (cudaGraphAddDependencies, cudaGraphAddNode) and
// read back by every query (edges, dependencies, dependent nodes), with and without
// room for the data; the refusals of data CUDA does not take; removal with and without
// the edge's data; capture into a graph after programmatic edges
// (cudaStreamBeginCaptureToGraph), capture dependencies set with data
// (cudaStreamUpdateCaptureDependencies) and read back (cudaStreamGetCaptureInfo); a
// captured launch with programmatic stream serialization; clones and exec updates of
// such graphs. The kernels hand results across the early edge, so the numbers show
// the graph ran right. Every result is printed for the native comparison.
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
// What CUDA answers, printed: the comparison with native is the check.
#define SAY(what, call) do { cudaError_t e_ = (call); printf("%s: %s\n", what, cudaGetErrorName(e_)); \
    cudaGetLastError(); } while (0)

const int N = 1 << 16;

// Writes its part, then lets a programmatic dependent start.
__global__ void produce(int* a, int n, int add) {
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) a[i] = i + add;
#if __CUDA_ARCH__ >= 900
    cudaTriggerProgrammaticLaunchCompletion();
#endif
}
// Waits for what it depends on (programmatically), then reads it.
__global__ void consume(const int* a, int* b, int n) {
#if __CUDA_ARCH__ >= 900
    cudaGridDependencySynchronize();
#endif
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) b[i] = 2 * a[i];
}

static cudaGraphEdgeData edge(unsigned char from_port, unsigned char type) {
    cudaGraphEdgeData e;
    memset(&e, 0, sizeof e);
    e.from_port = from_port;
    e.type = type;
    return e;
}

static const char* port_name(unsigned p) {
    switch (p) {
    case cudaGraphKernelNodePortDefault: return "default";
    case cudaGraphKernelNodePortProgrammatic: return "programmatic";
    case cudaGraphKernelNodePortLaunchCompletion: return "launch-completion";
    default: return "?";
    }
}

static void print_edge(const char* what, const cudaGraphEdgeData& e) {
    printf("%s: from_port=%s to_port=%u type=%s\n", what, port_name(e.from_port), e.to_port,
           e.type == cudaGraphDependencyTypeProgrammatic ? "programmatic" : "default");
}

static int* a;
static int* b;

// A launch of `func` over N elements, as a kernel node's parameters.
static cudaKernelNodeParams kernel_params(void* func, void** args) {
    cudaKernelNodeParams p = {};
    p.func = func;
    p.gridDim = dim3((N + 255) / 256);
    p.blockDim = dim3(256);
    p.kernelParams = args;
    return p;
}

static void kernel_node(cudaGraphNodeParams* np, void* func, void** args) {
    np->type = cudaGraphNodeTypeKernel;
    np->kernel.func = func;
    np->kernel.gridDim = dim3((N + 255) / 256);
    np->kernel.blockDim = dim3(256);
    np->kernel.kernelParams = args;
}

// Run `exec` and say whether b = 2 * (i + add) everywhere.
static void run_and_check(const char* what, cudaGraphExec_t exec, int add) {
    CHECK(cudaMemset(b, 0, N * sizeof(int)));
    CHECK(cudaGraphLaunch(exec, 0));
    CHECK(cudaStreamSynchronize(0));
    std::vector<int> h(N);
    CHECK(cudaMemcpy(h.data(), b, N * sizeof(int), cudaMemcpyDeviceToHost));
    int wrong = 0;
    for (int i = 0; i < N; i++) wrong += h[i] != 2 * (i + add);
    printf("%s: %d wrong of %d\n", what, wrong, N);
}

static int n = N, add1 = 1, add7 = 7;
static void* pargs1[] = {&a, &n, &add1};
static void* pargs7[] = {&a, &n, &add7};
static void* cargs[] = {&a, &b, &n};

// A graph of produce -> consume joined by a programmatic edge, added by hand.
static cudaGraph_t by_hand(cudaGraphNode_t* p_out, cudaGraphNode_t* c_out) {
    cudaGraph_t g;
    CHECK(cudaGraphCreate(&g, 0));
    cudaKernelNodeParams pp = kernel_params((void*)produce, pargs1), cp = kernel_params((void*)consume, cargs);
    CHECK(cudaGraphAddKernelNode(p_out, g, nullptr, 0, &pp));
    CHECK(cudaGraphAddKernelNode(c_out, g, nullptr, 0, &cp));
    cudaGraphEdgeData e = edge(cudaGraphKernelNodePortProgrammatic, cudaGraphDependencyTypeProgrammatic);
    CHECK(cudaGraphAddDependencies(g, p_out, c_out, &e, 1));
    return g;
}

static void queries(cudaGraph_t g, cudaGraphNode_t p, cudaGraphNode_t c) {
    size_t count = 0;
    CHECK(cudaGraphGetEdges(g, nullptr, nullptr, nullptr, &count));
    printf("edges counted without data: %zu\n", count);
    cudaGraphNode_t from[4], to[4];
    cudaGraphEdgeData data[4];
    count = 4;
    SAY("edges without room for data", cudaGraphGetEdges(g, from, to, nullptr, &count));
    count = 4;
    CHECK(cudaGraphGetEdges(g, from, to, data, &count));
    printf("edges: %zu, from produce %d, to consume %d\n", count, from[0] == p, to[0] == c);
    print_edge("edge", data[0]);
    count = 0;
    CHECK(cudaGraphNodeGetDependencies(c, nullptr, nullptr, &count));
    printf("dependencies counted: %zu\n", count);
    count = 4;
    SAY("dependencies without room for data", cudaGraphNodeGetDependencies(c, from, nullptr, &count));
    count = 4;
    CHECK(cudaGraphNodeGetDependencies(c, from, data, &count));
    printf("dependencies: %zu, produce %d\n", count, from[0] == p);
    print_edge("dependency", data[0]);
    count = 4;
    SAY("dependents without room for data", cudaGraphNodeGetDependentNodes(p, to, nullptr, &count));
    count = 4;
    CHECK(cudaGraphNodeGetDependentNodes(p, to, data, &count));
    printf("dependents: %zu, consume %d\n", count, to[0] == c);
    print_edge("dependent", data[0]);
}

int main() {
    int dev = 0;
    CHECK(cudaSetDevice(dev));
    cudaDeviceProp prop;
    CHECK(cudaGetDeviceProperties(&prop, dev));
    printf("compute capability %d.%d\n", prop.major, prop.minor);
    CHECK(cudaMalloc(&a, N * sizeof(int)));
    CHECK(cudaMalloc(&b, N * sizeof(int)));

    // 1. By hand: cudaGraphAddDependencies with a programmatic edge.
    cudaGraphNode_t p, c;
    cudaGraph_t g = by_hand(&p, &c);
    queries(g, p, c);
    cudaGraphExec_t exec;
    CHECK(cudaGraphInstantiate(&exec, g, 0));
    run_and_check("by hand", exec, 1);

    // 2. Clone: the edge and its data come along; an exec update with the clone.
    cudaGraph_t clone;
    CHECK(cudaGraphClone(&clone, g));
    cudaGraphNode_t cp_node, cc_node;
    CHECK(cudaGraphNodeFindInClone(&cp_node, p, clone));
    CHECK(cudaGraphNodeFindInClone(&cc_node, c, clone));
    {
        cudaGraphNode_t from[2];
        cudaGraphEdgeData data[2];
        size_t count = 2;
        CHECK(cudaGraphNodeGetDependencies(cc_node, from, data, &count));
        printf("clone dependencies: %zu, produce %d\n", count, from[0] == cp_node);
        print_edge("clone dependency", data[0]);
    }
    cudaKernelNodeParams pp7 = kernel_params((void*)produce, pargs7);
    CHECK(cudaGraphKernelNodeSetParams(cp_node, &pp7));
    cudaGraphExecUpdateResultInfo info;
    SAY("exec update with the clone", cudaGraphExecUpdate(exec, clone, &info));
    printf("update result %d\n", (int)info.result);
    run_and_check("updated", exec, info.result == cudaGraphExecUpdateSuccess ? 7 : 1);

    // 3. Removal: without the edge's data, then with it.
    {
        SAY("remove without data", cudaGraphRemoveDependencies(g, &p, &c, nullptr, 1));
        cudaGraphEdgeData other = edge(cudaGraphKernelNodePortLaunchCompletion, cudaGraphDependencyTypeProgrammatic);
        SAY("remove with other data", cudaGraphRemoveDependencies(g, &p, &c, &other, 1));
        cudaGraphEdgeData e = edge(cudaGraphKernelNodePortProgrammatic, cudaGraphDependencyTypeProgrammatic);
        SAY("remove with its data", cudaGraphRemoveDependencies(g, &p, &c, &e, 1));
        size_t count = 0;
        CHECK(cudaGraphGetEdges(g, nullptr, nullptr, nullptr, &count));
        printf("edges left: %zu\n", count);
    }

    // 4. Data CUDA does not take.
    {
        cudaGraphNode_t empty;
        CHECK(cudaGraphAddEmptyNode(&empty, g, nullptr, 0));
        cudaGraphEdgeData e = edge(cudaGraphKernelNodePortProgrammatic, cudaGraphDependencyTypeProgrammatic);
        SAY("programmatic edge into an empty node", cudaGraphAddDependencies(g, &p, &empty, &e, 1));
        SAY("programmatic edge out of an empty node", cudaGraphAddDependencies(g, &empty, &c, &e, 1));
        e = edge(cudaGraphKernelNodePortDefault, cudaGraphDependencyTypeProgrammatic);
        SAY("programmatic edge from the default port", cudaGraphAddDependencies(g, &p, &c, &e, 1));
        e = edge(cudaGraphKernelNodePortProgrammatic, cudaGraphDependencyTypeDefault);
        SAY("default edge from the programmatic port", cudaGraphAddDependencies(g, &p, &c, &e, 1));
        e = edge(0, 0);
        e.to_port = 1;
        SAY("a downstream port", cudaGraphAddDependencies(g, &p, &c, &e, 1));
        e = edge(cudaGraphKernelNodePortProgrammatic, cudaGraphDependencyTypeProgrammatic);
        e.reserved[2] = 1;
        SAY("a reserved byte", cudaGraphAddDependencies(g, &p, &c, &e, 1));
        e = edge(cudaGraphKernelNodePortLaunchCompletion, cudaGraphDependencyTypeDefault);
        SAY("default edge from launch completion into an empty node", cudaGraphAddDependencies(g, &p, &empty, &e, 1));
        size_t count = 0;
        CHECK(cudaGraphGetEdges(g, nullptr, nullptr, nullptr, &count));
        printf("edges now: %zu\n", count);
        if (count > 0) {
            std::vector<cudaGraphNode_t> from(count), to(count);
            std::vector<cudaGraphEdgeData> data(count);
            CHECK(cudaGraphGetEdges(g, from.data(), to.data(), data.data(), &count));
            for (size_t i = 0; i < count; i++) {
                printf("edge %zu: to %s\n", i, to[i] == c ? "consume" : to[i] == empty ? "empty" : "?");
                print_edge("  data", data[i]);
            }
        }
    }

    // 5. cudaGraphAddNode with edge data: launch completion, programmatic.
    {
        cudaGraph_t g2;
        CHECK(cudaGraphCreate(&g2, 0));
        cudaGraphNodeParams np = {};
        kernel_node(&np, (void*)produce, pargs1);
        cudaGraphNode_t p2, c2, e2;
        CHECK(cudaGraphAddNode(&p2, g2, nullptr, nullptr, 0, &np));
        cudaGraphNode_t empty_root;
        CHECK(cudaGraphAddEmptyNode(&empty_root, g2, nullptr, 0));
        np = cudaGraphNodeParams{};
        kernel_node(&np, (void*)consume, cargs);
        cudaGraphNode_t deps[2] = {empty_root, p2};
        cudaGraphEdgeData data[2] = {edge(0, 0), edge(cudaGraphKernelNodePortLaunchCompletion, cudaGraphDependencyTypeProgrammatic)};
        CHECK(cudaGraphAddNode(&c2, g2, deps, data, 2, &np));
        cudaGraphNode_t from[4];
        cudaGraphEdgeData got[4];
        size_t count = 4;
        CHECK(cudaGraphNodeGetDependencies(c2, from, got, &count));
        printf("added node's dependencies: %zu\n", count);
        for (size_t i = 0; i < count; i++) {
            printf("dependency on %s\n", from[i] == p2 ? "produce" : from[i] == empty_root ? "empty" : "?");
            print_edge("  data", got[i]);
        }
        // An empty node after a programmatic edge: refused, and no node is left.
        np = cudaGraphNodeParams{};
        np.type = cudaGraphNodeTypeEmpty;
        cudaGraphEdgeData prog = edge(cudaGraphKernelNodePortProgrammatic, cudaGraphDependencyTypeProgrammatic);
        SAY("empty node after a programmatic edge", cudaGraphAddNode(&e2, g2, &p2, &prog, 1, &np));
        CHECK(cudaGraphGetNodes(g2, nullptr, &count));
        printf("nodes: %zu\n", count);
        cudaGraphExec_t exec2;
        CHECK(cudaGraphInstantiate(&exec2, g2, 0));
        run_and_check("added with data", exec2, 1);
        CHECK(cudaGraphExecDestroy(exec2));
        CHECK(cudaGraphDestroy(g2));
    }

    // 6. Capture into a graph after a programmatic edge, capture info, and capture
    // dependencies set with data.
    {
        cudaStream_t s;
        CHECK(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking));
        cudaGraph_t g3;
        CHECK(cudaGraphCreate(&g3, 0));
        cudaKernelNodeParams pp = kernel_params((void*)produce, pargs1);
        cudaGraphNode_t p3;
        CHECK(cudaGraphAddKernelNode(&p3, g3, nullptr, 0, &pp));
        cudaGraphEdgeData prog = edge(cudaGraphKernelNodePortProgrammatic, cudaGraphDependencyTypeProgrammatic);
        CHECK(cudaStreamBeginCaptureToGraph(s, g3, &p3, &prog, 1, cudaStreamCaptureModeGlobal));
        cudaStreamCaptureStatus status;
        const cudaGraphNode_t* deps = nullptr;
        const cudaGraphEdgeData* data = nullptr;
        size_t count = 0;
        SAY("capture info without edge data",
            cudaStreamGetCaptureInfo(s, &status, nullptr, nullptr, &deps, nullptr, &count));
        CHECK(cudaStreamGetCaptureInfo(s, &status, nullptr, nullptr, &deps, &data, &count));
        printf("capture dependencies: %zu, produce %d\n", count, count > 0 && deps[0] == p3);
        if (count > 0) print_edge("capture dependency", data[0]);
        consume<<<(N + 255) / 256, 256, 0, s>>>(a, b, N);
        CHECK(cudaGetLastError());
        CHECK(cudaStreamGetCaptureInfo(s, &status, nullptr, nullptr, &deps, &data, &count));
        printf("after the launch: %zu\n", count);
        if (count > 0) print_edge("after the launch", data[0]);
        // The next work depends on produce, programmatically, instead.
        cudaGraphEdgeData done = edge(cudaGraphKernelNodePortLaunchCompletion, cudaGraphDependencyTypeProgrammatic);
        SAY("set capture dependencies with data",
            cudaStreamUpdateCaptureDependencies(s, &p3, &done, 1, cudaStreamSetCaptureDependencies));
        CHECK(cudaStreamGetCaptureInfo(s, &status, nullptr, nullptr, &deps, &data, &count));
        printf("set: %zu, produce %d\n", count, count > 0 && deps[0] == p3);
        if (count > 0) print_edge("set", data[0]);
        cudaGraph_t ended;
        CHECK(cudaStreamEndCapture(s, &ended));
        EXPECT(ended == g3);
        CHECK(cudaGraphGetEdges(g3, nullptr, nullptr, nullptr, &count));
        printf("captured graph's edges: %zu\n", count);
        std::vector<cudaGraphNode_t> from(count), to(count);
        std::vector<cudaGraphEdgeData> got(count);
        CHECK(cudaGraphGetEdges(g3, from.data(), to.data(), got.data(), &count));
        for (size_t i = 0; i < count; i++) {
            printf("captured edge %zu: from produce %d\n", i, from[i] == p3);
            print_edge("  data", got[i]);
        }
        cudaGraphExec_t exec3;
        CHECK(cudaGraphInstantiate(&exec3, g3, 0));
        run_and_check("captured into", exec3, 1);
        CHECK(cudaGraphExecDestroy(exec3));
        CHECK(cudaGraphDestroy(g3));

        // 7. A captured launch with programmatic stream serialization.
        CHECK(cudaStreamBeginCapture(s, cudaStreamCaptureModeGlobal));
        produce<<<(N + 255) / 256, 256, 0, s>>>(a, N, 3);
        cudaLaunchConfig_t cfg = {};
        cfg.gridDim = dim3((N + 255) / 256);
        cfg.blockDim = dim3(256);
        cfg.stream = s;
        cudaLaunchAttribute attr;
        attr.id = cudaLaunchAttributeProgrammaticStreamSerialization;
        attr.val.programmaticStreamSerializationAllowed = 1;
        cfg.attrs = &attr;
        cfg.numAttrs = 1;
        CHECK(cudaLaunchKernelEx(&cfg, consume, (const int*)a, b, N));
        cudaGraph_t g4;
        CHECK(cudaStreamEndCapture(s, &g4));
        CHECK(cudaGraphGetEdges(g4, nullptr, nullptr, nullptr, &count));
        printf("serialized capture's edges: %zu\n", count);
        if (count > 0) {
            std::vector<cudaGraphNode_t> f4(count), t4(count);
            std::vector<cudaGraphEdgeData> d4(count);
            SAY("serialized edges without data", cudaGraphGetEdges(g4, f4.data(), t4.data(), nullptr, &count));
            CHECK(cudaGraphGetEdges(g4, f4.data(), t4.data(), d4.data(), &count));
            for (size_t i = 0; i < count; i++) print_edge("serialized edge", d4[i]);
        }
        cudaGraphExec_t exec4;
        CHECK(cudaGraphInstantiate(&exec4, g4, 0));
        run_and_check("serialized", exec4, 3);
        CHECK(cudaGraphExecDestroy(exec4));
        CHECK(cudaGraphDestroy(g4));
        CHECK(cudaStreamDestroy(s));
    }

    CHECK(cudaGraphExecDestroy(exec));
    CHECK(cudaGraphDestroy(clone));
    CHECK(cudaGraphDestroy(g));
    CHECK(cudaFree(a));
    CHECK(cudaFree(b));
    printf("graph_edges done\n");
    return 0;
}
