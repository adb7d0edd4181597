// The CUDA driver API used directly, through libcuda.so.1 opened with dlopen (the
// real one natively, vmcuda's guest libcuda.so.1 when bridged): initialisation,
// device queries, the primary context and the context stack, module loads from PTX
// text and from a cubin the linker made, launches, copies, memsets, streams and
// events, the VMM family, cuGetProcAddress and error names. Prints deterministic
// results only; parts that need a kernel are skipped (and say so) when the module
// cannot be loaded, which is what the host-memory test executor answers for PTX.
#include <cuda.h>
#include <dlfcn.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define FN(name, sym) static decltype(&::name) p_##name;
#define LOAD(name, sym)                                                    \
    p_##name = (decltype(&::name))dlsym(lib, sym);                         \
    if (!p_##name) {                                                       \
        printf("FAIL missing %s\n", sym);                                  \
        return 1;                                                          \
    }

#define FUNCS(X)                                                           \
    X(cuInit, "cuInit")                                                    \
    X(cuDriverGetVersion, "cuDriverGetVersion")                            \
    X(cuGetErrorName, "cuGetErrorName")                                    \
    X(cuGetErrorString, "cuGetErrorString")                                \
    X(cuDeviceGetCount, "cuDeviceGetCount")                                \
    X(cuDeviceGet, "cuDeviceGet")                                          \
    X(cuDeviceGetName, "cuDeviceGetName")                                  \
    X(cuDeviceGetAttribute, "cuDeviceGetAttribute")                        \
    X(cuDeviceTotalMem_v2, "cuDeviceTotalMem_v2")                          \
    X(cuDevicePrimaryCtxRetain, "cuDevicePrimaryCtxRetain")                \
    X(cuDevicePrimaryCtxGetState, "cuDevicePrimaryCtxGetState")            \
    X(cuDevicePrimaryCtxRelease_v2, "cuDevicePrimaryCtxRelease_v2")        \
    X(cuCtxSetCurrent, "cuCtxSetCurrent")                                  \
    X(cuCtxGetCurrent, "cuCtxGetCurrent")                                  \
    X(cuCtxGetDevice, "cuCtxGetDevice")                                    \
    X(cuCtxPushCurrent_v2, "cuCtxPushCurrent_v2")                          \
    X(cuCtxPopCurrent_v2, "cuCtxPopCurrent_v2")                            \
    X(cuCtxSynchronize, "cuCtxSynchronize")                                \
    X(cuCtxGetLimit, "cuCtxGetLimit")                                      \
    X(cuCtxSetLimit, "cuCtxSetLimit")                                      \
    X(cuDeviceGetP2PAttribute, "cuDeviceGetP2PAttribute")                  \
    X(cuModuleLoadData, "cuModuleLoadData")                                \
    X(cuModuleLoadDataEx, "cuModuleLoadDataEx")                            \
    X(cuModuleUnload, "cuModuleUnload")                                    \
    X(cuModuleGetFunction, "cuModuleGetFunction")                          \
    X(cuModuleGetGlobal_v2, "cuModuleGetGlobal_v2")                        \
    X(cuLinkCreate_v2, "cuLinkCreate_v2")                                  \
    X(cuLinkAddData_v2, "cuLinkAddData_v2")                                \
    X(cuLinkComplete, "cuLinkComplete")                                    \
    X(cuLinkDestroy, "cuLinkDestroy")                                      \
    X(cuFuncGetAttribute, "cuFuncGetAttribute")                            \
    X(cuOccupancyMaxPotentialBlockSize, "cuOccupancyMaxPotentialBlockSize") \
    X(cuModuleGetFunctionCount, "cuModuleGetFunctionCount")                \
    X(cuLaunchKernel, "cuLaunchKernel")                                    \
    X(cuMemAlloc_v2, "cuMemAlloc_v2")                                      \
    X(cuMemFree_v2, "cuMemFree_v2")                                        \
    X(cuMemcpyHtoD_v2, "cuMemcpyHtoD_v2")                                  \
    X(cuMemcpyDtoH_v2, "cuMemcpyDtoH_v2")                                  \
    X(cuMemcpyDtoD_v2, "cuMemcpyDtoD_v2")                                  \
    X(cuMemcpyHtoDAsync_v2, "cuMemcpyHtoDAsync_v2")                        \
    X(cuMemcpyDtoHAsync_v2, "cuMemcpyDtoHAsync_v2")                        \
    X(cuMemsetD8_v2, "cuMemsetD8_v2")                                      \
    X(cuMemsetD16_v2, "cuMemsetD16_v2")                                    \
    X(cuMemsetD32_v2, "cuMemsetD32_v2")                                    \
    X(cuMemsetD32Async, "cuMemsetD32Async")                                \
    X(cuMemGetAddressRange_v2, "cuMemGetAddressRange_v2")                  \
    X(cuPointerGetAttribute, "cuPointerGetAttribute")                      \
    X(cuStreamCreate, "cuStreamCreate")                                    \
    X(cuStreamSynchronize, "cuStreamSynchronize")                          \
    X(cuStreamDestroy_v2, "cuStreamDestroy_v2")                            \
    X(cuStreamWriteValue32_v2, "cuStreamWriteValue32_v2")                  \
    X(cuEventCreate, "cuEventCreate")                                      \
    X(cuEventRecord, "cuEventRecord")                                      \
    X(cuEventSynchronize, "cuEventSynchronize")                            \
    X(cuEventQuery, "cuEventQuery")                                        \
    X(cuEventDestroy_v2, "cuEventDestroy_v2")                              \
    X(cuMemGetAllocationGranularity, "cuMemGetAllocationGranularity")      \
    X(cuMemAddressReserve, "cuMemAddressReserve")                          \
    X(cuMemCreate, "cuMemCreate")                                          \
    X(cuMemMap, "cuMemMap")                                                \
    X(cuMemSetAccess, "cuMemSetAccess")                                    \
    X(cuMemRetainAllocationHandle, "cuMemRetainAllocationHandle")          \
    X(cuMemGetAllocationPropertiesFromHandle, "cuMemGetAllocationPropertiesFromHandle") \
    X(cuMemUnmap, "cuMemUnmap")                                            \
    X(cuMemRelease, "cuMemRelease")                                        \
    X(cuMemAddressFree, "cuMemAddressFree")                                \
    X(cuGetProcAddress_v2, "cuGetProcAddress_v2")

FUNCS(FN)

static int failures = 0;

static const char *name_of(CUresult r) {
    const char *s = NULL;
    if (p_cuGetErrorName(r, &s) != CUDA_SUCCESS || !s) return "(unknown)";
    return s;
}

static void check(const char *what, CUresult r, CUresult want = CUDA_SUCCESS) {
    if (r == want) {
        printf("PASS %s: %s\n", what, name_of(r));
    } else {
        printf("FAIL %s: %s (want %s)\n", what, name_of(r), name_of(want));
        failures++;
    }
}

static void expect(const char *what, bool ok) {
    printf("%s %s\n", ok ? "PASS" : "FAIL", what);
    if (!ok) failures++;
}

// One kernel, as PTX text: out[i] = in[i] * k + i, for i < n.
static const char *kPtx =
    ".version 8.0\n"
    ".target sm_90\n"
    ".address_size 64\n"
    ".visible .global .align 4 .u32 counter;\n"
    ".visible .entry scale(.param .u64 out, .param .u64 in, .param .u32 k, .param .u32 n)\n"
    "{\n"
    "  .reg .pred %p<2>;\n"
    "  .reg .b32 %r<8>;\n"
    "  .reg .b64 %rd<8>;\n"
    "  ld.param.u64 %rd1, [out];\n"
    "  ld.param.u64 %rd2, [in];\n"
    "  ld.param.u32 %r1, [k];\n"
    "  ld.param.u32 %r2, [n];\n"
    "  mov.u32 %r3, %ctaid.x;\n"
    "  mov.u32 %r4, %ntid.x;\n"
    "  mov.u32 %r5, %tid.x;\n"
    "  mad.lo.s32 %r6, %r3, %r4, %r5;\n"
    "  setp.ge.u32 %p1, %r6, %r2;\n"
    "  @%p1 bra DONE;\n"
    "  cvta.to.global.u64 %rd3, %rd2;\n"
    "  cvta.to.global.u64 %rd4, %rd1;\n"
    "  mul.wide.u32 %rd5, %r6, 4;\n"
    "  add.s64 %rd6, %rd3, %rd5;\n"
    "  ld.global.u32 %r7, [%rd6];\n"
    "  mad.lo.s32 %r7, %r7, %r1, %r6;\n"
    "  add.s64 %rd7, %rd4, %rd5;\n"
    "  st.global.u32 [%rd7], %r7;\n"
    "DONE:\n"
    "  ret;\n"
    "}\n";

static void run_kernel(CUmodule mod, const char *label, CUdeviceptr dout, CUdeviceptr din, unsigned n) {
    CUfunction f;
    char what[128];
    snprintf(what, sizeof what, "%s cuModuleGetFunction", label);
    check(what, p_cuModuleGetFunction(&f, mod, "scale"));
    int regs = -1;
    snprintf(what, sizeof what, "%s cuFuncGetAttribute(MAX_THREADS_PER_BLOCK)", label);
    check(what, p_cuFuncGetAttribute(&regs, CU_FUNC_ATTRIBUTE_MAX_THREADS_PER_BLOCK, f));
    int min_grid = -1, best_block = -1;
    snprintf(what, sizeof what, "%s cuOccupancyMaxPotentialBlockSize", label);
    check(what, p_cuOccupancyMaxPotentialBlockSize(&min_grid, &best_block, f, NULL, 0, 0));
    printf("%s potential block size %d, min grid %d\n", label, best_block, min_grid);
    unsigned count = 0;
    snprintf(what, sizeof what, "%s cuModuleGetFunctionCount", label);
    check(what, p_cuModuleGetFunctionCount(&count, mod));
    printf("%s functions in the module: %u\n", label, count);
    unsigned k = 3;
    void *args[] = {&dout, &din, &k, &n};
    snprintf(what, sizeof what, "%s cuLaunchKernel", label);
    check(what, p_cuLaunchKernel(f, (n + 127) / 128, 1, 1, 128, 1, 1, 0, 0, args, NULL));
    check("cuCtxSynchronize", p_cuCtxSynchronize());
    unsigned *host = (unsigned *)malloc(n * 4);
    check("cuMemcpyDtoH after launch", p_cuMemcpyDtoH_v2(host, dout, n * 4));
    bool ok = true;
    for (unsigned i = 0; i < n; i++) ok &= host[i] == i * 7 * 3 + i;
    snprintf(what, sizeof what, "%s kernel results out[i] = 7i*3 + i", label);
    expect(what, ok);
    printf("%s out[0..4] = %u %u %u %u\n", label, host[0], host[1], host[2], host[3]);
    free(host);
    CUfunction missing;
    snprintf(what, sizeof what, "%s cuModuleGetFunction(missing)", label);
    check(what, p_cuModuleGetFunction(&missing, mod, "no_such_kernel"), CUDA_ERROR_NOT_FOUND);
}

int main() {
    void *lib = dlopen("libcuda.so.1", RTLD_NOW);
    if (!lib) {
        printf("FAIL dlopen libcuda.so.1: %s\n", dlerror());
        return 1;
    }
    FUNCS(LOAD)

    // Before cuInit: not initialised.
    int count = -1;
    check("cuDeviceGetCount before cuInit", p_cuDeviceGetCount(&count), CUDA_ERROR_NOT_INITIALIZED);
    check("cuInit(1)", p_cuInit(1), CUDA_ERROR_INVALID_VALUE);
    check("cuInit", p_cuInit(0));
    int version = 0;
    check("cuDriverGetVersion", p_cuDriverGetVersion(&version));
    expect("driver version is CUDA 13 or later", version >= 13000);
    check("cuDeviceGetCount", p_cuDeviceGetCount(&count));
    expect("at least one device", count >= 1);
    CUdevice dev;
    check("cuDeviceGet(0)", p_cuDeviceGet(&dev, 0));
    CUdevice bad;
    check("cuDeviceGet(count)", p_cuDeviceGet(&bad, count), CUDA_ERROR_INVALID_DEVICE);
    char name[256];
    check("cuDeviceGetName", p_cuDeviceGetName(name, sizeof name, dev));
    expect("device name is not empty", name[0] != 0);
    int major = 0, warp = 0;
    check("cuDeviceGetAttribute(COMPUTE_CAPABILITY_MAJOR)",
          p_cuDeviceGetAttribute(&major, CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MAJOR, dev));
    check("cuDeviceGetAttribute(WARP_SIZE)", p_cuDeviceGetAttribute(&warp, CU_DEVICE_ATTRIBUTE_WARP_SIZE, dev));
    printf("warp size %d\n", warp);
    size_t total = 0;
    check("cuDeviceTotalMem", p_cuDeviceTotalMem_v2(&total, dev));
    expect("total memory is over 1 GiB", total > (1ull << 30));

    const char *s = NULL;
    check("cuGetErrorString(OUT_OF_MEMORY)", p_cuGetErrorString(CUDA_ERROR_OUT_OF_MEMORY, &s));
    printf("cuGetErrorName(CUDA_ERROR_INVALID_HANDLE) = %s\n", name_of(CUDA_ERROR_INVALID_HANDLE));
    check("cuGetErrorName(12345)", p_cuGetErrorName((CUresult)12345, &s), CUDA_ERROR_INVALID_VALUE);

    // The primary context and the context stack.
    CUcontext ctx = NULL, cur = NULL;
    check("cuDevicePrimaryCtxRetain", p_cuDevicePrimaryCtxRetain(&ctx, dev));
    unsigned flags = 99;
    int active = 0;
    check("cuDevicePrimaryCtxGetState", p_cuDevicePrimaryCtxGetState(dev, &flags, &active));
    printf("primary context active %d\n", active);
    check("cuCtxSetCurrent", p_cuCtxSetCurrent(ctx));
    check("cuCtxGetCurrent", p_cuCtxGetCurrent(&cur));
    expect("current context is the primary context", cur == ctx);
    CUdevice cdev = -1;
    check("cuCtxGetDevice", p_cuCtxGetDevice(&cdev));
    expect("context device is device 0", cdev == dev);
    check("cuCtxPushCurrent", p_cuCtxPushCurrent_v2(ctx));
    CUcontext popped = NULL;
    check("cuCtxPopCurrent", p_cuCtxPopCurrent_v2(&popped));
    expect("popped context is the primary context", popped == ctx);

    // Context limits (Triton's launcher sets the stack size) and peer attributes.
    size_t fifo = 0, fifo_now = 0;
    check("cuCtxGetLimit(PRINTF_FIFO_SIZE)", p_cuCtxGetLimit(&fifo, CU_LIMIT_PRINTF_FIFO_SIZE));
    check("cuCtxSetLimit(PRINTF_FIFO_SIZE)", p_cuCtxSetLimit(CU_LIMIT_PRINTF_FIFO_SIZE, 2 << 20));
    check("cuCtxGetLimit after cuCtxSetLimit", p_cuCtxGetLimit(&fifo_now, CU_LIMIT_PRINTF_FIFO_SIZE));
    expect("the printf FIFO is at least what was set", fifo_now >= (2 << 20));
    check("cuCtxSetLimit(PRINTF_FIFO_SIZE) back", p_cuCtxSetLimit(CU_LIMIT_PRINTF_FIFO_SIZE, fifo));
    check("cuCtxGetLimit(NULL)", p_cuCtxGetLimit(NULL, CU_LIMIT_STACK_SIZE), CUDA_ERROR_INVALID_VALUE);
    int p2p = -1;
    check("cuDeviceGetP2PAttribute(device, itself)",
          p_cuDeviceGetP2PAttribute(&p2p, CU_DEVICE_P2P_ATTRIBUTE_ACCESS_SUPPORTED, dev, dev),
          CUDA_ERROR_INVALID_DEVICE);

    // Memory: allocation, copies, memsets.
    const unsigned n = 1000;
    CUdeviceptr din = 0, dout = 0;
    check("cuMemAlloc in", p_cuMemAlloc_v2(&din, n * 4));
    check("cuMemAlloc out", p_cuMemAlloc_v2(&dout, n * 4));
    unsigned *host = (unsigned *)malloc(n * 4);
    for (unsigned i = 0; i < n; i++) host[i] = i * 7;
    check("cuMemcpyHtoD", p_cuMemcpyHtoD_v2(din, host, n * 4));
    check("cuMemcpyDtoD", p_cuMemcpyDtoD_v2(dout, din, n * 4));
    memset(host, 0, n * 4);
    check("cuMemcpyDtoH", p_cuMemcpyDtoH_v2(host, dout, n * 4));
    bool ok = true;
    for (unsigned i = 0; i < n; i++) ok &= host[i] == i * 7;
    expect("HtoD, DtoD, DtoH round trip", ok);
    CUdeviceptr base = 0;
    size_t size = 0;
    check("cuMemGetAddressRange", p_cuMemGetAddressRange_v2(&base, &size, dout + 40));
    expect("address range is the allocation", base == dout && size == n * 4);
    // Buffer ids (cuFFT asks them of every buffer): one per allocation, the same
    // anywhere inside it.
    unsigned long long id_in = 0, id_out = 0, id_inside = 0;
    check("cuPointerGetAttribute(BUFFER_ID)", p_cuPointerGetAttribute(&id_in, CU_POINTER_ATTRIBUTE_BUFFER_ID, din));
    check("cuPointerGetAttribute(BUFFER_ID) out", p_cuPointerGetAttribute(&id_out, CU_POINTER_ATTRIBUTE_BUFFER_ID, dout));
    check("cuPointerGetAttribute(BUFFER_ID) inside",
          p_cuPointerGetAttribute(&id_inside, CU_POINTER_ATTRIBUTE_BUFFER_ID, dout + 40));
    expect("buffer ids are nonzero, one per allocation, the same inside one",
           id_in && id_out && id_in != id_out && id_inside == id_out);
    check("cuMemsetD32", p_cuMemsetD32_v2(dout, 0xdeadbeef, n));
    check("cuMemsetD16", p_cuMemsetD16_v2(dout, 0x1234, 4));
    check("cuMemsetD8", p_cuMemsetD8_v2(dout + 8, 0x5a, 4));
    check("cuMemcpyDtoH after memsets", p_cuMemcpyDtoH_v2(host, dout, n * 4));
    printf("after memsets: %08x %08x %08x %08x\n", host[0], host[1], host[2], host[n - 1]);
    check("cuMemsetD32 on a wild pointer", p_cuMemsetD32_v2(0x10, 1, 4), CUDA_ERROR_INVALID_VALUE);

    // Streams and events.
    CUstream stream;
    CUevent ev;
    check("cuStreamCreate", p_cuStreamCreate(&stream, CU_STREAM_NON_BLOCKING));
    check("cuEventCreate", p_cuEventCreate(&ev, CU_EVENT_DEFAULT));
    for (unsigned i = 0; i < n; i++) host[i] = i;
    check("cuMemcpyHtoDAsync", p_cuMemcpyHtoDAsync_v2(din, host, n * 4, stream));
    check("cuMemsetD32Async", p_cuMemsetD32Async(din + 4 * 10, 77, 5, stream));
    check("cuStreamWriteValue32", p_cuStreamWriteValue32_v2(stream, din, 4242, 0));
    check("cuEventRecord", p_cuEventRecord(ev, stream));
    check("cuEventSynchronize", p_cuEventSynchronize(ev));
    check("cuEventQuery", p_cuEventQuery(ev));
    check("cuMemcpyDtoHAsync", p_cuMemcpyDtoHAsync_v2(host, din, n * 4, stream));
    check("cuStreamSynchronize", p_cuStreamSynchronize(stream));
    printf("stream results: %u %u %u %u %u\n", host[0], host[1], host[10], host[14], host[15]);
    check("cuEventDestroy", p_cuEventDestroy_v2(ev));
    check("cuStreamDestroy", p_cuStreamDestroy_v2(stream));

    // Put the inputs back for the kernels.
    for (unsigned i = 0; i < n; i++) host[i] = i * 7;
    check("cuMemcpyHtoD inputs", p_cuMemcpyHtoD_v2(din, host, n * 4));

    // A module from PTX text (JIT-compiled by the driver).
    CUmodule mod = NULL;
    CUresult r = p_cuModuleLoadData(&mod, kPtx);
    printf("cuModuleLoadData(PTX): %s\n", name_of(r));
    if (r == CUDA_SUCCESS) {
        run_kernel(mod, "ptx", dout, din, n);
        CUdeviceptr g = 0;
        size_t gsize = 0;
        check("cuModuleGetGlobal", p_cuModuleGetGlobal_v2(&g, &gsize, mod, "counter"));
        printf("global counter size %zu\n", gsize);
        check("cuModuleUnload", p_cuModuleUnload(mod));
        CUfunction f;
        check("cuModuleGetFunction after unload", p_cuModuleGetFunction(&f, mod, "scale"), CUDA_ERROR_INVALID_HANDLE);
    } else {
        printf("SKIP kernels from PTX: the module did not load\n");
    }

    // The same PTX with the JIT's output options: both logs come back NUL-terminated
    // (the buffers start full of 'x'), an error log only when the load failed, and the
    // filled lengths in the size options' slots.
    {
        char info[256], err[256];
        memset(info, 'x', sizeof info);
        memset(err, 'x', sizeof err);
        CUjit_option o[5] = {CU_JIT_INFO_LOG_BUFFER, CU_JIT_INFO_LOG_BUFFER_SIZE_BYTES, CU_JIT_ERROR_LOG_BUFFER,
                             CU_JIT_ERROR_LOG_BUFFER_SIZE_BYTES, CU_JIT_MAX_REGISTERS};
        void *v[5] = {info, (void *)(size_t)sizeof info, err, (void *)(size_t)sizeof err, (void *)(size_t)32};
        CUmodule ex = NULL;
        CUresult rex = p_cuModuleLoadDataEx(&ex, kPtx, 5, o, v);
        printf("cuModuleLoadDataEx(PTX): %s\n", name_of(rex));
        bool terminated = memchr(info, 0, sizeof info) && memchr(err, 0, sizeof err);
        expect("cuModuleLoadDataEx's logs are NUL-terminated", terminated);
        size_t err_len = (size_t)v[3];
        expect("cuModuleLoadDataEx's error log is filled only on failure",
               terminated && (rex == CUDA_SUCCESS) == (strlen(err) == 0) && err_len <= sizeof err);
        if (rex == CUDA_SUCCESS) check("cuModuleUnload(Ex)", p_cuModuleUnload(ex));
    }

    // The linker: PTX in, a cubin out, loaded as a module.
    CUlinkState link;
    char error_log[4096] = {0};
    CUjit_option opts[] = {CU_JIT_ERROR_LOG_BUFFER, CU_JIT_ERROR_LOG_BUFFER_SIZE_BYTES};
    void *vals[] = {error_log, (void *)(size_t)sizeof error_log};
    check("cuLinkCreate", p_cuLinkCreate_v2(2, opts, vals, &link));
    r = p_cuLinkAddData_v2(link, CU_JIT_INPUT_PTX, (void *)kPtx, strlen(kPtx) + 1, "scale.ptx", 0, NULL, NULL);
    printf("cuLinkAddData: %s\n", name_of(r));
    void *cubin = NULL;
    size_t cubin_size = 0;
    r = p_cuLinkComplete(link, &cubin, &cubin_size);
    printf("cuLinkComplete: %s\n", name_of(r));
    if (r == CUDA_SUCCESS) {
        expect("the linker made an ELF cubin", cubin_size > 4 && memcmp(cubin, "\x7f" "ELF", 4) == 0);
        CUmodule linked;
        check("cuModuleLoadData(cubin)", p_cuModuleLoadData(&linked, cubin));
        check("cuMemsetD32 out", p_cuMemsetD32_v2(dout, 0, n));
        run_kernel(linked, "cubin", dout, din, n);
        check("cuModuleUnload(cubin)", p_cuModuleUnload(linked));
    } else {
        printf("SKIP kernels from the linker: the link did not complete\n");
    }
    check("cuLinkDestroy", p_cuLinkDestroy(link));
    // (Destroying it again would be a double free in the real driver: not tested.)

    // Virtual memory management: reserve, create, map, set access, use, tear down.
    CUmemAllocationProp prop = {};
    prop.type = CU_MEM_ALLOCATION_TYPE_PINNED;
    prop.location.type = CU_MEM_LOCATION_TYPE_DEVICE;
    prop.location.id = dev;
    size_t gran = 0;
    check("cuMemGetAllocationGranularity", p_cuMemGetAllocationGranularity(&gran, &prop, CU_MEM_ALLOC_GRANULARITY_MINIMUM));
    expect("granularity is a power of two of at least 64 KiB", gran >= (64 << 10) && (gran & (gran - 1)) == 0);
    CUdeviceptr va = 0;
    check("cuMemAddressReserve", p_cuMemAddressReserve(&va, 2 * gran, 0, 0, 0));
    CUmemGenericAllocationHandle h1, h2;
    check("cuMemCreate 1", p_cuMemCreate(&h1, gran, &prop, 0));
    check("cuMemCreate 2", p_cuMemCreate(&h2, gran, &prop, 0));
    check("cuMemMap 1", p_cuMemMap(va, gran, 0, h1, 0));
    check("cuMemMap 2", p_cuMemMap(va + gran, gran, 0, h2, 0));
    check("cuMemMap over a mapping", p_cuMemMap(va, gran, 0, h2, 0), CUDA_ERROR_INVALID_VALUE);
    CUmemAccessDesc access = {};
    access.location = prop.location;
    access.flags = CU_MEM_ACCESS_FLAGS_PROT_READWRITE;
    check("cuMemSetAccess", p_cuMemSetAccess(va, 2 * gran, &access, 1));
    check("cuMemsetD32 mapped 1", p_cuMemsetD32_v2(va, 0x11111111, gran / 4));
    check("cuMemsetD32 mapped 2", p_cuMemsetD32_v2(va + gran, 0x22222222, gran / 4));
    unsigned words[2] = {0, 0};
    check("cuMemcpyDtoH mapped 1", p_cuMemcpyDtoH_v2(&words[0], va + gran - 4, 4));
    check("cuMemcpyDtoH mapped 2", p_cuMemcpyDtoH_v2(&words[1], va + gran, 4));
    printf("mapped words: %08x %08x\n", words[0], words[1]);
    CUmemGenericAllocationHandle again;
    check("cuMemRetainAllocationHandle", p_cuMemRetainAllocationHandle(&again, (void *)(va + gran + 64)));
    expect("retained handle is the mapped one", again == h2);
    CUmemAllocationProp got = {};
    check("cuMemGetAllocationPropertiesFromHandle", p_cuMemGetAllocationPropertiesFromHandle(&got, h1));
    expect("properties round trip", got.type == prop.type && got.location.id == dev);
    check("cuMemRelease retained", p_cuMemRelease(again));
    check("cuMemUnmap", p_cuMemUnmap(va, 2 * gran));
    check("cuMemRelease 1", p_cuMemRelease(h1));
    check("cuMemRelease 2", p_cuMemRelease(h2));
    check("cuMemAddressFree", p_cuMemAddressFree(va, 2 * gran));

    // cuGetProcAddress resolves to working functions; unknown names are not found.
    void *fp = NULL;
    CUdriverProcAddressQueryResult q;
    check("cuGetProcAddress(cuMemAlloc)", p_cuGetProcAddress_v2("cuMemAlloc", &fp, 13000, CU_GET_PROC_ADDRESS_DEFAULT, &q));
    CUdeviceptr via = 0;
    check("cuMemAlloc through cuGetProcAddress", ((decltype(&::cuMemAlloc_v2))fp)(&via, 256));
    check("cuMemFree", p_cuMemFree_v2(via));
    check("cuGetProcAddress(cuNoSuchFunction)",
          p_cuGetProcAddress_v2("cuNoSuchFunction", &fp, 13000, CU_GET_PROC_ADDRESS_DEFAULT, &q), CUDA_SUCCESS);
    printf("unknown symbol status %d, pointer %s\n", (int)q, fp ? "set" : "NULL");

    // cuMemGetAttribute(_v2): deprecated, with no public signature; NVIDIA's driver
    // answers CUDA_ERROR_NOT_SUPPORTED whatever it is passed, by name and by lookup.
    for (const char *name : {"cuMemGetAttribute", "cuMemGetAttribute_v2"}) {
        typedef CUresult (*Deprecated)(void *, int, CUdeviceptr);
        char what[96];
        snprintf(what, sizeof what, "%s by name", name);
        Deprecated by_name = (Deprecated)dlsym(lib, name);
        if (!by_name) {
            printf("FAIL missing %s\n", name);
            failures++;
            continue;
        }
        unsigned long long scratch[4] = {0};
        check(what, by_name(scratch, 0, din), CUDA_ERROR_NOT_SUPPORTED);
        // NVIDIA's cuGetProcAddress does not hand them out ("symbol not found").
        snprintf(what, sizeof what, "cuGetProcAddress(%s)", name);
        void *looked_up = NULL;
        check(what, p_cuGetProcAddress_v2(name, &looked_up, 13000, CU_GET_PROC_ADDRESS_DEFAULT, &q));
        printf("%s: status %d, pointer %s\n", what, (int)q, looked_up ? "set" : "NULL");
        snprintf(what, sizeof what, "%s through cuGetProcAddress", name);
        if (looked_up) check(what, ((Deprecated)looked_up)(scratch, 1, din), CUDA_ERROR_NOT_SUPPORTED);
    }

    check("cuMemFree in", p_cuMemFree_v2(din));
    check("cuMemFree out", p_cuMemFree_v2(dout));
    check("cuDevicePrimaryCtxRelease", p_cuDevicePrimaryCtxRelease_v2(dev));
    free(host);
    printf("%s driver_api: %d failure(s)\n", failures ? "FAIL" : "PASS", failures);
    return failures ? 1 : 0;
}
