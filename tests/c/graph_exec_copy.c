/* graph_exec_copy: device-to-device copy nodes updated in an executable graph through
   cuGraphExecMemcpyNodeSetParams, as XLA updates its command buffers (lax.scan,
   while loops): a CUDA_MEMCPY3D of one row (WidthInBytes = size, Height = Depth = 1,
   pitches left 0), device or unified memory types, for a node of the graph itself, for
   nodes of a WHILE conditional node's body and for a node of a child graph moved into
   its node (CU_GRAPH_CHILD_GRAPH_OWNERSHIP_MOVE, XLA's child command buffers), each
   updated through the executable graph of the outermost graph; a node of a child
   graph that was copied into its node is no node of that executable graph (refused).
   Then each executable graph is launched. Prints the codes, one line per case.
   Driver API only. */
#include <stdio.h>
#include <string.h>

typedef unsigned long long CUdeviceptr;
typedef void* CUcontext;
typedef void* CUgraph;
typedef void* CUgraphNode;
typedef void* CUgraphExec;
typedef void* CUstream;

typedef struct {
    size_t srcXInBytes, srcY, srcZ, srcLOD;
    int srcMemoryType;
    const void* srcHost;
    CUdeviceptr srcDevice;
    void* srcArray;
    void* reserved0;
    size_t srcPitch, srcHeight;
    size_t dstXInBytes, dstY, dstZ, dstLOD;
    int dstMemoryType;
    void* dstHost;
    CUdeviceptr dstDevice;
    void* dstArray;
    void* reserved1;
    size_t dstPitch, dstHeight;
    size_t WidthInBytes, Height, Depth;
} CUDA_MEMCPY3D;

typedef struct {
    CUdeviceptr dst;
    size_t pitch;
    unsigned int value, elementSize;
    size_t width, height;
} CUDA_MEMSET_NODE_PARAMS;

/* CUgraphNodeParams: the type, and the union at 16 (conditional parameters). */
typedef struct {
    unsigned long long handle;
    int type;
    unsigned int size;
    CUgraph* phGraph_out;
    CUcontext ctx;
} CUDA_CONDITIONAL_NODE_PARAMS;
typedef struct {
    CUgraph graph;
    int ownership;
} CUDA_CHILD_GRAPH_NODE_PARAMS;
typedef struct {
    int type;
    int reserved0[3];
    union {
        long long reserved1[29];
        CUDA_CONDITIONAL_NODE_PARAMS conditional;
        CUDA_CHILD_GRAPH_NODE_PARAMS graph;
    } u;
    long long reserved2;
} CUgraphNodeParams;

enum { MEMORYTYPE_DEVICE = 2, MEMORYTYPE_UNIFIED = 4 };
enum { NODE_GRAPH = 4, NODE_CONDITIONAL = 13, COND_WHILE = 1 };
enum { OWNERSHIP_MOVE = 1 };

int cuInit(unsigned int);
int cuDeviceGet(int*, int);
int cuDevicePrimaryCtxRetain(CUcontext*, int);
int cuCtxSetCurrent(CUcontext);
int cuMemAlloc_v2(CUdeviceptr*, size_t);
int cuMemsetD8_v2(CUdeviceptr, unsigned char, size_t);
int cuMemcpyDtoH_v2(void*, CUdeviceptr, size_t);
int cuGraphCreate(CUgraph*, unsigned int);
int cuGraphAddMemcpyNode(CUgraphNode*, CUgraph, const CUgraphNode*, size_t, const CUDA_MEMCPY3D*,
                         CUcontext);
int cuGraphAddMemsetNode(CUgraphNode*, CUgraph, const CUgraphNode*, size_t,
                         const CUDA_MEMSET_NODE_PARAMS*, CUcontext);
int cuGraphConditionalHandleCreate(unsigned long long*, CUgraph, CUcontext, unsigned int,
                                   unsigned int);
int cuGraphAddNode_v2(CUgraphNode*, CUgraph, const CUgraphNode*, const void*, size_t,
                      CUgraphNodeParams*);
int cuGraphAddChildGraphNode(CUgraphNode*, CUgraph, const CUgraphNode*, size_t, CUgraph);
int cuGraphInstantiateWithFlags(CUgraphExec*, CUgraph, unsigned long long);
int cuGraphExecMemcpyNodeSetParams(CUgraphExec, CUgraphNode, const CUDA_MEMCPY3D*, CUcontext);
int cuGraphExecMemsetNodeSetParams(CUgraphExec, CUgraphNode, const CUDA_MEMSET_NODE_PARAMS*,
                                   CUcontext);
int cuGraphLaunch(CUgraphExec, CUstream);
int cuStreamSynchronize(CUstream);

#define SIZE (1 << 20)

/* XLA's description of a device-to-device copy of `size` bytes. */
static CUDA_MEMCPY3D d2d(CUdeviceptr dst, CUdeviceptr src, size_t size, int type) {
    CUDA_MEMCPY3D p;
    memset(&p, 0, sizeof p);
    p.srcMemoryType = type;
    p.srcDevice = src;
    p.dstMemoryType = type;
    p.dstDevice = dst;
    p.WidthInBytes = size;
    p.Height = 1;
    p.Depth = 1;
    return p;
}

int main(void) {
    int dev = 0;
    CUcontext ctx = 0;
    CUdeviceptr a = 0, b = 0, c = 0, d = 0;
    int setup = cuInit(0) | cuDeviceGet(&dev, 0) | cuDevicePrimaryCtxRetain(&ctx, dev) |
                cuCtxSetCurrent(ctx) | cuMemAlloc_v2(&a, SIZE) | cuMemAlloc_v2(&b, SIZE) |
                cuMemAlloc_v2(&c, SIZE) | cuMemAlloc_v2(&d, SIZE) | cuMemsetD8_v2(a, 1, SIZE) |
                cuMemsetD8_v2(c, 3, SIZE);
    printf("setup %d\n", setup);

    /* A copy node of the graph itself. */
    CUgraph g = 0;
    CUgraphNode n = 0;
    CUgraphExec e = 0;
    CUDA_MEMCPY3D p = d2d(b, a, SIZE, MEMORYTYPE_DEVICE);
    int made = cuGraphCreate(&g, 0) | cuGraphAddMemcpyNode(&n, g, NULL, 0, &p, ctx) |
               cuGraphInstantiateWithFlags(&e, g, 0);
    CUDA_MEMCPY3D same = d2d(b, a, SIZE, MEMORYTYPE_DEVICE);
    int r_same = cuGraphExecMemcpyNodeSetParams(e, n, &same, ctx);
    CUDA_MEMCPY3D moved = d2d(d, c, SIZE, MEMORYTYPE_DEVICE);
    int r_moved = cuGraphExecMemcpyNodeSetParams(e, n, &moved, ctx);
    CUDA_MEMCPY3D unified = d2d(b, c, SIZE / 2, MEMORYTYPE_UNIFIED);
    int r_unified = cuGraphExecMemcpyNodeSetParams(e, n, &unified, ctx);
    CUDA_MEMCPY3D back = d2d(d, c, SIZE, MEMORYTYPE_DEVICE);
    int r_back = cuGraphExecMemcpyNodeSetParams(e, n, &back, ctx);
    int ran = cuGraphLaunch(e, 0) | cuStreamSynchronize(0);
    unsigned char got = 0;
    cuMemcpyDtoH_v2(&got, d + SIZE - 1, 1);
    printf("graph node: made %d same %d moved %d unified %d back %d ran %d last byte %d\n", made,
           r_same, r_moved, r_unified, r_back, ran, got);

    /* A copy node (and a memset node) of a WHILE node's body, updated through the
       executable graph of the graph holding the WHILE node, as XLA's nested command
       buffers do. */
    CUgraph outer = 0, body = 0;
    CUgraphNode cond = 0, in_body = 0, set_in_body = 0;
    CUgraphExec oe = 0;
    unsigned long long handle = 0;
    int outer_made = cuGraphCreate(&outer, 0) |
                     cuGraphConditionalHandleCreate(&handle, outer, ctx, 0, 0);
    CUgraphNodeParams cp;
    memset(&cp, 0, sizeof cp);
    cp.type = NODE_CONDITIONAL;
    cp.u.conditional.handle = handle;
    cp.u.conditional.type = COND_WHILE;
    cp.u.conditional.size = 1;
    cp.u.conditional.ctx = ctx;
    outer_made |= cuGraphAddNode_v2(&cond, outer, NULL, NULL, 0, &cp);
    /* The driver's own array of the bodies, written into the parameters. */
    if (cp.u.conditional.phGraph_out) body = cp.u.conditional.phGraph_out[0];
    CUDA_MEMCPY3D bp = d2d(b, a, SIZE, MEMORYTYPE_DEVICE);
    int body_copy = cuGraphAddMemcpyNode(&in_body, body, NULL, 0, &bp, ctx);
    CUDA_MEMSET_NODE_PARAMS ms;
    memset(&ms, 0, sizeof ms);
    ms.dst = c;
    ms.value = 5;
    ms.elementSize = 1;
    ms.width = SIZE;
    ms.height = 1;
    int body_set = cuGraphAddMemsetNode(&set_in_body, body, &in_body, 1, &ms, ctx);
    int outer_inst = cuGraphInstantiateWithFlags(&oe, outer, 0);
    CUDA_MEMCPY3D bsame = d2d(b, a, SIZE, MEMORYTYPE_DEVICE);
    int rb_same = cuGraphExecMemcpyNodeSetParams(oe, in_body, &bsame, ctx);
    CUDA_MEMCPY3D bmoved = d2d(d, c, SIZE, MEMORYTYPE_DEVICE);
    int rb_moved = cuGraphExecMemcpyNodeSetParams(oe, in_body, &bmoved, ctx);
    CUDA_MEMCPY3D bunified = d2d(b, c, SIZE, MEMORYTYPE_UNIFIED);
    int rb_unified = cuGraphExecMemcpyNodeSetParams(oe, in_body, &bunified, ctx);
    ms.dst = a;
    int rb_memset = cuGraphExecMemsetNodeSetParams(oe, set_in_body, &ms, ctx);
    /* The WHILE's condition starts at 0: the body does not run. */
    int oran = cuGraphLaunch(oe, 0) | cuStreamSynchronize(0);
    printf("while body node: made %d copy %d memset %d instantiated %d same %d moved %d unified %d "
           "memset update %d ran %d\n",
           outer_made, body_copy, body_set, outer_inst, rb_same, rb_moved, rb_unified, rb_memset,
           oran);

    /* A child graph moved into its node, and one copied into its node. */
    CUgraph parent = 0, moved_graph = 0, copied = 0;
    CUgraphNode moved_node = 0, copied_node = 0, in_moved = 0, in_copied = 0;
    CUgraphExec pe = 0;
    CUDA_MEMCPY3D mp = d2d(b, a, SIZE, MEMORYTYPE_DEVICE);
    int child_made = cuGraphCreate(&parent, 0) | cuGraphCreate(&moved_graph, 0) |
                     cuGraphCreate(&copied, 0) |
                     cuGraphAddMemcpyNode(&in_moved, moved_graph, NULL, 0, &mp, ctx) |
                     cuGraphAddMemcpyNode(&in_copied, copied, NULL, 0, &mp, ctx);
    CUgraphNodeParams gp;
    memset(&gp, 0, sizeof gp);
    gp.type = NODE_GRAPH;
    gp.u.graph.graph = moved_graph;
    gp.u.graph.ownership = OWNERSHIP_MOVE;
    int child_added = cuGraphAddNode_v2(&moved_node, parent, NULL, NULL, 0, &gp) |
                      cuGraphAddChildGraphNode(&copied_node, parent, &moved_node, 1, copied);
    int parent_inst = cuGraphInstantiateWithFlags(&pe, parent, 0);
    CUDA_MEMCPY3D mnew = d2d(d, c, SIZE, MEMORYTYPE_DEVICE);
    int r_moved_child = cuGraphExecMemcpyNodeSetParams(pe, in_moved, &mnew, ctx);
    int r_copied_child = cuGraphExecMemcpyNodeSetParams(pe, in_copied, &mnew, ctx);
    cuMemsetD8_v2(d, 0, SIZE);
    int pran = cuGraphLaunch(pe, 0) | cuStreamSynchronize(0);
    got = 0;
    cuMemcpyDtoH_v2(&got, d, 1);
    printf("child graph node: made %d added %d instantiated %d moved child %d copied child %d "
           "ran %d first byte %d\n",
           child_made, child_added, parent_inst, r_moved_child, r_copied_child, pran, got);
    return 0;
}
