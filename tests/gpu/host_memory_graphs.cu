// Host memory that graphs of captured launches keep, on the GPU machine.
//
//   host_memory_graphs measure [NODES...]   natively: the CUDA driver's own host memory
//       (the process's RSS) per node of a captured graph of launches with 5 KB of
//       parameters, and per node of its executable graph; a short table. Fails (exit 1)
//       where the driver keeps more per node than vmcuda charges a guest for one
//       (host-backend/src/session/host_memory.rs: GRAPH_NODE_BYTES and the parameters,
//       once for the graph and once for the executable graph), or keeps it after the
//       graphs are destroyed.
//   host_memory_graphs flood                as a guest (bridged, under a host_memory
//       limit): graphs of 4096 such launches, each instantiated, kept until a call is
//       refused; prints "connected", then "holding NODES STATUS" and holds them for 3 s
//       (for tests/gpu/run-isolation.sh to read the worker's RSS), then "refused after
//       NODES nodes: STATUS" as its last line. Exit 0 only when the refusal was
//       cudaErrorMemoryAllocation.
//
// Build: nvcc -cudart shared -arch=sm_90 -O2 -o host_memory_graphs host_memory_graphs.cu
#include <cuda_runtime.h>
#include <malloc.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

struct Big {
    char b[5000];
};

__global__ void big(int a, Big s, int *p) {
    if (p) p[0] = s.b[a % 5000] + a;
}

// What vmcuda charges a guest per captured launch of `big`, besides two copies of the
// parameters: keep in step with GRAPH_NODE_BYTES and PARAMETER_COPIES in
// host-backend/src/session/host_memory.rs.
static const long kChargedPerNode = 12 << 10;
static const long kParamBytes = 5016;  // int at 0, Big at 4, pointer at 5008

static long rss_bytes() {
    FILE *f = fopen("/proc/self/statm", "r");
    long size = 0, resident = 0;
    if (!f || fscanf(f, "%ld %ld", &size, &resident) != 2) {
        fprintf(stderr, "cannot read /proc/self/statm\n");
        exit(2);
    }
    fclose(f);
    return resident * sysconf(_SC_PAGESIZE);
}

static long settled_rss() {
    malloc_trim(0);
    return rss_bytes();
}

#define CHECK(call)                                                                  \
    do {                                                                             \
        cudaError_t e_ = (call);                                                     \
        if (e_ != cudaSuccess) {                                                     \
            printf("FAIL %s: %s (%d)\n", #call, cudaGetErrorName(e_), (int)e_);       \
            exit(1);                                                                 \
        }                                                                            \
    } while (0)

// Capture `nodes` launches of `big` on `s` into a graph.
static cudaError_t capture(cudaStream_t s, int nodes, int *d, cudaGraph_t *graph, int *made) {
    static Big arg;
    cudaError_t e = cudaStreamBeginCapture(s, cudaStreamCaptureModeThreadLocal);
    if (e != cudaSuccess) return e;
    cudaError_t launched = cudaSuccess;
    *made = 0;
    for (int i = 0; i < nodes; i++) {
        big<<<1, 1, 0, s>>>(i, arg, d);
        launched = cudaGetLastError();
        if (launched != cudaSuccess) break;
        (*made)++;
    }
    e = cudaStreamEndCapture(s, graph);
    return launched != cudaSuccess ? launched : e;
}

static int measure(int argc, char **argv) {
    int counts[8] = {1024, 8192, 32768};
    int n = 3;
    if (argc > 2) {
        n = 0;
        for (int i = 2; i < argc && n < 8; i++) counts[n++] = atoi(argv[i]);
    }
    int *d;
    cudaStream_t s;
    CHECK(cudaMalloc(&d, 4096));
    CHECK(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking));
    CHECK(cudaDeviceSynchronize());
    int failed = 0;
    long charged = kChargedPerNode + 2 * kParamBytes;
    printf("| nodes | graph: RSS growth | per node | exec: RSS growth | per node | after destroy | vmcuda charges per node (graph + exec) | check |\n");
    printf("| --- | --- | --- | --- | --- | --- | --- | --- |\n");
    for (int i = 0; i < n; i++) {
        int nodes = counts[i], made = 0;
        long before = settled_rss();
        cudaGraph_t graph;
        CHECK(capture(s, nodes, d, &graph, &made));
        long with_graph = settled_rss();
        cudaGraphExec_t exec;
        CHECK(cudaGraphInstantiate(&exec, graph, 0));
        CHECK(cudaGraphLaunch(exec, s));
        CHECK(cudaStreamSynchronize(s));
        long with_exec = settled_rss();
        CHECK(cudaGraphExecDestroy(exec));
        CHECK(cudaGraphDestroy(graph));
        CHECK(cudaDeviceSynchronize());
        long after = settled_rss();
        long graph_per = (with_graph - before) / nodes;
        long exec_per = (with_exec - with_graph) / nodes;
        // Counted: the driver keeps no more per node than vmcuda charges, and gives
        // most of it back with the graphs (the allocator may keep some pages).
        bool under = graph_per + exec_per <= 2 * charged;
        bool released = after - before <= (with_exec - before) / 4 + (4 << 20);
        if (!under || !released) failed = 1;
        printf("| %d | %.1f MiB | %ld B | %.1f MiB | %ld B | %+.1f MiB | %ld B | %s |\n", nodes,
               (with_graph - before) / 1048576.0, graph_per, (with_exec - with_graph) / 1048576.0,
               exec_per, (after - before) / 1048576.0, 2 * charged,
               !under ? "UNDER-COUNTED: raise GRAPH_NODE_BYTES"
                      : (!released ? "NOT RELEASED" : "ok"));
    }
    printf("%s\n", failed ? "FAIL" : "PASS");
    return failed;
}

static int flood() {
    int *d;
    cudaStream_t s;
    CHECK(cudaMalloc(&d, 4096));
    CHECK(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking));
    CHECK(cudaDeviceSynchronize());
    printf("connected\n");
    fflush(stdout);
    sleep(2);
    long nodes = 0;
    cudaError_t refused = cudaSuccess;
    for (int g = 0; g < 100000 && refused == cudaSuccess; g++) {
        cudaGraph_t graph;
        int made = 0;
        refused = capture(s, 4096, d, &graph, &made);
        nodes += made;
        if (refused != cudaSuccess) break;
        cudaGraphExec_t exec;
        refused = cudaGraphInstantiate(&exec, graph, 0);
    }
    // A launch's refusal may reach the program at a later call (launches are posted):
    // the capture's end then reports the capture invalidated, the launch error stays.
    cudaError_t last = cudaGetLastError();
    bool oom = refused == cudaErrorMemoryAllocation || last == cudaErrorMemoryAllocation;
    printf("holding %ld %s\n", nodes, cudaGetErrorName(refused));
    fflush(stdout);
    sleep(3);
    printf("refused after %ld nodes: %s (last error %s)\n", nodes, cudaGetErrorName(refused),
           cudaGetErrorName(last));
    return oom ? 0 : 1;
}

int main(int argc, char **argv) {
    const char *mode = argc > 1 ? argv[1] : "measure";
    if (!strcmp(mode, "measure")) return measure(argc, argv);
    if (!strcmp(mode, "flood")) return flood();
    fprintf(stderr, "usage: %s measure [NODES...] | flood\n", argv[0]);
    return 2;
}
