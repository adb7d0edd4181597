// hand_graphs: CUDA graphs built node by node. Memset (1- and 4-byte elements,
// pitched), memcpy (3D parameters, 1D, to a symbol), kernel, empty, child-graph,
// event record and wait, memory allocation and free nodes, and the generic
// cudaGraphAddNode; node types, roots, edges, dependents, dependencies added and
// removed, node destruction; clones and nodes found in them; executable-graph changes
// (kernel and memset parameters per node, nodes disabled and enabled again,
// cudaGraphExecUpdate with the same and with a changed topology); upload and
// cudaGraphInstantiateWithParams; parameters and kernel node attributes read back;
// stream capture into an existing graph (cudaStreamBeginCaptureToGraph). Every result
// is printed for the native comparison; what needs no kernel result is checked here too.
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

const int N = 4096;

__device__ float table[16];

__global__ void axpy(float* y, const float* x, float a, int n) {
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) y[i] += a * x[i];
}
__global__ void add_table(float* y, int n) {
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) y[i] += table[i % 16];
}

static double sum(const float* h, int n) {
    double s = 0;
    for (int i = 0; i < n; i++) s += h[i];
    return s;
}

// A host node's function: it sees the copy before it done, and the node after it
// waits for it.
struct HostSum {
    const float* h;
    int n;
    double sum;
    int calls;
};
static void CUDART_CB host_sum(void* p) {
    HostSum* hs = (HostSum*)p;
    hs->sum = sum(hs->h, hs->n);
    hs->calls++;
}

// Host functions that say which one ran, for the host-node parameter checks.
static void CUDART_CB mark_a(void* p) { *(int*)p = *(int*)p * 10 + 1; }
static void CUDART_CB mark_b(void* p) { *(int*)p = *(int*)p * 10 + 2; }
static void CUDART_CB mark_c(void* p) { *(int*)p = *(int*)p * 10 + 3; }

static size_t count_nodes(cudaGraph_t g) {
    size_t n = 0;
    CHECK(cudaGraphGetNodes(g, nullptr, &n));
    return n;
}

static size_t count_edges(cudaGraph_t g) {
    size_t n = 0;
    CHECK(cudaGraphGetEdges(g, nullptr, nullptr, nullptr, &n));
    return n;
}

static cudaGraphNodeType type_of(cudaGraphNode_t n) {
    cudaGraphNodeType t;
    CHECK(cudaGraphNodeGetType(n, &t));
    return t;
}

static void launch_and_wait(cudaGraphExec_t e, cudaStream_t s) {
    CHECK(cudaGraphLaunch(e, s));
    CHECK(cudaStreamSynchronize(s));
}

int main() {
    cudaStream_t s;
    CHECK(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking));
    float *d_x, *d_y, *h_in, *h_out;
    CHECK(cudaMalloc(&d_x, N * sizeof(float)));
    CHECK(cudaMalloc(&d_y, N * sizeof(float)));
    CHECK(cudaMallocHost(&h_in, N * sizeof(float)));
    CHECK(cudaMallocHost(&h_out, N * sizeof(float)));
    for (int i = 0; i < N; i++) h_in[i] = (float)(i % 100);
    float h_table[16];
    for (int i = 0; i < 16; i++) h_table[i] = 0.5f * i;
    float* p_table;
    CHECK(cudaMallocHost(&p_table, sizeof(h_table)));
    memcpy(p_table, h_table, sizeof(h_table));

    // ---- one graph, node by node ----
    cudaGraph_t g;
    CHECK(cudaGraphCreate(&g, 0));
    cudaMemsetParams ms = {};
    ms.dst = d_y;
    ms.value = 0x3f800000;  // 1.0f
    ms.elementSize = 4;
    ms.width = N;
    ms.height = 1;
    cudaGraphNode_t memset_node;
    CHECK(cudaGraphAddMemsetNode(&memset_node, g, nullptr, 0, &ms));

    cudaMemcpy3DParms cp = {};
    cp.srcPtr = make_cudaPitchedPtr(h_in, N * sizeof(float), N, 1);
    cp.dstPtr = make_cudaPitchedPtr(d_x, N * sizeof(float), N, 1);
    cp.extent = make_cudaExtent(N * sizeof(float), 1, 1);
    cp.kind = cudaMemcpyHostToDevice;
    cudaGraphNode_t copy_in;
    CHECK(cudaGraphAddMemcpyNode(&copy_in, g, nullptr, 0, &cp));

    cudaGraphNode_t to_symbol;
    CHECK(cudaGraphAddMemcpyNodeToSymbol(&to_symbol, g, nullptr, 0, table, p_table,
                                         sizeof(h_table), 0, cudaMemcpyHostToDevice));

    float a = 2.0f;
    int n = N;
    void* args[] = {&d_y, &d_x, &a, &n};
    cudaKernelNodeParams kp = {};
    kp.func = (void*)axpy;
    kp.gridDim = dim3((N + 255) / 256);
    kp.blockDim = dim3(256);
    kp.kernelParams = args;
    cudaGraphNode_t deps[] = {memset_node, copy_in};
    cudaGraphNode_t kernel;
    CHECK(cudaGraphAddKernelNode(&kernel, g, deps, 2, &kp));
    a = 99.0f;  // the node copied its arguments

    // The generic call, for a second kernel.
    cudaGraphNodeParams gp = {};
    gp.type = cudaGraphNodeTypeKernel;
    gp.kernel.func = (void*)add_table;
    gp.kernel.gridDim = dim3((N + 255) / 256);
    gp.kernel.blockDim = dim3(256);
    void* args2[] = {&d_y, &n};
    gp.kernel.kernelParams = args2;
    cudaGraphNode_t deps2[] = {kernel, to_symbol};
    cudaGraphNode_t kernel2;
    CHECK(cudaGraphAddNode(&kernel2, g, deps2, nullptr, 2, &gp));

    cudaGraphNode_t copy_out;
    CHECK(cudaGraphAddMemcpyNode1D(&copy_out, g, &kernel2, 1, h_out, d_y, N * sizeof(float),
                                   cudaMemcpyDeviceToHost));
    HostSum hs = {h_out, N, 0.0, 0};
    cudaHostNodeParams hp = {host_sum, &hs};
    cudaGraphNode_t host;
    CHECK(cudaGraphAddHostNode(&host, g, &copy_out, 1, &hp));
    cudaGraphNode_t empty;
    CHECK(cudaGraphAddEmptyNode(&empty, g, &host, 1));

    EXPECT(count_nodes(g) == 8);
    EXPECT(count_edges(g) == 7);
    EXPECT(type_of(host) == cudaGraphNodeTypeHost);
    EXPECT(type_of(memset_node) == cudaGraphNodeTypeMemset);
    EXPECT(type_of(copy_in) == cudaGraphNodeTypeMemcpy);
    EXPECT(type_of(kernel) == cudaGraphNodeTypeKernel);
    EXPECT(type_of(kernel2) == cudaGraphNodeTypeKernel);
    EXPECT(type_of(empty) == cudaGraphNodeTypeEmpty);
    size_t roots = 0;
    CHECK(cudaGraphGetRootNodes(g, nullptr, &roots));
    EXPECT(roots == 3);
    size_t dependents = 4;
    cudaGraphNode_t dep_list[4];
    CHECK(cudaGraphNodeGetDependentNodes(memset_node, dep_list, nullptr, &dependents));
    EXPECT(dependents == 1 && dep_list[0] == kernel);
    std::vector<cudaGraphNode_t> from(6), to(6);
    size_t edges = 6;
    CHECK(cudaGraphGetEdges(g, from.data(), to.data(), nullptr, &edges));
    int into_kernel = 0;
    for (size_t i = 0; i < edges; i++) into_kernel += to[i] == kernel;
    EXPECT(into_kernel == 2);
    printf("graph: %zu nodes, %zu edges, %zu roots\n", count_nodes(g), count_edges(g), roots);

    // Parameters read back.
    cudaKernelNodeParams back = {};
    CHECK(cudaGraphKernelNodeGetParams(kernel, &back));
    EXPECT(back.func == (void*)axpy && back.gridDim.x == (N + 255) / 256);
    EXPECT(*(float*)back.kernelParams[2] == 2.0f && *(int*)back.kernelParams[3] == N);
    cudaMemsetParams ms_back = {};
    CHECK(cudaGraphMemsetNodeGetParams(memset_node, &ms_back));
    EXPECT(ms_back.value == 0x3f800000 && ms_back.width == (size_t)N);

    // Launch attributes of kernel nodes: set, read back, copied to another kernel node;
    // a node of another type takes none.
    cudaKernelNodeAttrValue prio = {};
    prio.priority = -1;
    CHECK(cudaGraphKernelNodeSetAttribute(kernel, cudaKernelNodeAttributePriority, &prio));
    cudaKernelNodeAttrValue prio_back = {}, prio_copied = {};
    CHECK(cudaGraphKernelNodeGetAttribute(kernel, cudaKernelNodeAttributePriority, &prio_back));
    CHECK(cudaGraphKernelNodeCopyAttributes(kernel2, kernel));
    CHECK(cudaGraphKernelNodeGetAttribute(kernel2, cudaKernelNodeAttributePriority, &prio_copied));
    cudaError_t not_kernel =
        cudaGraphKernelNodeGetAttribute(memset_node, cudaKernelNodeAttributePriority, &prio_copied);
    (void)cudaGetLastError();
    printf("kernel node priority: %d, copied %d; of a memset node: %s\n", prio_back.priority,
           prio_copied.priority, cudaGetErrorName(not_kernel));

    cudaGraphExec_t e;
    CHECK(cudaGraphInstantiate(&e, g, 0));
    launch_and_wait(e, s);
    printf("launch 1: sum %.1f, y[5] %.1f\n", sum(h_out, N), h_out[5]);
    EXPECT(hs.calls == 1 && hs.sum == sum(h_out, N));
    cudaHostNodeParams hp_back = {};
    CHECK(cudaGraphHostNodeGetParams(host, &hp_back));
    EXPECT(hp_back.fn == host_sum && hp_back.userData == &hs);

    // ---- the executable graph changed ----
    float a3 = 3.0f;
    void* args3[] = {&d_y, &d_x, &a3, &n};
    kp.kernelParams = args3;
    CHECK(cudaGraphExecKernelNodeSetParams(e, kernel, &kp));
    ms.value = 0x40000000;  // 2.0f
    CHECK(cudaGraphExecMemsetNodeSetParams(e, memset_node, &ms));
    launch_and_wait(e, s);
    printf("a=3, y0=2: sum %.1f\n", sum(h_out, N));
    CHECK(cudaGraphNodeSetEnabled(e, kernel, 0));
    unsigned int on = 1;
    CHECK(cudaGraphNodeGetEnabled(e, kernel, &on));
    EXPECT(on == 0);
    launch_and_wait(e, s);
    printf("axpy disabled: sum %.1f\n", sum(h_out, N));
    CHECK(cudaGraphNodeSetEnabled(e, kernel, 1));
    launch_and_wait(e, s);
    printf("enabled again: sum %.1f\n", sum(h_out, N));
    EXPECT(hs.calls == 4 && hs.sum == sum(h_out, N));

    // ---- a clone, changed, and the executable graph updated to it ----
    cudaGraph_t c;
    CHECK(cudaGraphClone(&c, g));
    cudaGraphNode_t kernel_in_clone;
    CHECK(cudaGraphNodeFindInClone(&kernel_in_clone, kernel, c));
    EXPECT(kernel_in_clone != kernel && type_of(kernel_in_clone) == cudaGraphNodeTypeKernel);
    float a4 = 4.0f;
    void* args4[] = {&d_y, &d_x, &a4, &n};
    kp.kernelParams = args4;
    CHECK(cudaGraphKernelNodeSetParams(kernel_in_clone, &kp));
    cudaGraphExecUpdateResultInfo info;
    CHECK(cudaGraphExecUpdate(e, c, &info));
    EXPECT(info.result == cudaGraphExecUpdateSuccess);
    launch_and_wait(e, s);
    printf("updated to the clone (a=4, y0=1): sum %.1f\n", sum(h_out, N));
    cudaGraphNode_t extra;
    CHECK(cudaGraphAddEmptyNode(&extra, c, nullptr, 0));
    cudaError_t changed = cudaGraphExecUpdate(e, c, &info);
    printf("update with a new node: %s, result %d\n", cudaGetErrorName(changed), (int)info.result);
    EXPECT(changed == cudaErrorGraphExecUpdateFailure);
    EXPECT(info.result == cudaGraphExecUpdateErrorTopologyChanged);
    (void)cudaGetLastError();
    CHECK(cudaGraphDestroyNode(extra));
    EXPECT(count_nodes(c) == 8);

    // ---- dependencies added and removed ----
    cudaGraph_t d;
    CHECK(cudaGraphCreate(&d, 0));
    cudaGraphNode_t e1, e2;
    CHECK(cudaGraphAddEmptyNode(&e1, d, nullptr, 0));
    CHECK(cudaGraphAddEmptyNode(&e2, d, nullptr, 0));
    CHECK(cudaGraphAddDependencies(d, &e1, &e2, nullptr, 1));
    EXPECT(count_edges(d) == 1);
    cudaError_t twice = cudaGraphAddDependencies(d, &e1, &e2, nullptr, 1);
    printf("the same edge twice: %s\n", cudaGetErrorName(twice));
    (void)cudaGetLastError();
    CHECK(cudaGraphRemoveDependencies(d, &e1, &e2, nullptr, 1));
    EXPECT(count_edges(d) == 0);
    cudaError_t foreign = cudaGraphAddDependencies(d, &e1, &kernel, nullptr, 1);
    printf("an edge to another graph's node: %s\n", cudaGetErrorName(foreign));
    EXPECT(foreign != cudaSuccess);
    (void)cudaGetLastError();

    // ---- a child graph, event record and wait nodes ----
    cudaEvent_t ev;
    CHECK(cudaEventCreateWithFlags(&ev, cudaEventDisableTiming));
    cudaGraph_t parent;
    CHECK(cudaGraphCreate(&parent, 0));
    cudaGraphNode_t child, record, wait;
    CHECK(cudaGraphAddChildGraphNode(&child, parent, nullptr, 0, g));
    CHECK(cudaGraphAddEventRecordNode(&record, parent, &child, 1, ev));
    EXPECT(type_of(child) == cudaGraphNodeTypeGraph);
    EXPECT(type_of(record) == cudaGraphNodeTypeEventRecord);
    cudaGraph_t inside;
    CHECK(cudaGraphChildGraphNodeGetGraph(child, &inside));
    EXPECT(count_nodes(inside) == 8);
    cudaEvent_t ev_back;
    CHECK(cudaGraphEventRecordNodeGetEvent(record, &ev_back));
    EXPECT(ev_back == ev);
    cudaGraph_t waiter;
    CHECK(cudaGraphCreate(&waiter, 0));
    CHECK(cudaGraphAddEventWaitNode(&wait, waiter, nullptr, 0, ev));
    EXPECT(type_of(wait) == cudaGraphNodeTypeWaitEvent);
    cudaMemsetParams ms2 = {};
    ms2.dst = d_x;
    ms2.value = 7;
    ms2.elementSize = 1;
    ms2.width = 64;
    ms2.height = 1;
    cudaGraphNode_t after_wait;
    CHECK(cudaGraphAddMemsetNode(&after_wait, waiter, &wait, 1, &ms2));
    cudaGraphExec_t pe, we;
    CHECK(cudaGraphInstantiate(&pe, parent, 0));
    cudaGraphInstantiateParams ip = {};
    ip.flags = cudaGraphInstantiateFlagUpload;
    ip.uploadStream = s;
    CHECK(cudaGraphInstantiateWithParams(&we, waiter, &ip));
    EXPECT(ip.result_out == cudaGraphInstantiateSuccess);
    CHECK(cudaGraphUpload(pe, s));
    CHECK(cudaGraphLaunch(pe, s));
    CHECK(cudaGraphLaunch(we, s));
    CHECK(cudaStreamSynchronize(s));
    unsigned char bytes[64];
    CHECK(cudaMemcpy(bytes, d_x, 64, cudaMemcpyDeviceToHost));
    EXPECT(bytes[0] == 7 && bytes[63] == 7);
    printf("child graph: sum %.1f\n", sum(h_out, N));

    // ---- an executable graph's child-graph node given another graph ----
    {
        auto memset_graph = [&](unsigned char value, int nodes) {
            cudaGraph_t x;
            CHECK(cudaGraphCreate(&x, 0));
            cudaGraphNode_t last = nullptr;
            for (int i = 0; i < nodes; i++) {
                cudaMemsetParams p = ms2;
                p.value = value;
                cudaGraphNode_t n;
                CHECK(cudaGraphAddMemsetNode(&n, x, last ? &last : nullptr, last ? 1 : 0, &p));
                last = n;
            }
            return x;
        };
        cudaGraph_t first = memset_graph(3, 1), second = memset_graph(5, 1), longer = memset_graph(9, 2);
        cudaGraph_t holder;
        CHECK(cudaGraphCreate(&holder, 0));
        cudaGraphNode_t held;
        CHECK(cudaGraphAddChildGraphNode(&held, holder, nullptr, 0, first));
        cudaGraphExec_t he;
        CHECK(cudaGraphInstantiate(&he, holder, 0));
        auto run_byte = [&]() {
            CHECK(cudaGraphLaunch(he, s));
            CHECK(cudaStreamSynchronize(s));
            unsigned char b[64];
            CHECK(cudaMemcpy(b, d_x, 64, cudaMemcpyDeviceToHost));
            EXPECT(b[0] == b[63]);
            return (int)b[0];
        };
        int before = run_byte();
        CHECK(cudaGraphExecChildGraphNodeSetParams(he, held, second));
        int after = run_byte();
        cudaError_t other_shape = cudaGraphExecChildGraphNodeSetParams(he, held, longer);
        int kept = run_byte();
        cudaError_t not_a_child = cudaGraphExecChildGraphNodeSetParams(he, after_wait, second);
        (void)cudaGetLastError();
        printf("executable child graph: %d, given another graph %d, one of another shape: %s (still %d); "
               "a node not its own: %s\n",
               before, after, cudaGetErrorName(other_shape), kept, cudaGetErrorName(not_a_child));
        CHECK(cudaGraphExecDestroy(he));
        for (cudaGraph_t x : {holder, first, second, longer}) CHECK(cudaGraphDestroy(x));
    }

    // ---- memory nodes: allocate, fill, copy out, free, twice ----
    cudaGraph_t m;
    CHECK(cudaGraphCreate(&m, 0));
    cudaMemAllocNodeParams ap = {};
    ap.poolProps.allocType = cudaMemAllocationTypePinned;
    ap.poolProps.location.type = cudaMemLocationTypeDevice;
    ap.poolProps.location.id = 0;
    ap.bytesize = 256 * 2 * sizeof(short);
    cudaGraphNode_t alloc;
    CHECK(cudaGraphAddMemAllocNode(&alloc, m, nullptr, 0, &ap));
    EXPECT(ap.dptr != nullptr);
    cudaMemsetParams pitched = {};
    pitched.dst = ap.dptr;
    pitched.pitch = 256 * sizeof(short);
    pitched.value = 0x1234;
    pitched.elementSize = 2;
    pitched.width = 100;
    pitched.height = 2;
    cudaGraphNode_t fill;
    CHECK(cudaGraphAddMemsetNode(&fill, m, &alloc, 1, &pitched));
    cudaGraphNode_t out;
    CHECK(cudaGraphAddMemcpyNode1D(&out, m, &fill, 1, h_out, ap.dptr, 256 * 2 * sizeof(short),
                                   cudaMemcpyDeviceToHost));
    cudaGraphNode_t free_node;
    CHECK(cudaGraphAddMemFreeNode(&free_node, m, &out, 1, ap.dptr));
    void* freed = nullptr;
    CHECK(cudaGraphMemFreeNodeGetParams(free_node, &freed));
    EXPECT(freed == ap.dptr);
    cudaGraphExec_t me;
    CHECK(cudaGraphInstantiate(&me, m, 0));
    for (int i = 0; i < 2; i++) launch_and_wait(me, s);
    const unsigned short* shorts = (const unsigned short*)h_out;
    EXPECT(shorts[0] == 0x1234 && shorts[99] == 0x1234 && shorts[256] == 0x1234);
    EXPECT(shorts[355] == 0x1234);
    printf("memory nodes: %04x %04x %04x\n", shorts[0], shorts[99], shorts[355]);
    unsigned long long used = 0, reserved = 0, zero = 0;
    CHECK(cudaDeviceGetGraphMemAttribute(0, cudaGraphMemAttrUsedMemCurrent, &used));
    CHECK(cudaDeviceGetGraphMemAttribute(0, cudaGraphMemAttrReservedMemCurrent, &reserved));
    printf("graph memory: used %s, reserved covers it %s\n", used > 0 ? "yes" : "no",
           reserved >= used ? "yes" : "no");
    CHECK(cudaDeviceSetGraphMemAttribute(0, cudaGraphMemAttrUsedMemHigh, &zero));
    CHECK(cudaDeviceGraphMemTrim(0));

    // ---- a graph's allocation freed by another graph, built while it is not live ----
    cudaGraph_t ga, gf;
    CHECK(cudaGraphCreate(&ga, 0));
    cudaMemAllocNodeParams ap2 = ap;
    ap2.dptr = nullptr;
    cudaGraphNode_t alloc2, free2;
    CHECK(cudaGraphAddMemAllocNode(&alloc2, ga, nullptr, 0, &ap2));
    cudaGraphExec_t gae, gfe;
    CHECK(cudaGraphInstantiate(&gae, ga, 0));
    launch_and_wait(gae, s);
    CHECK(cudaFreeAsync(ap2.dptr, s));
    CHECK(cudaStreamSynchronize(s));
    CHECK(cudaGraphCreate(&gf, 0));
    CHECK(cudaGraphAddMemFreeNode(&free2, gf, nullptr, 0, ap2.dptr));
    CHECK(cudaGraphInstantiate(&gfe, gf, 0));
    CHECK(cudaGraphLaunch(gae, s));
    CHECK(cudaMemsetAsync(ap2.dptr, 0, ap2.bytesize, s));
    CHECK(cudaGraphLaunch(gfe, s));
    CHECK(cudaStreamSynchronize(s));
    printf("freed by another graph: ok\n");
    CHECK(cudaGraphExecDestroy(gfe));
    CHECK(cudaGraphExecDestroy(gae));
    CHECK(cudaGraphDestroy(gf));
    CHECK(cudaGraphDestroy(ga));

    // ---- the program's own (pageable) memory in a graph, built and captured ----
    std::vector<float> in_pageable(N), out_pageable(N, -1.0f);
    for (int i = 0; i < N; i++) in_pageable[i] = (float)(i % 13);
    cudaGraph_t pg;
    CHECK(cudaGraphCreate(&pg, 0));
    cudaGraphNode_t up, down;
    CHECK(cudaGraphAddMemcpyNode1D(&up, pg, nullptr, 0, d_x, in_pageable.data(), N * sizeof(float),
                                   cudaMemcpyHostToDevice));
    CHECK(cudaGraphAddMemcpyNode1D(&down, pg, &up, 1, out_pageable.data(), d_x, N * sizeof(float),
                                   cudaMemcpyDeviceToHost));
    EXPECT(count_nodes(pg) == 2);
    cudaGraphExec_t pge;
    CHECK(cudaGraphInstantiate(&pge, pg, 0));
    launch_and_wait(pge, s);
    EXPECT(out_pageable == in_pageable);
    in_pageable[7] = 1000.0f;  // read when the graph runs, not when it was built
    launch_and_wait(pge, s);
    EXPECT(out_pageable[7] == 1000.0f);
    std::vector<float> round_trip(N, 0.0f);
    CHECK(cudaStreamBeginCapture(s, cudaStreamCaptureModeGlobal));
    CHECK(cudaMemcpyAsync(d_y, in_pageable.data(), N * sizeof(float), cudaMemcpyHostToDevice, s));
    CHECK(cudaMemcpyAsync(round_trip.data(), d_y, N * sizeof(float), cudaMemcpyDeviceToHost, s));
    cudaGraph_t cg;
    CHECK(cudaStreamEndCapture(s, &cg));
    EXPECT(count_nodes(cg) == 2);
    cudaGraphExec_t cge;
    CHECK(cudaGraphInstantiate(&cge, cg, 0));
    launch_and_wait(cge, s);
    EXPECT(round_trip == in_pageable);
    printf("pageable memory in graphs: %.1f %.1f\n", out_pageable[7], round_trip[12]);
    CHECK(cudaGraphExecDestroy(cge));
    CHECK(cudaGraphDestroy(cg));
    CHECK(cudaGraphExecDestroy(pge));
    CHECK(cudaGraphDestroy(pg));

    // ---- stream capture into an existing graph ----
    cudaGraph_t into;
    CHECK(cudaGraphCreate(&into, 0));
    cudaGraphNode_t first;
    CHECK(cudaGraphAddMemsetNode(&first, into, nullptr, 0, &ms));
    CHECK(cudaStreamBeginCaptureToGraph(s, into, &first, nullptr, 1, cudaStreamCaptureModeGlobal));
    axpy<<<(N + 255) / 256, 256, 0, s>>>(d_y, d_x, 1.0f, N);
    CHECK(cudaMemcpyAsync(h_out, d_y, N * sizeof(float), cudaMemcpyDeviceToHost, s));
    HostSum captured = {h_out, N, 0.0, 0};
    CHECK(cudaLaunchHostFunc(s, host_sum, &captured));
    cudaGraph_t ended;
    CHECK(cudaStreamEndCapture(s, &ended));
    EXPECT(ended == into);
    EXPECT(count_nodes(into) == 4);
    cudaGraphExec_t ie;
    CHECK(cudaGraphInstantiate(&ie, into, 0));
    launch_and_wait(ie, s);
    launch_and_wait(ie, s);
    printf("captured into a graph: sum %.1f\n", sum(h_out, N));
    EXPECT(captured.calls == 2 && captured.sum == sum(h_out, N));

    // A host node's function set anew: an executable graph made before keeps the one
    // it was made with; one set in an executable graph is its own; a clone's copy is a
    // host node calling the original's function until one of them gets another.
    {
        int mark = 0;
        cudaGraph_t hg;
        CHECK(cudaGraphCreate(&hg, 0));
        cudaGraphNode_t hn;
        cudaHostNodeParams pa = {mark_a, &mark};
        CHECK(cudaGraphAddHostNode(&hn, hg, nullptr, 0, &pa));
        cudaGraphExec_t e1, e2;
        CHECK(cudaGraphInstantiate(&e1, hg, 0));
        cudaHostNodeParams pb = {mark_b, &mark};
        CHECK(cudaGraphHostNodeSetParams(hn, &pb));
        CHECK(cudaGraphInstantiate(&e2, hg, 0));
        auto run = [&](cudaGraphExec_t x) {
            mark = 0;
            CHECK(cudaGraphLaunch(x, s));
            CHECK(cudaStreamSynchronize(s));
            return mark;
        };
        int first = run(e1), second = run(e2);
        printf("host node: made before the new function: %d, after: %d\n", first, second);
        cudaHostNodeParams pc = {mark_c, &mark};
        CHECK(cudaGraphExecHostNodeSetParams(e1, hn, &pc));
        first = run(e1);
        second = run(e2);
        printf("host node set in one executable graph: it %d, the other %d\n", first, second);
        cudaHostNodeParams back = {};
        CHECK(cudaGraphHostNodeGetParams(hn, &back));
        printf("the graph's node still calls: %s\n", back.fn == mark_b ? "b" : "another");
        cudaGraph_t hc;
        CHECK(cudaGraphClone(&hc, hg));
        cudaGraphNode_t cn;
        CHECK(cudaGraphNodeFindInClone(&cn, hn, hc));
        cudaGraphNodeType t;
        CHECK(cudaGraphNodeGetType(cn, &t));
        printf("clone's copy is a host node: %s\n", t == cudaGraphNodeTypeHost ? "yes" : "no");
        CHECK(cudaGraphHostNodeGetParams(cn, &back));
        printf("clone's copy calls: %s\n", back.fn == mark_b ? "b" : "another");
        CHECK(cudaGraphHostNodeSetParams(cn, &pa));
        cudaGraphExec_t ce;
        CHECK(cudaGraphInstantiate(&ce, hc, 0));
        int cloned = run(ce);
        second = run(e2);
        CHECK(cudaGraphHostNodeGetParams(hn, &back));
        printf("clone given a: clone %d, original's %d, original's node calls %s\n", cloned,
               second, back.fn == mark_b ? "b" : "another");
        // Updated from the graph, an executable graph takes its functions again.
        cudaGraphExecUpdateResultInfo info;
        CHECK(cudaGraphExecUpdate(e1, hg, &info));
        printf("after an update from the graph: %d\n", run(e1));
        for (cudaGraphExec_t x : {e1, e2, ce}) CHECK(cudaGraphExecDestroy(x));
        CHECK(cudaGraphDestroy(hc));
        CHECK(cudaGraphDestroy(hg));
    }

    CHECK(cudaGraphExecDestroy(ie));
    CHECK(cudaGraphExecDestroy(me));
    CHECK(cudaGraphExecDestroy(we));
    CHECK(cudaGraphExecDestroy(pe));
    CHECK(cudaGraphExecDestroy(e));
    for (cudaGraph_t x : {into, m, waiter, parent, d, c, g}) CHECK(cudaGraphDestroy(x));
    CHECK(cudaEventDestroy(ev));
    CHECK(cudaFreeHost(p_table));
    CHECK(cudaFreeHost(h_out));
    CHECK(cudaFreeHost(h_in));
    CHECK(cudaFree(d_y));
    CHECK(cudaFree(d_x));
    printf("hand_graphs: done\n");
    return 0;
}
