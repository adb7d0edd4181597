// The driver's pointer queries asked about any pointer, and the older ABI names of
// driver functions (cuda.h maps cuMemAlloc to cuMemAlloc_v2; old binaries call the
// plain names), through libcuda.so.1 opened with dlopen. Prints only what the real
// driver answers alike on every GPU (checked against driver 580 on an H200); values
// that depend on the machine are checked, not printed.
#include <cuda.h>
#include <dlfcn.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static void *lib;
static int failures;

static const char *name_of(CUresult r) {
    static CUresult (*get_name)(CUresult, const char **);
    if (!get_name) get_name = (CUresult(*)(CUresult, const char **))dlsym(lib, "cuGetErrorName");
    const char *s = "?";
    get_name(r, &s);
    return s;
}

static void *sym(const char *name) {
    void *f = dlsym(lib, name);
    if (!f) {
        printf("FAIL missing %s\n", name);
        exit(1);
    }
    return f;
}

#define CHECK(cond, what)                                   \
    do {                                                    \
        if (cond) {                                         \
            printf("PASS %s\n", what);                      \
        } else {                                            \
            printf("FAIL %s\n", what);                      \
            failures++;                                     \
        }                                                   \
    } while (0)

typedef CUresult (*get_attr_t)(void *, CUpointer_attribute, CUdeviceptr);
typedef CUresult (*get_attrs_t)(unsigned, CUpointer_attribute *, void **, CUdeviceptr);

// The bytes an attribute query wrote into a buffer filled with 0xab.
static int written(const unsigned char *buf, int len) {
    int w = 0;
    for (int i = 0; i < len; i++)
        if (buf[i] != 0xab) w = i + 1;
    return w;
}

static void pointer_attributes(CUdeviceptr dev, void *pinned) {
    get_attr_t get = (get_attr_t)sym("cuPointerGetAttribute");
    get_attrs_t gets = (get_attrs_t)sym("cuPointerGetAttributes");
    char *heap = (char *)malloc(64);
    struct {
        const char *what;
        CUdeviceptr ptr;
    } ptrs[] = {{"device", dev + 16}, {"pinned", (CUdeviceptr)pinned}, {"heap", (CUdeviceptr)heap}};
    // The widths the driver writes, attribute by attribute (P2P tokens aside).
    const int widths[22] = {0, 8, 4, 8, 8, 0, 4, 8, 4, 4, 4, 8, 8, 4, 8, 4, 4, 8, 8, 8, 8, 4};
    for (int k = 0; k < 3; k++) {
        int bad_widths = 0;
        for (int a = 1; a <= 21; a++) {
            if (a == 5) continue;
            unsigned char one[16], many[16];
            memset(one, 0xab, sizeof one);
            memset(many, 0xab, sizeof many);
            CUresult r1 = get(one, (CUpointer_attribute)a, ptrs[k].ptr);
            void *out = many;
            CUpointer_attribute attr = (CUpointer_attribute)a;
            CUresult r2 = gets(1, &attr, &out, ptrs[k].ptr);
            if (r2 != CUDA_SUCCESS) {
                printf("FAIL %s attribute %d: cuPointerGetAttributes %s\n", ptrs[k].what, a, name_of(r2));
                failures++;
            }
            // Unknown memory: the range is left as it was, the rest written.
            int want = (k == 2 && (a == 11 || a == 12)) ? 0 : widths[a];
            if (written(many, 16) > want || (want && written(many, 16) == 0)) bad_widths++;
            if (k == 2 && r1 != CUDA_ERROR_INVALID_VALUE) {
                printf("FAIL heap attribute %d: cuPointerGetAttribute %s\n", a, name_of(r1));
                failures++;
            }
            if (k < 2 && r1 != CUDA_SUCCESS && !(k == 0 && a == 4)) {
                printf("FAIL %s attribute %d: cuPointerGetAttribute %s\n", ptrs[k].what, a, name_of(r1));
                failures++;
            }
        }
        printf("%s: %d attribute(s) written at another width\n", ptrs[k].what, bad_widths);
    }
    unsigned type = 9, managed = 9, mapped = 9, access = 0;
    CUcontext ctx = (CUcontext)1;
    int ordinal = 7;
    CUdeviceptr start = 0, hostp = 1;
    size_t size = 0;
    CUpointer_attribute attrs[] = {CU_POINTER_ATTRIBUTE_MEMORY_TYPE, CU_POINTER_ATTRIBUTE_CONTEXT,
                                   CU_POINTER_ATTRIBUTE_DEVICE_ORDINAL, CU_POINTER_ATTRIBUTE_IS_MANAGED,
                                   CU_POINTER_ATTRIBUTE_MAPPED, CU_POINTER_ATTRIBUTE_RANGE_START_ADDR,
                                   CU_POINTER_ATTRIBUTE_RANGE_SIZE, CU_POINTER_ATTRIBUTE_ACCESS_FLAGS,
                                   CU_POINTER_ATTRIBUTE_HOST_POINTER};
    void *outs[] = {&type, &ctx, &ordinal, &managed, &mapped, &start, &size, &access, &hostp};
    CUresult r = gets(9, attrs, outs, (CUdeviceptr)heap);
    printf("heap pointer: %s, type %u, context %s, ordinal %d, managed %u, mapped %u, access %u, "
           "host pointer is itself %d, range untouched %d\n",
           name_of(r), type, ctx ? "set" : "NULL", ordinal, managed, mapped, access,
           hostp == (CUdeviceptr)heap, start == 0 && size == 0);
    r = gets(9, attrs, outs, dev + 16);
    printf("device pointer: %s, type %u, ordinal %d, managed %u, mapped %u, access %u, host pointer %s, "
           "range start is the allocation %d, size %zu\n",
           name_of(r), type, ordinal, managed, mapped, access, hostp ? "set" : "NULL", start == dev, size);
    CUdeviceptr h = 1;
    printf("device memory's host pointer alone: %s\n", name_of(get(&h, CU_POINTER_ATTRIBUTE_HOST_POINTER, dev)));
    CUpointer_attribute p2p = CU_POINTER_ATTRIBUTE_P2P_TOKENS;
    unsigned char tokens[64];
    void *tp = tokens;
    printf("P2P tokens of unknown memory through cuPointerGetAttributes: %s\n",
           name_of(gets(1, &p2p, &tp, (CUdeviceptr)heap)));
    unsigned long long id1 = 0, id2 = 0, id3 = 0;
    get(&id1, CU_POINTER_ATTRIBUTE_BUFFER_ID, dev);
    get(&id2, CU_POINTER_ATTRIBUTE_BUFFER_ID, dev + 100);
    get(&id3, CU_POINTER_ATTRIBUTE_BUFFER_ID, (CUdeviceptr)pinned);
    CHECK(id1 != 0 && id1 == id2 && id1 != id3, "buffer ids: one per allocation");

    typedef CUresult (*set_attr_t)(const void *, CUpointer_attribute, CUdeviceptr);
    set_attr_t set = (set_attr_t)sym("cuPointerSetAttribute");
    unsigned one = 1, sync = 9;
    get(&sync, CU_POINTER_ATTRIBUTE_SYNC_MEMOPS, (CUdeviceptr)pinned);
    printf("sync memops before: %u\n", sync);
    r = set(&one, CU_POINTER_ATTRIBUTE_SYNC_MEMOPS, (CUdeviceptr)pinned);
    get(&sync, CU_POINTER_ATTRIBUTE_SYNC_MEMOPS, (CUdeviceptr)pinned);
    printf("cuPointerSetAttribute(SYNC_MEMOPS): %s, then %u\n", name_of(r), sync);
    printf("cuPointerSetAttribute on unknown memory: %s\n",
           name_of(set(&one, CU_POINTER_ATTRIBUTE_SYNC_MEMOPS, (CUdeviceptr)heap)));
    printf("cuPointerSetAttribute(MEMORY_TYPE): %s\n", name_of(set(&one, CU_POINTER_ATTRIBUTE_MEMORY_TYPE, dev)));
    free(heap);
}

static void legacy_names(CUdevice dev) {
    // CUDA 3.1's 32-bit ABI, in a context of the current API.
    unsigned p32 = 7, free32 = 1, total32 = 2;
    CUresult r = ((CUresult(*)(unsigned *, unsigned))sym("cuMemAlloc"))(&p32, 1024);
    printf("cuMemAlloc (32-bit) in a current-API context: %s\n", name_of(r));
    r = ((CUresult(*)(unsigned *, unsigned *))sym("cuMemGetInfo"))(&free32, &total32);
    printf("cuMemGetInfo (32-bit) in a current-API context: %s\n", name_of(r));
    unsigned total = 0;
    r = ((CUresult(*)(unsigned *, CUdevice))sym("cuDeviceTotalMem"))(&total, dev);
    size_t total64 = 0;
    ((CUresult(*)(size_t *, CUdevice))sym("cuDeviceTotalMem_v2"))(&total64, dev);
    CHECK(r == CUDA_SUCCESS && total == (total64 > 0xffffffffu ? 0xffffffffu : total64),
          "cuDeviceTotalMem (32-bit) is the size clamped to 32 bits");

    // Same arguments as their successors.
    CUstream s;
    ((CUresult(*)(CUstream *, unsigned))sym("cuStreamCreate"))(&s, 0);
    printf("cuStreamDestroy: %s\n", name_of(((CUresult(*)(CUstream))sym("cuStreamDestroy"))(s)));
    CUevent a, b;
    CUresult (*ev_create)(CUevent *, unsigned) = (CUresult(*)(CUevent *, unsigned))sym("cuEventCreate");
    ev_create(&a, 0);
    ev_create(&b, 0);
    ((CUresult(*)(CUevent, CUstream))sym("cuEventRecord"))(a, 0);
    ((CUresult(*)(CUevent, CUstream))sym("cuEventRecord"))(b, 0);
    ((CUresult(*)(CUevent))sym("cuEventSynchronize"))(b);
    float ms = -1;
    r = ((CUresult(*)(float *, CUevent, CUevent))sym("cuEventElapsedTime"))(&ms, a, b);
    CHECK(r == CUDA_SUCCESS && ms >= 0, "cuEventElapsedTime");
    printf("cuEventDestroy: %s\n", name_of(((CUresult(*)(CUevent))sym("cuEventDestroy"))(a)));
    CUcontext pushed = 0, popped = 0;
    ((CUresult(*)(CUcontext *))sym("cuCtxGetCurrent"))(&pushed);
    r = ((CUresult(*)(CUcontext))sym("cuCtxPushCurrent"))(pushed);
    CUresult r2 = ((CUresult(*)(CUcontext *))sym("cuCtxPopCurrent"))(&popped);
    printf("cuCtxPushCurrent (v1): %s, cuCtxPopCurrent (v1): %s\n", name_of(r), name_of(r2));
    // Whatever the pair did, the primary context is current again.
    ((CUresult(*)(CUcontext))sym("cuCtxSetCurrent"))(pushed);
    int d = -1;
    r = ((CUresult(*)(CUdevice *, CUcontext))sym("cuCtxGetDevice_v2"))(&d, NULL);
    printf("cuCtxGetDevice_v2(NULL): %s, device %d\n", name_of(r), d);
    printf("cuCtxSynchronize_v2(current): %s\n", name_of(((CUresult(*)(CUcontext))sym("cuCtxSynchronize_v2"))(pushed)));
    CUuuid u1, u2;
    ((CUresult(*)(CUuuid *, CUdevice))sym("cuDeviceGetUuid"))(&u1, dev);
    ((CUresult(*)(CUuuid *, CUdevice))sym("cuDeviceGetUuid_v2"))(&u2, dev);
    CHECK(memcmp(&u1, &u2, sizeof u1) == 0, "cuDeviceGetUuid is cuDeviceGetUuid_v2's");
    void *fn = NULL;
    r = ((CUresult(*)(const char *, void **, int, cuuint64_t))sym("cuGetProcAddress"))("cuMemAlloc", &fn, 13000, 0);
    CHECK(r == CUDA_SUCCESS && fn == dlsym(lib, "cuMemAlloc_v2"), "cuGetProcAddress (v1) finds cuMemAlloc_v2");

    // Graphs: the calls before edge data, and instantiation with its log.
    CUgraph g;
    ((CUresult(*)(CUgraph *, unsigned))sym("cuGraphCreate"))(&g, 0);
    CUgraphNode n1, n2;
    CUresult (*add_empty)(CUgraphNode *, CUgraph, const CUgraphNode *, size_t) =
        (CUresult(*)(CUgraphNode *, CUgraph, const CUgraphNode *, size_t))sym("cuGraphAddEmptyNode");
    add_empty(&n1, g, NULL, 0);
    add_empty(&n2, g, NULL, 0);
    r = ((CUresult(*)(CUgraph, const CUgraphNode *, const CUgraphNode *, size_t))sym("cuGraphAddDependencies"))(
        g, &n1, &n2, 1);
    size_t edges = 0;
    CUgraphNode from[2], to[2];
    r2 = ((CUresult(*)(CUgraph, CUgraphNode *, CUgraphNode *, size_t *))sym("cuGraphGetEdges"))(g, NULL, NULL, &edges);
    CHECK(r == CUDA_SUCCESS && r2 == CUDA_SUCCESS && edges == 1, "cuGraphAddDependencies, cuGraphGetEdges");
    edges = 2;
    ((CUresult(*)(CUgraph, CUgraphNode *, CUgraphNode *, size_t *))sym("cuGraphGetEdges"))(g, from, to, &edges);
    size_t deps = 2;
    CUgraphNode dep[2];
    ((CUresult(*)(CUgraphNode, CUgraphNode *, size_t *))sym("cuGraphNodeGetDependencies"))(n2, dep, &deps);
    size_t dependents = 2;
    CUgraphNode dependent[2];
    ((CUresult(*)(CUgraphNode, CUgraphNode *, size_t *))sym("cuGraphNodeGetDependentNodes"))(n1, dependent, &dependents);
    CHECK(edges == 1 && from[0] == n1 && to[0] == n2 && deps == 1 && dep[0] == n1 && dependents == 1 &&
              dependent[0] == n2,
          "the edge is seen from both nodes");
    CUgraphExec exec = NULL;
    CUgraphNode error_node = (CUgraphNode)1;
    char log[16] = "unchanged";
    r = ((CUresult(*)(CUgraphExec *, CUgraph, CUgraphNode *, char *, size_t))sym("cuGraphInstantiate"))(
        &exec, g, &error_node, log, sizeof log);
    // The error node and the log are written only on failure, if at all.
    printf("cuGraphInstantiate (with log): %s, exec %s\n", name_of(r), exec ? "set" : "NULL");
    CUgraphExecUpdateResult result = (CUgraphExecUpdateResult)99;
    r = ((CUresult(*)(CUgraphExec, CUgraph, CUgraphNode *, CUgraphExecUpdateResult *))sym("cuGraphExecUpdate"))(
        exec, g, &error_node, &result);
    printf("cuGraphExecUpdate (v1) with its own graph: %s, result %d\n", name_of(r), (int)result);
    r = ((CUresult(*)(CUgraph, const CUgraphNode *, const CUgraphNode *, size_t))sym("cuGraphRemoveDependencies"))(
        g, &n1, &n2, 1);
    edges = 0;
    ((CUresult(*)(CUgraph, CUgraphNode *, CUgraphNode *, size_t *))sym("cuGraphGetEdges"))(g, NULL, NULL, &edges);
    CHECK(r == CUDA_SUCCESS && edges == 0, "cuGraphRemoveDependencies");

    // Capture without a mode, and its capture info.
    CUstream cs;
    ((CUresult(*)(CUstream *, unsigned))sym("cuStreamCreate"))(&cs, CU_STREAM_NON_BLOCKING);
    r = ((CUresult(*)(CUstream))sym("cuStreamBeginCapture"))(cs);
    CUstreamCaptureStatus st = CU_STREAM_CAPTURE_STATUS_NONE;
    cuuint64_t id = 0;
    r2 = ((CUresult(*)(CUstream, CUstreamCaptureStatus *, cuuint64_t *))sym("cuStreamGetCaptureInfo"))(cs, &st, &id);
    printf("cuStreamBeginCapture (no mode): %s; cuStreamGetCaptureInfo (v1): %s, status %d, id %s\n", name_of(r),
           name_of(r2), (int)st, id ? "set" : "0");
    CUgraph captured;
    ((CUresult(*)(CUstream, CUgraph *))sym("cuStreamEndCapture"))(cs, &captured);
}

// CUDA 2's device queries, the profiler's configuration and the 16- and 32-bit 2D
// memsets.
static void older_calls(CUdevice dev, CUdeviceptr d) {
    CUresult (*attr)(int *, CUdevice_attribute, CUdevice) =
        (CUresult(*)(int *, CUdevice_attribute, CUdevice))sym("cuDeviceGetAttribute");
    int major = -1, minor = -1, want_major = 0, want_minor = 0;
    CUresult r = ((CUresult(*)(int *, int *, CUdevice))sym("cuDeviceComputeCapability"))(&major, &minor, dev);
    attr(&want_major, CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MAJOR, dev);
    attr(&want_minor, CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MINOR, dev);
    CHECK(r == CUDA_SUCCESS && major == want_major && minor == want_minor,
          "cuDeviceComputeCapability is the compute capability attributes");
    int props[14];
    memset(props, 0xab, sizeof props);
    r = ((CUresult(*)(int *, CUdevice))sym("cuDeviceGetProperties"))(props, dev);
    int same = r == CUDA_SUCCESS;
    for (int i = 0; i < 14; i++) {
        int v = -1;
        attr(&v, (CUdevice_attribute)(i + 1), dev);
        same = same && v == props[i];
    }
    CHECK(same, "cuDeviceGetProperties is device attributes 1 to 14");
    r = ((CUresult(*)(const char *, const char *, int))sym("cuProfilerInitialize"))(
        "/dev/null", "/dev/null", 0);
    printf("cuProfilerInitialize: %s\n", name_of(r));

    // Core dump settings: one-byte booleans, read back as set.
    typedef CUresult (*coredump_t)(CUcoredumpSettings, void *, size_t *);
    coredump_t get_global = (coredump_t)sym("cuCoredumpGetAttributeGlobal");
    coredump_t set_global = (coredump_t)sym("cuCoredumpSetAttributeGlobal");
    coredump_t get_ctx = (coredump_t)sym("cuCoredumpGetAttribute");
    unsigned char flag = 0xab;
    size_t size = 1;
    r = get_global(CU_COREDUMP_TRIGGER_HOST, &flag, &size);
    printf("cuCoredumpGetAttributeGlobal(TRIGGER_HOST): %s, %d\n", name_of(r), flag);
    size = 4;
    printf("a boolean asked with 4 bytes: %s\n", name_of(get_global(CU_COREDUMP_TRIGGER_HOST, &flag, &size)));
    unsigned char on = 1;
    size = 1;
    r = set_global(CU_COREDUMP_LIGHTWEIGHT, &on, &size);
    flag = 0xab;
    get_global(CU_COREDUMP_LIGHTWEIGHT, &flag, &size);
    printf("cuCoredumpSetAttributeGlobal(LIGHTWEIGHT, 1): %s, then %d\n", name_of(r), flag);
    flag = 0xab;
    r = get_ctx(CU_COREDUMP_ENABLE_ON_EXCEPTION, &flag, &size);
    printf("cuCoredumpGetAttribute(ENABLE_ON_EXCEPTION): %s, %d\n", name_of(r), flag);

    // Rows of 3 elements at a pitch of 16 bytes, 4 rows; the bytes between stay.
    CUresult (*set8)(CUdeviceptr, unsigned char, size_t) =
        (CUresult(*)(CUdeviceptr, unsigned char, size_t))sym("cuMemsetD8_v2");
    CUresult (*to_host)(void *, CUdeviceptr, size_t) = (CUresult(*)(void *, CUdeviceptr, size_t))sym("cuMemcpyDtoH_v2");
    unsigned char bytes[64];
    set8(d, 0x11, 64);
    r = ((CUresult(*)(CUdeviceptr, size_t, unsigned short, size_t, size_t))sym("cuMemsetD2D16_v2"))(d, 16, 0xbeef, 3, 4);
    to_host(bytes, d, 64);
    int ok16 = r == CUDA_SUCCESS;
    for (int i = 0; i < 64; i++) {
        int in_row = (i % 16) < 6;
        unsigned char want = in_row ? ((i % 2) ? 0xbe : 0xef) : 0x11;
        ok16 = ok16 && bytes[i] == want;
    }
    CHECK(ok16, "cuMemsetD2D16 sets each row's elements only");
    set8(d, 0x22, 64);
    CUstream s;
    ((CUresult(*)(CUstream *, unsigned))sym("cuStreamCreate"))(&s, 0);
    r = ((CUresult(*)(CUdeviceptr, size_t, unsigned, size_t, size_t, CUstream))sym("cuMemsetD2D32Async"))(
        d, 16, 0x01020304u, 2, 4, s);
    ((CUresult(*)(CUstream))sym("cuStreamSynchronize"))(s);
    to_host(bytes, d, 64);
    int ok32 = r == CUDA_SUCCESS;
    for (int i = 0; i < 64; i++) {
        unsigned char want = (i % 16) < 8 ? (unsigned char)(4 - (i % 4)) : 0x22;
        ok32 = ok32 && bytes[i] == want;
    }
    CHECK(ok32, "cuMemsetD2D32Async sets each row's elements only");
    r = ((CUresult(*)(CUdeviceptr, size_t, unsigned, size_t, size_t))sym("cuMemsetD2D32_v2"))(d, 4, 0, 2, 2);
    printf("cuMemsetD2D32 with a pitch under the row: %s\n", name_of(r));
}

int main() {
    lib = dlopen("libcuda.so.1", RTLD_NOW);
    if (!lib) {
        printf("FAIL dlopen libcuda.so.1\n");
        return 1;
    }
    ((CUresult(*)(unsigned))sym("cuInit"))(0);
    CUdevice dev;
    ((CUresult(*)(CUdevice *, int))sym("cuDeviceGet"))(&dev, 0);
    CUcontext ctx;
    ((CUresult(*)(CUcontext *, CUdevice))sym("cuDevicePrimaryCtxRetain"))(&ctx, dev);
    ((CUresult(*)(CUcontext))sym("cuCtxSetCurrent"))(ctx);
    CUdeviceptr d = 0;
    ((CUresult(*)(CUdeviceptr *, size_t))sym("cuMemAlloc_v2"))(&d, 1 << 20);
    void *pinned = NULL;
    ((CUresult(*)(void **, size_t, unsigned))sym("cuMemHostAlloc"))(&pinned, 4096, 0);
    pointer_attributes(d, pinned);
    legacy_names(dev);
    older_calls(dev, d);
    // CUDA 3 and 11.0 semantics of the context calls, on the primary context.
    printf("cuDevicePrimaryCtxSetFlags (v1) while active: %s\n",
           name_of(((CUresult(*)(CUdevice, unsigned))sym("cuDevicePrimaryCtxSetFlags"))(dev, 0)));
    printf("cuDevicePrimaryCtxRelease (v1): %s\n",
           name_of(((CUresult(*)(CUdevice))sym("cuDevicePrimaryCtxRelease"))(dev)));
    printf("cuCtxDestroy (v1) of the primary context: %s\n",
           name_of(((CUresult(*)(CUcontext))sym("cuCtxDestroy"))(ctx)));
    printf("%s driver_legacy: %d failure(s)\n", failures ? "FAIL" : "PASS", failures);
    return failures != 0;
}
