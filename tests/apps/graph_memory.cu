// graph_memory: graphs with memory nodes, updated and moved. An executable graph
// updated with another graph with memory nodes (other addresses, another size), run
// after the first graph and then the second are gone; a graph with memory nodes moved
// into a child-graph node (cudaGraphAddNode, ownership "move") and run with its parent;
// what CUDA refuses around them (clones, copies as child graphs, a moved graph
// instantiated, destroyed, moved again or given memory nodes). Every result is printed
// for the native comparison.
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <cuda_runtime.h>

static const char* base_name(const char* p) { const char* s = strrchr(p, '/'); return s ? s + 1 : p; }
#define CHECK(call) do { cudaError_t e_ = (call); if (e_ != cudaSuccess) { \
    printf("FAIL %s:%d %s\n", base_name(__FILE__), __LINE__, cudaGetErrorName(e_)); exit(1); } } while (0)
#define SAY(what, call) do { cudaError_t e_ = (call); printf("%s: %s\n", what, cudaGetErrorName(e_)); \
    cudaGetLastError(); } while (0)

const int N = 1 << 18;

__global__ void fill(int* p, int n, int add) {
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) p[i] = i + add;
}
__global__ void sum(const int* p, int n, unsigned long long* out) {
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) atomicAdd(out, (unsigned long long)p[i]);
}

static unsigned long long* total;
static int n = N;

// alloc -> fill(add) -> sum -> free, the allocation `bytes` long.
static cudaGraph_t memory_graph(size_t bytes, int* add) {
    cudaGraph_t g;
    CHECK(cudaGraphCreate(&g, 0));
    cudaMemAllocNodeParams ap = {};
    ap.poolProps.allocType = cudaMemAllocationTypePinned;
    ap.poolProps.location.type = cudaMemLocationTypeDevice;
    ap.poolProps.location.id = 0;
    ap.bytesize = bytes;
    cudaGraphNode_t a, f1, s1, fr;
    CHECK(cudaGraphAddMemAllocNode(&a, g, nullptr, 0, &ap));
    // The parameters are copied into the nodes: the pointer's storage may go after.
    static void* ptrs[8];
    static int next;
    void** p = &ptrs[next++ % 8];
    *p = ap.dptr;
    void* fill_args[] = {p, &n, add};
    cudaKernelNodeParams kp = {};
    kp.func = (void*)fill;
    kp.gridDim = dim3(N / 256);
    kp.blockDim = dim3(256);
    kp.kernelParams = fill_args;
    CHECK(cudaGraphAddKernelNode(&f1, g, &a, 1, &kp));
    void* sum_args[] = {p, &n, &total};
    kp.func = (void*)sum;
    kp.kernelParams = sum_args;
    CHECK(cudaGraphAddKernelNode(&s1, g, &f1, 1, &kp));
    CHECK(cudaGraphAddMemFreeNode(&fr, g, &s1, 1, ap.dptr));
    return g;
}

static unsigned long long expect(int add) {
    return (unsigned long long)N * (N - 1) / 2 + (unsigned long long)N * add;
}

static void run(const char* what, cudaGraphExec_t exec, int add) {
    CHECK(cudaMemset(total, 0, sizeof *total));
    CHECK(cudaGraphLaunch(exec, 0));
    CHECK(cudaStreamSynchronize(0));
    unsigned long long t = 0;
    CHECK(cudaMemcpy(&t, total, sizeof t, cudaMemcpyDeviceToHost));
    printf("%s: sum %s\n", what, t == expect(add) ? "right" : "WRONG");
}

int main() {
    CHECK(cudaSetDevice(0));
    CHECK(cudaMalloc(&total, sizeof *total));
    int one = 1, two = 2, three = 3;

    // 1. Exec updates with graphs with memory nodes.
    cudaGraph_t g1 = memory_graph(1 << 20, &one);
    cudaGraph_t copy = nullptr;
    SAY("clone of a graph with memory nodes", cudaGraphClone(&copy, g1));
    cudaGraphExec_t exec;
    CHECK(cudaGraphInstantiate(&exec, g1, 0));
    run("first", exec, 1);
    cudaGraph_t g2 = memory_graph(1 << 20, &two);
    cudaGraphExecUpdateResultInfo info;
    SAY("update with other addresses", cudaGraphExecUpdate(exec, g2, &info));
    printf("result %d\n", (int)info.result);
    run("updated", exec, 2);
    CHECK(cudaGraphDestroy(g1));
    run("first graph gone", exec, 2);
    cudaGraph_t g3 = memory_graph(2 << 20, &three);
    SAY("update with another size", cudaGraphExecUpdate(exec, g3, &info));
    printf("result %d\n", (int)info.result);
    CHECK(cudaGraphDestroy(g2));
    run("resized", exec, 3);
    CHECK(cudaGraphDestroy(g3));
    run("every graph gone", exec, 3);
    CHECK(cudaGraphExecDestroy(exec));

    // 2. A graph with memory nodes moved into a child-graph node.
    cudaGraph_t child = memory_graph(1 << 20, &two);
    cudaGraph_t parent;
    CHECK(cudaGraphCreate(&parent, 0));
    cudaGraphNode_t node, other;
    SAY("copied as a child graph", cudaGraphAddChildGraphNode(&other, parent, nullptr, 0, child));
    cudaGraphNodeParams np = {};
    np.type = cudaGraphNodeTypeGraph;
    np.graph.graph = child;
    np.graph.ownership = cudaGraphChildGraphOwnershipClone;
    SAY("copied through cudaGraphAddNode", cudaGraphAddNode(&other, parent, nullptr, nullptr, 0, &np));
    np.graph.ownership = cudaGraphChildGraphOwnershipMove;
    CHECK(cudaGraphAddNode(&node, parent, nullptr, nullptr, 0, &np));
    cudaGraph_t held = nullptr;
    CHECK(cudaGraphChildGraphNodeGetGraph(node, &held));
    printf("the node holds the moved graph itself: %d\n", held == child);
    size_t count = 0;
    CHECK(cudaGraphGetNodes(held, nullptr, &count));
    // (Not the count: vmcuda's allocation nodes come with the node that zeroes them.)
    printf("its nodes readable: %d\n", count >= 4);
    cudaGraphExec_t bad;
    SAY("instantiate the moved graph", cudaGraphInstantiate(&bad, child, 0));
    SAY("destroy the moved graph", cudaGraphDestroy(child));
    cudaGraph_t parent2;
    CHECK(cudaGraphCreate(&parent2, 0));
    SAY("move it again", cudaGraphAddNode(&other, parent2, nullptr, nullptr, 0, &np));
    SAY("clone the parent", cudaGraphClone(&copy, parent));
    cudaGraphNode_t after;
    CHECK(cudaGraphAddEmptyNode(&after, parent, &node, 1));
    cudaGraphExec_t pexec;
    CHECK(cudaGraphInstantiate(&pexec, parent, 0));
    run("parent", pexec, 2);
    run("parent again", pexec, 2);
    CHECK(cudaGraphDestroy(parent));
    run("parent gone", pexec, 2);
    CHECK(cudaGraphExecDestroy(pexec));

    // 3. A graph without memory nodes, moved: no memory node may join it after.
    cudaGraph_t plain;
    CHECK(cudaGraphCreate(&plain, 0));
    cudaGraphNode_t e;
    CHECK(cudaGraphAddEmptyNode(&e, plain, nullptr, 0));
    np.graph.graph = plain;
    CHECK(cudaGraphAddNode(&other, parent2, nullptr, nullptr, 0, &np));
    cudaMemAllocNodeParams ap = {};
    ap.poolProps.allocType = cudaMemAllocationTypePinned;
    ap.poolProps.location.type = cudaMemLocationTypeDevice;
    ap.bytesize = 1 << 16;
    cudaGraphNode_t a;
    SAY("an allocation node into a moved graph", cudaGraphAddMemAllocNode(&a, plain, nullptr, 0, &ap));
    SAY("an empty node into a moved graph", cudaGraphAddEmptyNode(&e, plain, nullptr, 0));
    copy = nullptr;
    SAY("clone its parent", cudaGraphClone(&copy, parent2));
    if (copy) CHECK(cudaGraphDestroy(copy));
    CHECK(cudaGraphDestroy(parent2));

    // 4. A programmatic edge into a child graph to be moved: refused, and the graph
    // stays the program's.
    {
        int* scratch;
        CHECK(cudaMalloc(&scratch, 256 * sizeof(int)));
        int small = 256;
        void* args[] = {&scratch, &small, &one};
        cudaKernelNodeParams kp = {};
        kp.func = (void*)fill;
        kp.gridDim = dim3(1);
        kp.blockDim = dim3(256);
        kp.kernelParams = args;
        cudaGraph_t p3, c3 = memory_graph(1 << 16, &one);
        CHECK(cudaGraphCreate(&p3, 0));
        cudaGraphNode_t k, moved;
        CHECK(cudaGraphAddKernelNode(&k, p3, nullptr, 0, &kp));
        cudaGraphEdgeData prog = {};
        prog.from_port = cudaGraphKernelNodePortProgrammatic;
        prog.type = cudaGraphDependencyTypeProgrammatic;
        np = cudaGraphNodeParams{};
        np.type = cudaGraphNodeTypeGraph;
        np.graph.graph = c3;
        np.graph.ownership = cudaGraphChildGraphOwnershipMove;
        SAY("moved after a programmatic edge", cudaGraphAddNode(&moved, p3, &k, &prog, 1, &np));
        CHECK(cudaGraphGetNodes(p3, nullptr, &count));
        printf("parent's nodes: %zu\n", count);
        SAY("destroy the graph not moved", cudaGraphDestroy(c3));
        CHECK(cudaGraphDestroy(p3));
        CHECK(cudaFree(scratch));
    }

    CHECK(cudaFree(total));
    printf("graph_memory done\n");
    return 0;
}
