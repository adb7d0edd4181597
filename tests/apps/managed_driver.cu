// managed_driver: managed memory through the driver API, beside the runtime that owns
// the primary context: cuMemAllocManaged (attached globally and to the host, and its
// argument errors), cuPointerGetAttribute (IS_MANAGED, DEVICE_ORDINAL), cuMemAdvise,
// cuMemRangeGetAttribute(s), cuMemPrefetchAsync, cuMemsetD32 / cuMemcpyHtoD / DtoH /
// cuMemcpy on managed memory, a kernel loaded from PTX with cuModuleLoadData and
// launched with cuLaunchKernel on managed memory, a runtime kernel on the same
// pointer, cuStreamAttachMemAsync, and cuMemFree. The host touches managed memory only
// after a synchronizing call (or memory attached to an idle stream), so the program is
// correct with or without concurrent managed access; a device location for a prefetch
// or advice, which CUDA documents for concurrent managed access alone, is checked
// where it is accepted and prints nothing.
#include <cuda.h>
#include <cuda_runtime.h>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <vector>

static const char* base_name(const char* p) { const char* s = strrchr(p, '/'); return s ? s + 1 : p; }
static const char* cu_name(CUresult r) {
    const char* n = nullptr;
    cuGetErrorName(r, &n);
    return n ? n : "?";
}
#define CHECK(call) do { cudaError_t e_ = (call); if (e_ != cudaSuccess) { \
    printf("FAIL %s:%d %s\n", base_name(__FILE__), __LINE__, cudaGetErrorName(e_)); exit(1); } } while (0)
#define CHECK_CU(call) do { CUresult r_ = (call); if (r_ != CUDA_SUCCESS) { \
    printf("FAIL %s:%d %s\n", base_name(__FILE__), __LINE__, cu_name(r_)); exit(1); } } while (0)
#define EXPECT(cond) do { if (!(cond)) { \
    printf("MISMATCH %s:%d %s\n", base_name(__FILE__), __LINE__, #cond); exit(1); } } while (0)

typedef unsigned int u32;

static int g_concurrent = 0;  // CU_DEVICE_ATTRIBUTE_CONCURRENT_MANAGED_ACCESS; never printed

// A call CUDA documents only for concurrent managed access (a device location): must
// succeed there; elsewhere CUDA_ERROR_INVALID_DEVICE is a valid answer too.
#define DEVICE_ONLY(call) device_only((call), __LINE__)
static bool device_only(CUresult r, int line) {
    if (r == CUDA_SUCCESS) return true;
    if (!g_concurrent && r == CUDA_ERROR_INVALID_DEVICE) return false;
    printf("FAIL managed_driver.cu:%d %s\n", line, cu_name(r));
    exit(1);
}

static CUmemLocation host_loc() {
    CUmemLocation l;
    l.type = CU_MEM_LOCATION_TYPE_HOST;
    l.id = 0;
    return l;
}
static CUmemLocation dev_loc(int d) {
    CUmemLocation l;
    l.type = CU_MEM_LOCATION_TYPE_DEVICE;
    l.id = d;
    return l;
}

// a[i] = a[i] * k + i for i < n, as PTX text.
static const char* kPtx =
    ".version 8.0\n"
    ".target sm_90\n"
    ".address_size 64\n"
    ".visible .entry scale_index(.param .u64 a, .param .u32 k, .param .u32 n)\n"
    "{\n"
    "  .reg .pred %p<2>;\n"
    "  .reg .b32 %r<10>;\n"
    "  .reg .b64 %rd<6>;\n"
    "  ld.param.u64 %rd1, [a];\n"
    "  ld.param.u32 %r1, [k];\n"
    "  ld.param.u32 %r2, [n];\n"
    "  mov.u32 %r3, %ctaid.x;\n"
    "  mov.u32 %r4, %ntid.x;\n"
    "  mov.u32 %r5, %tid.x;\n"
    "  mad.lo.s32 %r6, %r3, %r4, %r5;\n"
    "  setp.ge.u32 %p1, %r6, %r2;\n"
    "  @%p1 bra DONE;\n"
    "  cvta.to.global.u64 %rd2, %rd1;\n"
    "  mul.wide.u32 %rd3, %r6, 4;\n"
    "  add.s64 %rd4, %rd2, %rd3;\n"
    "  ld.global.u32 %r7, [%rd4];\n"
    "  mad.lo.s32 %r8, %r7, %r1, %r6;\n"
    "  st.global.u32 [%rd4], %r8;\n"
    "DONE:\n"
    "  ret;\n"
    "}\n";

// The same computation, compiled into the program and launched by the runtime.
__global__ void scale_index_rt(u32* a, u32 k, u32 n) {
    u32 i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) a[i] = a[i] * k + i;
}

static unsigned long long sum(const u32* p, size_t n) {
    unsigned long long s = 0;
    for (size_t i = 0; i < n; i++) s += p[i];
    return s;
}

static int range_i32(CUmem_range_attribute attr, CUdeviceptr p, size_t n) {
    int v = 12345;
    CHECK_CU(cuMemRangeGetAttribute(&v, sizeof v, attr, p, n));
    return v;
}

int main() {
    // The runtime makes the primary context current; the driver API works in it.
    CHECK(cudaSetDevice(0));
    CHECK(cudaFree(0));
    CUcontext ctx = nullptr;
    CHECK_CU(cuCtxGetCurrent(&ctx));
    EXPECT(ctx != nullptr);
    CUdevice dev;
    CHECK_CU(cuCtxGetDevice(&dev));
    int managed = 0;
    CHECK_CU(cuDeviceGetAttribute(&managed, CU_DEVICE_ATTRIBUTE_MANAGED_MEMORY, dev));
    CHECK_CU(cuDeviceGetAttribute(&g_concurrent, CU_DEVICE_ATTRIBUTE_CONCURRENT_MANAGED_ACCESS, dev));
    printf("managed memory supported: %d\n", managed);

    const u32 n = 20000;  // 80000 bytes: 19 pages and a part
    const size_t bytes = n * sizeof(u32);
    CUdeviceptr g, h, plain;
    CHECK_CU(cuMemAllocManaged(&g, bytes, CU_MEM_ATTACH_GLOBAL));
    CHECK_CU(cuMemAllocManaged(&h, bytes, CU_MEM_ATTACH_HOST));
    CHECK_CU(cuMemAlloc(&plain, bytes));
    CUdeviceptr bad;
    printf("cuMemAllocManaged(0 bytes): %s\n", cu_name(cuMemAllocManaged(&bad, 0, CU_MEM_ATTACH_GLOBAL)));
    printf("cuMemAllocManaged(CU_MEM_ATTACH_SINGLE): %s\n", cu_name(cuMemAllocManaged(&bad, 4096, CU_MEM_ATTACH_SINGLE)));

    u32 is_managed[3] = {7, 7, 7};
    CHECK_CU(cuPointerGetAttribute(&is_managed[0], CU_POINTER_ATTRIBUTE_IS_MANAGED, g));
    CHECK_CU(cuPointerGetAttribute(&is_managed[1], CU_POINTER_ATTRIBUTE_IS_MANAGED, h + 4100));
    is_managed[2] = 0;
    CHECK_CU(cuPointerGetAttribute(&is_managed[2], CU_POINTER_ATTRIBUTE_IS_MANAGED, plain));
    int ordinal = -1;
    CHECK_CU(cuPointerGetAttribute(&ordinal, CU_POINTER_ATTRIBUTE_DEVICE_ORDINAL, g));
    printf("is managed: global %d, host-attached (inside) %d, cuMemAlloc %d; device ordinal %d\n",
           is_managed[0] != 0, is_managed[1] != 0, is_managed[2] != 0, ordinal);
    cudaPointerAttributes pa;
    memset(&pa, 0, sizeof pa);
    CHECK(cudaPointerGetAttributes(&pa, (void*)g));
    printf("runtime sees it as managed: %s\n", pa.type == cudaMemoryTypeManaged ? "yes" : "no");

    // The host fills it in place; a PTX kernel through cuLaunchKernel works on it.
    u32* gp = (u32*)g;
    for (u32 i = 0; i < n; i++) gp[i] = i % 1000;
    CUmodule mod;
    CHECK_CU(cuModuleLoadData(&mod, kPtx));
    CUfunction fn;
    CHECK_CU(cuModuleGetFunction(&fn, mod, "scale_index"));
    CUstream st;
    CHECK_CU(cuStreamCreate(&st, CU_STREAM_NON_BLOCKING));
    DEVICE_ONLY(cuMemPrefetchAsync(g, bytes, dev_loc(dev), 0, st));
    u32 k = 3, count = n;
    void* args[] = {&g, &k, &count};
    CHECK_CU(cuLaunchKernel(fn, (n + 255) / 256, 1, 1, 256, 1, 1, 0, st, args, nullptr));
    CHECK_CU(cuMemPrefetchAsync(g, bytes, host_loc(), 0, st));
    CHECK_CU(cuStreamSynchronize(st));
    EXPECT(gp[0] == 0 && gp[1] == 4 && gp[1000] == 1000 && gp[n - 1] == (999u * 3 + n - 1));
    printf("PTX kernel: g[1]=%u g[1001]=%u sum=%llu last-prefetch=%d\n", gp[1], gp[1001], sum(gp, n),
           range_i32(CU_MEM_RANGE_ATTRIBUTE_LAST_PREFETCH_LOCATION, g, bytes));

    // A runtime kernel on the same pointer, after a single-word write by the host.
    gp[5] = 1000000;
    scale_index_rt<<<(n + 255) / 256, 256>>>(gp, 2, n);
    CHECK(cudaGetLastError());
    CHECK_CU(cuCtxSynchronize());
    EXPECT(gp[5] == 2000005);
    printf("runtime kernel: g[5]=%u sum=%llu\n", gp[5], sum(gp, n));

    // Advice and range attributes.
    CHECK_CU(cuMemAdvise(g, bytes, CU_MEM_ADVISE_SET_READ_MOSTLY, host_loc()));
    CHECK_CU(cuMemAdvise(g, bytes, CU_MEM_ADVISE_SET_PREFERRED_LOCATION, host_loc()));
    printf("advised: read-mostly=%d preferred=%d\n", range_i32(CU_MEM_RANGE_ATTRIBUTE_READ_MOSTLY, g, bytes),
           range_i32(CU_MEM_RANGE_ATTRIBUTE_PREFERRED_LOCATION, g, bytes));
    int rm = -7, pref = -7, by[2] = {-7, -7};
    void* data[] = {&rm, &pref, by};
    size_t sizes[] = {sizeof rm, sizeof pref, sizeof by};
    CUmem_range_attribute attrs[] = {CU_MEM_RANGE_ATTRIBUTE_READ_MOSTLY, CU_MEM_RANGE_ATTRIBUTE_PREFERRED_LOCATION,
                                     CU_MEM_RANGE_ATTRIBUTE_ACCESSED_BY};
    CHECK_CU(cuMemRangeGetAttributes(data, sizes, attrs, 3, g, bytes));
    printf("several at once: read-mostly=%d preferred=%d accessed-by=%d,%d\n", rm, pref, by[0], by[1]);
    CHECK_CU(cuLaunchKernel(fn, (n + 255) / 256, 1, 1, 256, 1, 1, 0, st, args, nullptr));
    CHECK_CU(cuStreamSynchronize(st));
    printf("read-mostly data through the PTX kernel: sum=%llu\n", sum(gp, n));
    CHECK_CU(cuMemAdvise(g, bytes, CU_MEM_ADVISE_UNSET_READ_MOSTLY, host_loc()));
    CHECK_CU(cuMemAdvise(g, bytes, CU_MEM_ADVISE_UNSET_PREFERRED_LOCATION, host_loc()));
    printf("unset: read-mostly=%d preferred=%d\n", range_i32(CU_MEM_RANGE_ATTRIBUTE_READ_MOSTLY, g, bytes),
           range_i32(CU_MEM_RANGE_ATTRIBUTE_PREFERRED_LOCATION, g, bytes));
    if (DEVICE_ONLY(cuMemAdvise(g, bytes, CU_MEM_ADVISE_SET_PREFERRED_LOCATION, dev_loc(dev)))) {
        EXPECT(range_i32(CU_MEM_RANGE_ATTRIBUTE_PREFERRED_LOCATION, g, bytes) == (int)dev);
        CHECK_CU(cuMemAdvise(g, bytes, CU_MEM_ADVISE_UNSET_PREFERRED_LOCATION, dev_loc(dev)));
    }

    // Copies and memsets with managed memory; the host looks after synchronizing.
    CHECK_CU(cuMemsetD32(g, 0x01020304u, n));
    CHECK_CU(cuCtxSynchronize());
    EXPECT(gp[0] == 0x01020304u && gp[n - 1] == 0x01020304u);
    std::vector<u32> host(n), back(n);
    for (u32 i = 0; i < n; i++) host[i] = i * 5;
    CHECK_CU(cuMemcpyHtoD(g, host.data(), bytes));
    CHECK_CU(cuMemcpy(plain, g, bytes));
    CHECK_CU(cuMemcpyDtoH(back.data(), plain, bytes));
    EXPECT(back == host);
    CHECK_CU(cuMemsetD8(g + 10, 0xff, 3));
    CHECK_CU(cuMemcpyDtoH(back.data(), g, bytes));
    CHECK_CU(cuCtxSynchronize());
    // Bytes 10-12: the upper half of word 2 (10) and the low byte of word 3 (15).
    EXPECT(memcmp(back.data(), gp, bytes) == 0 && back[2] == 0xffff000au && back[3] == 0x000000ffu);
    printf("copies: g[2]=%08x g[3]=%08x g[4]=%u sum=%llu\n", gp[2], gp[3], gp[4], sum(gp, n));

    // Host-attached memory: the host's at any time; a stream's after cuStreamAttachMemAsync.
    u32* hp = (u32*)h;
    for (u32 i = 0; i < n; i++) hp[i] = 7;
    CHECK_CU(cuStreamAttachMemAsync(st, h, 0, CU_MEM_ATTACH_SINGLE));
    void* hargs[] = {&h, &k, &count};
    CHECK_CU(cuLaunchKernel(fn, (n + 255) / 256, 1, 1, 256, 1, 1, 0, st, hargs, nullptr));
    CHECK_CU(cuStreamSynchronize(st));
    EXPECT(hp[0] == 21 && hp[n - 1] == 21 + n - 1);
    printf("attached to a stream: h[10]=%u sum=%llu\n", hp[10], sum(hp, n));
    CHECK_CU(cuStreamAttachMemAsync(st, h, 0, CU_MEM_ATTACH_HOST));
    CHECK_CU(cuStreamSynchronize(st));
    // A kernel on the global allocation runs while the host writes the host-attached one.
    CHECK_CU(cuLaunchKernel(fn, (n + 255) / 256, 1, 1, 256, 1, 1, 0, st, args, nullptr));
    for (u32 i = 0; i < n; i++) hp[i] = i;
    CHECK_CU(cuStreamSynchronize(st));
    printf("while a kernel ran: h sum=%llu g sum=%llu\n", sum(hp, n), sum(gp, n));

    CHECK_CU(cuStreamDestroy(st));
    CHECK_CU(cuModuleUnload(mod));
    CHECK_CU(cuMemFree(g));
    CHECK_CU(cuMemFree(h));
    CHECK_CU(cuMemFree(plain));
    CHECK(cudaDeviceSynchronize());
    printf("done\n");
    return 0;
}
