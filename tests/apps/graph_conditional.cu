// graph_conditional: conditional graph nodes whose handles device code sets
// (cudaGraphSetConditional): an IF with an else body, a WHILE whose body was captured
// into it with cudaStreamBeginCaptureToGraph (ended with a NULL graph pointer, as CUDA
// allows there), a SWITCH over three bodies, and a WHILE added to a graph while a
// stream captures it (cudaStreamGetCaptureInfo, cudaStreamUpdateCaptureDependencies),
// each launched with different inputs.
// Kernels must run, so this program runs on GPUs only (the host-memory executor has no
// conditional nodes).
// build: -rdc=true
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <cuda_runtime.h>

static const char* base_name(const char* p) { const char* s = strrchr(p, '/'); return s ? s + 1 : p; }
#define CHECK(call) do { cudaError_t e_ = (call); if (e_ != cudaSuccess) { \
    printf("FAIL %s:%d %s\n", base_name(__FILE__), __LINE__, cudaGetErrorName(e_)); exit(1); } } while (0)

__global__ void set_if_odd(const int* in, cudaGraphConditionalHandle h) {
    cudaGraphSetConditional(h, *in & 1);
}
__global__ void add(int* out, int v) { *out += v; }
__global__ void count_down(int* counter, int* total, cudaGraphConditionalHandle h) {
    *total += *counter;
    if (--*counter == 0) cudaGraphSetConditional(h, 0);
}
__global__ void pick(const int* in, cudaGraphConditionalHandle h) { cudaGraphSetConditional(h, *in); }

static void add_kernel(cudaGraph_t g, cudaGraphNode_t* node, const cudaGraphNode_t* deps, size_t n,
                       void* func, void** args) {
    cudaGraphNodeParams p = {};
    p.type = cudaGraphNodeTypeKernel;
    p.kernel.func = func;
    p.kernel.gridDim = dim3(1);
    p.kernel.blockDim = dim3(1);
    p.kernel.kernelParams = args;
    CHECK(cudaGraphAddNode(node, g, deps, nullptr, n, &p));
}

static int read_int(const int* d) {
    int v;
    CHECK(cudaMemcpy(&v, d, sizeof v, cudaMemcpyDeviceToHost));
    return v;
}

int main() {
    int *d_in, *d_out, *d_counter;
    CHECK(cudaMalloc(&d_in, sizeof(int)));
    CHECK(cudaMalloc(&d_out, sizeof(int)));
    CHECK(cudaMalloc(&d_counter, sizeof(int)));

    // IF with an else body.
    cudaGraph_t g;
    CHECK(cudaGraphCreate(&g, 0));
    cudaGraphConditionalHandle h;
    CHECK(cudaGraphConditionalHandleCreate(&h, g, 0, 0));
    cudaGraphNode_t setter, cond, body_node;
    void* set_args[] = {&d_in, &h};
    add_kernel(g, &setter, nullptr, 0, (void*)set_if_odd, set_args);
    cudaGraphNodeParams cp = {};
    cp.type = cudaGraphNodeTypeConditional;
    cp.conditional.handle = h;
    cp.conditional.type = cudaGraphCondTypeIf;
    cp.conditional.size = 2;
    CHECK(cudaGraphAddNode(&cond, g, &setter, nullptr, 1, &cp));
    cudaGraph_t then_body = cp.conditional.phGraph_out[0], else_body = cp.conditional.phGraph_out[1];
    int plus = 10, minus = -1;
    void* then_args[] = {&d_out, &plus};
    void* else_args[] = {&d_out, &minus};
    add_kernel(then_body, &body_node, nullptr, 0, (void*)add, then_args);
    add_kernel(else_body, &body_node, nullptr, 0, (void*)add, else_args);
    cudaGraphExec_t e;
    CHECK(cudaGraphInstantiate(&e, g, 0));
    CHECK(cudaMemset(d_out, 0, sizeof(int)));
    for (int in = 0; in < 5; in++) {
        CHECK(cudaMemcpy(d_in, &in, sizeof in, cudaMemcpyHostToDevice));
        CHECK(cudaGraphLaunch(e, 0));
        CHECK(cudaDeviceSynchronize());
        printf("if: in %d -> out %d\n", in, read_int(d_out));
    }
    CHECK(cudaGraphExecDestroy(e));
    CHECK(cudaGraphDestroy(g));

    // WHILE, its body captured into it.
    CHECK(cudaGraphCreate(&g, 0));
    CHECK(cudaGraphConditionalHandleCreate(&h, g, 1, cudaGraphCondAssignDefault));
    cp = {};
    cp.type = cudaGraphNodeTypeConditional;
    cp.conditional.handle = h;
    cp.conditional.type = cudaGraphCondTypeWhile;
    cp.conditional.size = 1;
    CHECK(cudaGraphAddNode(&cond, g, nullptr, nullptr, 0, &cp));
    cudaStream_t cs;
    CHECK(cudaStreamCreate(&cs));
    CHECK(cudaStreamBeginCaptureToGraph(cs, cp.conditional.phGraph_out[0], nullptr, nullptr, 0,
                                        cudaStreamCaptureModeGlobal));
    add<<<1, 1, 0, cs>>>(d_out, 1000);
    count_down<<<1, 1, 0, cs>>>(d_counter, d_out, h);
    CHECK(cudaStreamEndCapture(cs, nullptr));
    CHECK(cudaStreamDestroy(cs));
    CHECK(cudaGraphInstantiate(&e, g, 0));
    for (int start : {1, 4, 10}) {
        CHECK(cudaMemset(d_out, 0, sizeof(int)));
        CHECK(cudaMemcpy(d_counter, &start, sizeof start, cudaMemcpyHostToDevice));
        CHECK(cudaGraphLaunch(e, 0));
        CHECK(cudaDeviceSynchronize());
        printf("while: from %d -> out %d, counter %d\n", start, read_int(d_out), read_int(d_counter));
    }
    CHECK(cudaGraphExecDestroy(e));
    CHECK(cudaGraphDestroy(g));

    // SWITCH over three bodies (an index past them runs none).
    CHECK(cudaGraphCreate(&g, 0));
    CHECK(cudaGraphConditionalHandleCreate(&h, g, 0, 0));
    void* pick_args[] = {&d_in, &h};
    add_kernel(g, &setter, nullptr, 0, (void*)pick, pick_args);
    cp = {};
    cp.type = cudaGraphNodeTypeConditional;
    cp.conditional.handle = h;
    cp.conditional.type = cudaGraphCondTypeSwitch;
    cp.conditional.size = 3;
    CHECK(cudaGraphAddNode(&cond, g, &setter, nullptr, 1, &cp));
    int values[3] = {100, 200, 300};
    void* case_args[3][2];
    for (int i = 0; i < 3; i++) {
        case_args[i][0] = &d_out;
        case_args[i][1] = &values[i];
        add_kernel(cp.conditional.phGraph_out[i], &body_node, nullptr, 0, (void*)add, case_args[i]);
    }
    CHECK(cudaGraphInstantiate(&e, g, 0));
    for (int in = 0; in < 4; in++) {
        CHECK(cudaMemset(d_out, 0, sizeof(int)));
        CHECK(cudaMemcpy(d_in, &in, sizeof in, cudaMemcpyHostToDevice));
        CHECK(cudaGraphLaunch(e, 0));
        CHECK(cudaDeviceSynchronize());
        printf("switch: in %d -> out %d\n", in, read_int(d_out));
    }
    CHECK(cudaGraphExecDestroy(e));
    CHECK(cudaGraphDestroy(g));
    // A WHILE added to the graph a stream is capturing, the capture going on after it.
    cudaStream_t cap;
    CHECK(cudaStreamCreate(&cap));
    CHECK(cudaStreamBeginCapture(cap, cudaStreamCaptureModeGlobal));
    cudaStreamCaptureStatus status;
    const cudaGraphNode_t* deps = nullptr;
    size_t ndeps = 0;
    CHECK(cudaStreamGetCaptureInfo(cap, &status, nullptr, &g, &deps, nullptr, &ndeps));
    CHECK(cudaGraphConditionalHandleCreate(&h, g, 1, cudaGraphCondAssignDefault));
    count_down<<<1, 1, 0, cap>>>(d_counter, d_out, h);
    CHECK(cudaStreamGetCaptureInfo(cap, &status, nullptr, &g, &deps, nullptr, &ndeps));
    cp = {};
    cp.type = cudaGraphNodeTypeConditional;
    cp.conditional.handle = h;
    cp.conditional.type = cudaGraphCondTypeWhile;
    cp.conditional.size = 1;
    CHECK(cudaGraphAddNode(&cond, g, deps, nullptr, ndeps, &cp));
    cudaGraph_t loop_body = cp.conditional.phGraph_out[0];
    CHECK(cudaStreamUpdateCaptureDependencies(cap, &cond, nullptr, 1, cudaStreamSetCaptureDependencies));
    add<<<1, 1, 0, cap>>>(d_out, 1000000);
    cudaGraph_t captured;
    CHECK(cudaStreamEndCapture(cap, &captured));
    void* loop_args[] = {&d_counter, &d_out, &h};
    add_kernel(loop_body, &body_node, nullptr, 0, (void*)count_down, loop_args);
    size_t nodes = 0;
    CHECK(cudaGraphGetNodes(captured, nullptr, &nodes));
    printf("captured while: %zu nodes\n", nodes);
    CHECK(cudaGraphInstantiate(&e, captured, 0));
    for (int start : {1, 5}) {
        CHECK(cudaMemset(d_out, 0, sizeof(int)));
        CHECK(cudaMemcpy(d_counter, &start, sizeof start, cudaMemcpyHostToDevice));
        CHECK(cudaGraphLaunch(e, cap));
        CHECK(cudaStreamSynchronize(cap));
        printf("captured while: from %d -> out %d\n", start, read_int(d_out));
    }
    CHECK(cudaGraphExecDestroy(e));
    CHECK(cudaGraphDestroy(captured));
    CHECK(cudaStreamDestroy(cap));
    CHECK(cudaFree(d_counter));
    CHECK(cudaFree(d_out));
    CHECK(cudaFree(d_in));
    printf("graph_conditional: done\n");
    return 0;
}
