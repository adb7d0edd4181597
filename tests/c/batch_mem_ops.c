/* batch_mem_ops: cuStreamBatchMemOp (v2, the legacy name, per-thread) with writes and
   waits of 32 and 64 bits, a barrier; its checks (too many operations, an unknown
   operation, a misaligned word, flags); and batch memory operation graph nodes: added,
   their parameters read back, set, launched, set in an executable graph, and made by
   cuGraphAddNode. Prints one line per group. Driver API only. */
#include <stdio.h>
#include <string.h>

typedef unsigned long long CUdeviceptr;
typedef void* CUcontext;
typedef void* CUstream;
typedef void* CUgraph;
typedef void* CUgraphNode;
typedef void* CUgraphExec;

/* CUstreamBatchMemOpParams: a union of six 64-bit words. */
typedef union {
    unsigned int operation;
    struct {
        unsigned int operation;
        CUdeviceptr address;
        union {
            unsigned int value;
            unsigned long long value64;
        };
        unsigned int flags;
        CUdeviceptr alias;
    } waitValue, writeValue;
    struct {
        unsigned int operation;
        unsigned int flags;
    } flushRemoteWrites, memoryBarrier;
    unsigned long long pad[6];
} MemOp;

typedef struct {
    CUcontext ctx;
    unsigned int count;
    MemOp* paramArray;
    unsigned int flags;
} BatchParams;

/* CUgraphNodeParams: type, reserved, then the union (232 bytes), then a reserved word. */
typedef struct {
    unsigned int type;
    int reserved0[3];
    union {
        long long reserved1[29];
        BatchParams batchMemOp;
    };
    long long reserved2;
} NodeParams;

enum { WAIT32 = 1, WRITE32 = 2, FLUSH = 3, WAIT64 = 4, WRITE64 = 5, BARRIER = 6 };
enum { EQ = 1 };

int cuInit(unsigned int);
int cuDeviceGet(int*, int);
int cuDevicePrimaryCtxRetain(CUcontext*, int);
int cuCtxSetCurrent(CUcontext);
int cuMemAlloc_v2(CUdeviceptr*, size_t);
int cuMemsetD8_v2(CUdeviceptr, unsigned char, size_t);
int cuMemcpyDtoH_v2(void*, CUdeviceptr, size_t);
int cuStreamCreate(CUstream*, unsigned int);
int cuStreamSynchronize(CUstream);
int cuStreamBatchMemOp_v2(CUstream, unsigned int, MemOp*, unsigned int);
int cuStreamBatchMemOp(CUstream, unsigned int, MemOp*, unsigned int);
int cuStreamBatchMemOp_v2_ptsz(CUstream, unsigned int, MemOp*, unsigned int);
int cuGraphCreate(CUgraph*, unsigned int);
int cuGraphAddBatchMemOpNode(CUgraphNode*, CUgraph, const CUgraphNode*, size_t, const BatchParams*);
int cuGraphBatchMemOpNodeGetParams(CUgraphNode, BatchParams*);
int cuGraphBatchMemOpNodeSetParams(CUgraphNode, const BatchParams*);
int cuGraphExecBatchMemOpNodeSetParams(CUgraphExec, CUgraphNode, const BatchParams*);
int cuGraphAddNode_v2(CUgraphNode*, CUgraph, const CUgraphNode*, const void*, size_t, NodeParams*);
int cuGraphNodeGetType(CUgraphNode, unsigned int*);
int cuGraphInstantiateWithFlags(CUgraphExec*, CUgraph, unsigned long long);
int cuGraphLaunch(CUgraphExec, CUstream);
int cuGetProcAddress_v2(const char*, void**, int, unsigned long long, int*);

static MemOp write_op(int wide, CUdeviceptr addr, unsigned long long value) {
    MemOp op;
    memset(&op, 0, sizeof op);
    op.operation = wide ? WRITE64 : WRITE32;
    op.writeValue.address = addr;
    if (wide)
        op.writeValue.value64 = value;
    else
        op.writeValue.value = (unsigned int)value;
    return op;
}

static MemOp wait_op(int wide, CUdeviceptr addr, unsigned long long value) {
    MemOp op = write_op(wide, addr, value);
    op.operation = wide ? WAIT64 : WAIT32;
    op.waitValue.flags = EQ;
    return op;
}

static unsigned long long word(CUdeviceptr d, int wide) {
    unsigned long long v = 0;
    cuMemcpyDtoH_v2(&v, d, wide ? 8 : 4);
    return v;
}

int main(void) {
    int dev = 0;
    CUcontext ctx = 0;
    CUdeviceptr d = 0;
    CUstream s = 0;
    int setup = cuInit(0) | cuDeviceGet(&dev, 0) | cuDevicePrimaryCtxRetain(&ctx, dev) |
                cuCtxSetCurrent(ctx) | cuMemAlloc_v2(&d, 4096) | cuMemsetD8_v2(d, 0, 4096) |
                cuStreamCreate(&s, 1);
    printf("setup %d\n", setup);

    /* A batch: writes, a barrier, waits that see the writes. */
    MemOp ops[5] = {write_op(0, d, 7), write_op(1, d + 8, 0x1122334455667788ull),
                    {.operation = BARRIER}, wait_op(0, d, 7),
                    wait_op(1, d + 8, 0x1122334455667788ull)};
    ops[2].memoryBarrier.flags = 1; /* GPU scope */
    int batch = cuStreamBatchMemOp_v2(s, 5, ops, 0) | cuStreamSynchronize(s);
    printf("batch %d values %s\n", batch,
           word(d, 0) == 7 && word(d + 8, 1) == 0x1122334455667788ull ? "ok" : "WRONG");

    /* The legacy and per-thread names, and cuGetProcAddress. */
    MemOp one = write_op(0, d + 16, 3);
    int legacy = cuStreamBatchMemOp(s, 1, &one, 0) | cuStreamSynchronize(s);
    one = write_op(0, d + 20, 4);
    int ptsz = cuStreamBatchMemOp_v2_ptsz(0, 1, &one, 0) | cuStreamSynchronize(0);
    void* f = 0;
    int found = 0;
    int proc = cuGetProcAddress_v2("cuStreamBatchMemOp", &f, 12000, 0, &found);
    printf("legacy %d ptsz %d values %s, proc address %d %s\n", legacy, ptsz,
           word(d + 16, 0) == 3 && word(d + 20, 0) == 4 ? "ok" : "WRONG", proc,
           f && found == 0 ? "found" : "missing");

    /* Checks: 256 operations, an unknown operation, a misaligned word, flags. */
    static MemOp many[256];
    for (int i = 0; i < 256; i++) many[i] = write_op(0, d + 64, 1);
    int too_many = cuStreamBatchMemOp_v2(s, 256, many, 0);
    MemOp bad = write_op(0, d + 64, 1);
    bad.operation = 8; /* CUDA 13.1's atomic reduction */
    int unknown = cuStreamBatchMemOp_v2(s, 1, &bad, 0);
    bad = write_op(1, d + 68, 1);
    int misaligned = cuStreamBatchMemOp_v2(s, 1, &bad, 0);
    bad = write_op(0, d + 64, 1);
    int flags = cuStreamBatchMemOp_v2(s, 1, &bad, 1);
    int null_array = cuStreamBatchMemOp_v2(s, 1, 0, 0);
    cuStreamSynchronize(s);
    printf("too many %d, unknown %d, misaligned %d, flags %d, null %d, untouched %s\n", too_many,
           unknown, misaligned, flags, null_array, word(d + 64, 0) == 0 ? "ok" : "WRONG");

    /* Graph nodes: added, read back, set, launched; set in an executable graph. */
    CUgraph g = 0;
    CUgraphNode node = 0, second = 0;
    CUgraphExec exec = 0;
    MemOp node_ops[2] = {write_op(0, d + 128, 11), write_op(1, d + 136, 12)};
    BatchParams p = {ctx, 2, node_ops, 0};
    int made = cuGraphCreate(&g, 0) | cuGraphAddBatchMemOpNode(&node, g, 0, 0, &p);
    memset(node_ops, 0xff, sizeof node_ops); /* the node keeps its own copy */
    BatchParams back;
    memset(&back, 0, sizeof back);
    int got = cuGraphBatchMemOpNodeGetParams(node, &back);
    int same = back.count == 2 && back.ctx == ctx && back.paramArray &&
               back.paramArray[0].writeValue.address == d + 128 &&
               back.paramArray[1].writeValue.value64 == 12;
    unsigned int type = 0;
    int typed = cuGraphNodeGetType(node, &type);
    MemOp set_ops[1] = {write_op(0, d + 128, 21)};
    BatchParams q = {ctx, 1, set_ops, 0};
    int set = cuGraphBatchMemOpNodeSetParams(node, &q);
    int got2 = cuGraphBatchMemOpNodeGetParams(node, &back);
    int same2 = back.count == 1 && back.paramArray[0].writeValue.value == 21;
    int ran = cuGraphInstantiateWithFlags(&exec, g, 0) | cuGraphLaunch(exec, s) |
              cuStreamSynchronize(s);
    unsigned long long first = word(d + 128, 0);
    set_ops[0] = write_op(0, d + 128, 31);
    int exec_set = cuGraphExecBatchMemOpNodeSetParams(exec, node, &q) | cuGraphLaunch(exec, s) |
                   cuStreamSynchronize(s);
    unsigned long long then = word(d + 128, 0);
    printf("graph node: made %d got %d same %d type %d %u set %d got %d same %d ran %d value %llu "
           "exec set %d value %llu\n",
           made, got, same, typed, type, set, got2, same2, ran, first, exec_set, then);

    /* cuGraphAddNode with a batch's parameters. */
    NodeParams np;
    memset(&np, 0, sizeof np);
    MemOp generic_ops[1] = {write_op(0, d + 192, 41)};
    np.type = 12; /* CU_GRAPH_NODE_TYPE_BATCH_MEM_OP */
    np.batchMemOp.ctx = ctx;
    np.batchMemOp.count = 1;
    np.batchMemOp.paramArray = generic_ops;
    CUgraph g2 = 0;
    CUgraphExec exec2 = 0;
    int generic = cuGraphCreate(&g2, 0) | cuGraphAddNode_v2(&second, g2, 0, 0, 0, &np) |
                  cuGraphInstantiateWithFlags(&exec2, g2, 0) | cuGraphLaunch(exec2, s) |
                  cuStreamSynchronize(s);
    printf("generic node %d value %llu\n", generic, word(d + 192, 0));
    return 0;
}
