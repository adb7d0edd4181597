// texref_memops: the driver functions of issue 33's last batch, on the GPU, natively
// and through vmcuda (tests/gpu/run-texref.sh runs both). Driver API only; one line
// per check, "PASS name: detail" or "FAIL name: detail", and a non-zero exit on any
// FAIL. Checks: stream memory operation batches (cuStreamBatchMemOp_v2: writes, a
// barrier, waits that see the writes; 256 refused), batch memory operation graph nodes
// (add, get, set, exec set, launched), texture references of a PTX module's
// `.texref` (found by name, bound to an array, to linear and to pitched memory, read
// by kernels; every Set read back by its Get), a reference made by cuTexRefCreate,
// cuParamSetTexRef, a surface reference (`.surfref`) written by a kernel,
// cuMemGetAccess over VMM memory, cuMemBatchDecompressAsync, the im2col encoders and
// cuTensorMapReplaceAddress, and cuMemMapArrayAsync on an array that is not sparse (its
// refusal's code printed).
#include <cuda.h>

#include <cstdarg>
#include <cstdio>
#include <cstring>
#include <vector>

static int failures = 0;

static void check(bool ok, const char* name, const char* fmt, ...) __attribute__((format(printf, 3, 4)));
static void check(bool ok, const char* name, const char* fmt, ...) {
    va_list ap;
    va_start(ap, fmt);
    printf("%s %s: ", ok ? "PASS" : "FAIL", name);
    vprintf(fmt, ap);
    printf("\n");
    va_end(ap);
    if (!ok) failures++;
}

// A texture reference read two ways (float coordinates for arrays, integer ones for
// linear memory), a 2D read for pitched memory, and a surface reference written.
static const char* kPtx = R"(
.version 8.0
.target sm_90
.address_size 64
.global .texref tex;
.global .surfref surf;

.visible .entry read_array(.param .u64 out, .param .u32 n)
{
  .reg .pred %p;
  .reg .b32 %r<3>;
  .reg .f32 %f<6>;
  .reg .b64 %rd<5>;
  ld.param.u64 %rd1, [out];
  ld.param.u32 %r1, [n];
  mov.u32 %r2, %tid.x;
  setp.ge.u32 %p, %r2, %r1;
  @%p bra DONE;
  cvt.rn.f32.u32 %f5, %r2;
  add.f32 %f5, %f5, 0f3F000000;
  tex.1d.v4.f32.f32 {%f1, %f2, %f3, %f4}, [tex, {%f5}];
  cvta.to.global.u64 %rd2, %rd1;
  mul.wide.u32 %rd3, %r2, 4;
  add.u64 %rd4, %rd2, %rd3;
  st.global.f32 [%rd4], %f1;
DONE:
  ret;
}

.visible .entry read_linear(.param .u64 out, .param .u32 n)
{
  .reg .pred %p;
  .reg .b32 %r<3>;
  .reg .f32 %f<5>;
  .reg .b64 %rd<5>;
  ld.param.u64 %rd1, [out];
  ld.param.u32 %r1, [n];
  mov.u32 %r2, %tid.x;
  setp.ge.u32 %p, %r2, %r1;
  @%p bra DONE;
  tex.1d.v4.f32.s32 {%f1, %f2, %f3, %f4}, [tex, {%r2}];
  cvta.to.global.u64 %rd2, %rd1;
  mul.wide.u32 %rd3, %r2, 4;
  add.u64 %rd4, %rd2, %rd3;
  st.global.f32 [%rd4], %f1;
DONE:
  ret;
}

.visible .entry read_2d(.param .u64 out, .param .u32 w)
{
  .reg .b32 %r<5>;
  .reg .f32 %f<7>;
  .reg .b64 %rd<5>;
  ld.param.u64 %rd1, [out];
  ld.param.u32 %r1, [w];
  mov.u32 %r2, %tid.x;
  mov.u32 %r3, %tid.y;
  cvt.rn.f32.u32 %f5, %r2;
  add.f32 %f5, %f5, 0f3F000000;
  cvt.rn.f32.u32 %f6, %r3;
  add.f32 %f6, %f6, 0f3F000000;
  tex.2d.v4.f32.f32 {%f1, %f2, %f3, %f4}, [tex, {%f5, %f6}];
  mad.lo.u32 %r4, %r3, %r1, %r2;
  cvta.to.global.u64 %rd2, %rd1;
  mul.wide.u32 %rd3, %r4, 4;
  add.u64 %rd4, %rd2, %rd3;
  st.global.f32 [%rd4], %f1;
  ret;
}

.visible .entry write_surf(.param .u32 n)
{
  .reg .pred %p;
  .reg .b32 %r<5>;
  ld.param.u32 %r1, [n];
  mov.u32 %r2, %tid.x;
  setp.ge.u32 %p, %r2, %r1;
  @%p bra DONE;
  mul.lo.u32 %r3, %r2, 4;
  mul.lo.u32 %r4, %r2, 3;
  sust.b.1d.b32.trap [surf, {%r3}], {%r4};
DONE:
  ret;
}
)";

static CUstreamBatchMemOpParams write_op(bool wide, CUdeviceptr addr, unsigned long long value) {
    CUstreamBatchMemOpParams op;
    memset(&op, 0, sizeof op);
    op.operation = wide ? CU_STREAM_MEM_OP_WRITE_VALUE_64 : CU_STREAM_MEM_OP_WRITE_VALUE_32;
    op.writeValue.address = addr;
    if (wide)
        op.writeValue.value64 = value;
    else
        op.writeValue.value = (cuuint32_t)value;
    return op;
}

static CUstreamBatchMemOpParams wait_op(bool wide, CUdeviceptr addr, unsigned long long value) {
    CUstreamBatchMemOpParams op = write_op(wide, addr, value);
    op.operation = wide ? CU_STREAM_MEM_OP_WAIT_VALUE_64 : CU_STREAM_MEM_OP_WAIT_VALUE_32;
    op.waitValue.flags = CU_STREAM_WAIT_VALUE_EQ;
    return op;
}

static unsigned long long word(CUdeviceptr d, bool wide) {
    unsigned long long v = 0;
    cuMemcpyDtoH(&v, d, wide ? 8 : 4);
    return v;
}

static void batches(CUcontext ctx, CUstream s, CUdeviceptr d) {
    cuMemsetD8(d, 0, 4096);
    CUstreamBatchMemOpParams ops[5] = {write_op(false, d, 7), write_op(true, d + 8, 0x1122334455667788ull),
                                       {}, wait_op(false, d, 7), wait_op(true, d + 8, 0x1122334455667788ull)};
    ops[2].memoryBarrier.operation = CU_STREAM_MEM_OP_BARRIER;
    ops[2].memoryBarrier.flags = CU_STREAM_MEMORY_BARRIER_TYPE_GPU;
    CUresult r = cuStreamBatchMemOp(s, 5, ops, 0);
    CUresult sync = cuStreamSynchronize(s);
    check(r == CUDA_SUCCESS && sync == CUDA_SUCCESS && word(d, false) == 7 &&
              word(d + 8, true) == 0x1122334455667788ull,
          "cuStreamBatchMemOp_v2", "writes, barrier, waits: %d %d, values %llu %#llx", r, sync, word(d, false),
          word(d + 8, true));

    CUstreamBatchMemOpParams many[256];
    for (auto& op : many) op = write_op(false, d + 64, 1);
    r = cuStreamBatchMemOp(s, 256, many, 0);
    check(r != CUDA_SUCCESS, "cuStreamBatchMemOp_v2 (256 operations)", "refused: %d", r);
    cuStreamSynchronize(s);

    // Graph nodes.
    CUgraph g = nullptr;
    CUgraphNode node = nullptr;
    CUgraphExec exec = nullptr;
    CUstreamBatchMemOpParams node_ops[2] = {write_op(false, d + 128, 11), write_op(true, d + 136, 12)};
    CUDA_BATCH_MEM_OP_NODE_PARAMS p = {ctx, 2, node_ops, 0};
    r = cuGraphCreate(&g, 0);
    CUresult add = cuGraphAddBatchMemOpNode(&node, g, nullptr, 0, &p);
    check(r == CUDA_SUCCESS && add == CUDA_SUCCESS, "cuGraphAddBatchMemOpNode", "%d %d", r, add);
    CUDA_BATCH_MEM_OP_NODE_PARAMS back;
    memset(&back, 0, sizeof back);
    CUresult got = cuGraphBatchMemOpNodeGetParams(node, &back);
    check(got == CUDA_SUCCESS && back.count == 2 && back.paramArray &&
              back.paramArray[0].writeValue.address == d + 128 && back.paramArray[1].writeValue.value64 == 12,
          "cuGraphBatchMemOpNodeGetParams", "%d count %u", got, back.count);
    CUstreamBatchMemOpParams set_ops[1] = {write_op(false, d + 128, 21)};
    CUDA_BATCH_MEM_OP_NODE_PARAMS q = {ctx, 1, set_ops, 0};
    CUresult set = cuGraphBatchMemOpNodeSetParams(node, &q);
    CUresult inst = cuGraphInstantiate(&exec, g, 0);
    CUresult launch = cuGraphLaunch(exec, s);
    sync = cuStreamSynchronize(s);
    check(set == CUDA_SUCCESS && inst == CUDA_SUCCESS && launch == CUDA_SUCCESS && sync == CUDA_SUCCESS &&
              word(d + 128, false) == 21,
          "cuGraphBatchMemOpNodeSetParams", "set %d instantiate %d launch %d sync %d value %llu", set, inst,
          launch, sync, word(d + 128, false));
    set_ops[0] = write_op(false, d + 128, 31);
    set = cuGraphExecBatchMemOpNodeSetParams(exec, node, &q);
    launch = cuGraphLaunch(exec, s);
    sync = cuStreamSynchronize(s);
    check(set == CUDA_SUCCESS && launch == CUDA_SUCCESS && sync == CUDA_SUCCESS && word(d + 128, false) == 31,
          "cuGraphExecBatchMemOpNodeSetParams", "set %d launch %d value %llu", set, launch,
          word(d + 128, false));
    cuGraphExecDestroy(exec);
    cuGraphDestroy(g);
}

// Launch `f(out, n)` with n threads; whether `out` then holds `want`.
static bool read_back(CUfunction f, CUdeviceptr out, unsigned n, const float* want, CUstream s) {
    cuMemsetD32(out, 0, n);
    void* args[] = {&out, &n};
    CUresult r = cuLaunchKernel(f, 1, 1, 1, n, 1, 1, 0, s, args, nullptr);
    CUresult sync = cuStreamSynchronize(s);
    if (r != CUDA_SUCCESS || sync != CUDA_SUCCESS) {
        printf("  launch %d sync %d\n", r, sync);
        return false;
    }
    std::vector<float> got(n);
    cuMemcpyDtoH(got.data(), out, got.size() * 4);
    for (size_t i = 0; i < got.size(); i++)
        if (got[i] != want[i]) {
            printf("  element %zu: %g, not %g\n", i, got[i], want[i]);
            return false;
        }
    return true;
}

static void texrefs(CUstream s, CUdeviceptr out) {
    CUmodule mod = nullptr;
    CUresult r = cuModuleLoadData(&mod, kPtx);
    check(r == CUDA_SUCCESS, "cuModuleLoadData (.texref PTX)", "%d", r);
    if (r != CUDA_SUCCESS) return;
    CUfunction read_array = nullptr, read_linear = nullptr, read_2d = nullptr, write_surf = nullptr;
    cuModuleGetFunction(&read_array, mod, "read_array");
    cuModuleGetFunction(&read_linear, mod, "read_linear");
    cuModuleGetFunction(&read_2d, mod, "read_2d");
    cuModuleGetFunction(&write_surf, mod, "write_surf");
    CUtexref tex = nullptr, missing = nullptr;
    r = cuModuleGetTexRef(&tex, mod, "tex");
    check(r == CUDA_SUCCESS && tex, "cuModuleGetTexRef", "%d", r);
    r = cuModuleGetTexRef(&missing, mod, "nope");
    check(r == CUDA_ERROR_NOT_FOUND, "cuModuleGetTexRef (a name the module lacks)", "%d", r);
    if (!tex) return;

    // Every setting, read back.
    float border[4] = {1, 2, 3, 4}, border_back[4] = {};
    CUresult sets[] = {cuTexRefSetFormat(tex, CU_AD_FORMAT_FLOAT, 1),
                       cuTexRefSetAddressMode(tex, 0, CU_TR_ADDRESS_MODE_CLAMP),
                       cuTexRefSetAddressMode(tex, 1, CU_TR_ADDRESS_MODE_MIRROR),
                       cuTexRefSetFilterMode(tex, CU_TR_FILTER_MODE_POINT),
                       cuTexRefSetMipmapFilterMode(tex, CU_TR_FILTER_MODE_LINEAR),
                       cuTexRefSetMipmapLevelBias(tex, 0.5f),
                       cuTexRefSetMipmapLevelClamp(tex, 1.0f, 7.0f),
                       cuTexRefSetMaxAnisotropy(tex, 8),
                       cuTexRefSetBorderColor(tex, border),
                       cuTexRefSetFlags(tex, 0)};
    const char* set_names[] = {"cuTexRefSetFormat", "cuTexRefSetAddressMode", "cuTexRefSetAddressMode (dim 1)",
                               "cuTexRefSetFilterMode", "cuTexRefSetMipmapFilterMode",
                               "cuTexRefSetMipmapLevelBias", "cuTexRefSetMipmapLevelClamp",
                               "cuTexRefSetMaxAnisotropy", "cuTexRefSetBorderColor", "cuTexRefSetFlags"};
    for (size_t i = 0; i < sizeof sets / sizeof *sets; i++) check(sets[i] == CUDA_SUCCESS, set_names[i], "%d", sets[i]);
    CUarray_format format{};
    int channels = 0, aniso = 0;
    CUaddress_mode m0{}, m1{};
    CUfilter_mode filter{}, mfilter{};
    float bias = 0, lo = 0, hi = 0;
    unsigned flags = 99;
    r = cuTexRefGetFormat(&format, &channels, tex);
    check(r == CUDA_SUCCESS && format == CU_AD_FORMAT_FLOAT && channels == 1, "cuTexRefGetFormat", "%d %d %d", r,
          (int)format, channels);
    r = cuTexRefGetAddressMode(&m0, tex, 0);
    CUresult r1 = cuTexRefGetAddressMode(&m1, tex, 1);
    check(r == CUDA_SUCCESS && r1 == CUDA_SUCCESS && m0 == CU_TR_ADDRESS_MODE_CLAMP && m1 == CU_TR_ADDRESS_MODE_MIRROR,
          "cuTexRefGetAddressMode", "%d %d: %d %d", r, r1, (int)m0, (int)m1);
    r = cuTexRefGetFilterMode(&filter, tex);
    check(r == CUDA_SUCCESS && filter == CU_TR_FILTER_MODE_POINT, "cuTexRefGetFilterMode", "%d %d", r, (int)filter);
    r = cuTexRefGetMipmapFilterMode(&mfilter, tex);
    check(r == CUDA_SUCCESS && mfilter == CU_TR_FILTER_MODE_LINEAR, "cuTexRefGetMipmapFilterMode", "%d %d", r,
          (int)mfilter);
    r = cuTexRefGetMipmapLevelBias(&bias, tex);
    check(r == CUDA_SUCCESS && bias == 0.5f, "cuTexRefGetMipmapLevelBias", "%d %g", r, bias);
    r = cuTexRefGetMipmapLevelClamp(&lo, &hi, tex);
    check(r == CUDA_SUCCESS && lo == 1.0f && hi == 7.0f, "cuTexRefGetMipmapLevelClamp", "%d %g %g", r, lo, hi);
    r = cuTexRefGetMaxAnisotropy(&aniso, tex);
    check(r == CUDA_SUCCESS && aniso == 8, "cuTexRefGetMaxAnisotropy", "%d %d", r, aniso);
    r = cuTexRefGetBorderColor(border_back, tex);
    check(r == CUDA_SUCCESS && memcmp(border, border_back, sizeof border) == 0, "cuTexRefGetBorderColor",
          "%d %g %g %g %g", r, border_back[0], border_back[1], border_back[2], border_back[3]);
    r = cuTexRefGetFlags(&flags, tex);
    check(r == CUDA_SUCCESS && flags == 0, "cuTexRefGetFlags", "%d %u", r, flags);
    cuTexRefSetMaxAnisotropy(tex, 0);

    // Bound to an array, read by a kernel.
    const unsigned n = 64;
    std::vector<float> values(n * n);
    for (unsigned i = 0; i < values.size(); i++) values[i] = 0.25f * i + 1;
    CUDA_ARRAY_DESCRIPTOR ad = {n, 0, CU_AD_FORMAT_FLOAT, 1};
    CUarray arr = nullptr, got_arr = nullptr;
    r = cuArrayCreate(&arr, &ad);
    CUresult copy = cuMemcpyHtoA(arr, 0, values.data(), n * 4);
    CUresult bind = cuTexRefSetArray(tex, arr, CU_TRSA_OVERRIDE_FORMAT);
    CUresult get = cuTexRefGetArray(&got_arr, tex);
    check(r == CUDA_SUCCESS && copy == CUDA_SUCCESS && bind == CUDA_SUCCESS && get == CUDA_SUCCESS && got_arr == arr,
          "cuTexRefSetArray / cuTexRefGetArray", "create %d copy %d set %d get %d", r, copy, bind, get);
    check(read_back(read_array, out, n, values.data(), s), "texref read from an array (kernel)", "%u values", n);

    // Linear memory.
    CUdeviceptr lin = 0, got_lin = 0;
    cuMemAlloc(&lin, n * 4);
    cuMemcpyHtoD(lin, values.data(), n * 4);
    size_t offset = 99;
    bind = cuTexRefSetAddress(&offset, tex, lin, n * 4);
    get = cuTexRefGetAddress(&got_lin, tex);
    check(bind == CUDA_SUCCESS && offset == 0 && get == CUDA_SUCCESS && got_lin == lin,
          "cuTexRefSetAddress / cuTexRefGetAddress", "set %d offset %zu get %d", bind, offset, get);
    check(read_back(read_linear, out, n, values.data(), s), "texref read from linear memory (kernel)", "%u values",
          n);
    r = cuTexRefGetArray(&got_arr, tex);
    check(r != CUDA_SUCCESS, "cuTexRefGetArray (bound to linear memory)", "refused: %d", r);

    // Pitched memory, read in two dimensions.
    const unsigned w = 16, h = 8;
    CUdeviceptr pitched = 0;
    size_t pitch = 0;
    cuMemAllocPitch(&pitched, &pitch, w * 4, h, 4);
    CUDA_MEMCPY2D c2;
    memset(&c2, 0, sizeof c2);
    c2.srcMemoryType = CU_MEMORYTYPE_HOST;
    c2.srcHost = values.data();
    c2.srcPitch = w * 4;
    c2.dstMemoryType = CU_MEMORYTYPE_DEVICE;
    c2.dstDevice = pitched;
    c2.dstPitch = pitch;
    c2.WidthInBytes = w * 4;
    c2.Height = h;
    cuMemcpy2D(&c2);
    CUDA_ARRAY_DESCRIPTOR pd = {w, h, CU_AD_FORMAT_FLOAT, 1};
    bind = cuTexRefSetAddress2D(tex, &pd, pitched, pitch);
    check(bind == CUDA_SUCCESS, "cuTexRefSetAddress2D_v3", "%d (pitch %zu)", bind, pitch);
    {
        cuMemsetD32(out, 0, w * h);
        unsigned width = w;
        void* args[] = {&out, &width};
        r = cuLaunchKernel(read_2d, 1, 1, 1, w, h, 1, 0, s, args, nullptr);
        CUresult sync = cuStreamSynchronize(s);
        std::vector<float> got(w * h);
        cuMemcpyDtoH(got.data(), out, got.size() * 4);
        bool same = r == CUDA_SUCCESS && sync == CUDA_SUCCESS &&
                    memcmp(got.data(), values.data(), got.size() * 4) == 0;
        check(same, "texref read from pitched memory (kernel)", "launch %d sync %d", r, sync);
    }

    // A mipmapped array.
    CUDA_ARRAY3D_DESCRIPTOR md = {n, n, 0, CU_AD_FORMAT_FLOAT, 1, 0};
    CUmipmappedArray mip = nullptr, got_mip = nullptr;
    r = cuMipmappedArrayCreate(&mip, &md, 3);
    bind = cuTexRefSetMipmappedArray(tex, mip, CU_TRSA_OVERRIDE_FORMAT);
    get = cuTexRefGetMipmappedArray(&got_mip, tex);
    check(r == CUDA_SUCCESS && bind == CUDA_SUCCESS && get == CUDA_SUCCESS && got_mip == mip,
          "cuTexRefSetMipmappedArray / cuTexRefGetMipmappedArray", "create %d set %d get %d", r, bind, get);

    // cuParamSetTexRef (the one unit it takes).
    r = cuParamSetTexRef(read_array, CU_PARAM_TR_DEFAULT, tex);
    check(r == CUDA_SUCCESS, "cuParamSetTexRef", "%d", r);

    // A reference of the program's own.
    CUtexref own = nullptr;
    r = cuTexRefCreate(&own);
    CUresult set = own ? cuTexRefSetFilterMode(own, CU_TR_FILTER_MODE_LINEAR) : CUDA_ERROR_INVALID_VALUE;
    CUfilter_mode own_filter = CU_TR_FILTER_MODE_POINT;
    get = own ? cuTexRefGetFilterMode(&own_filter, own) : CUDA_ERROR_INVALID_VALUE;
    CUresult destroy = own ? cuTexRefDestroy(own) : CUDA_ERROR_INVALID_VALUE;
    check(r == CUDA_SUCCESS && set == CUDA_SUCCESS && get == CUDA_SUCCESS && own_filter == CU_TR_FILTER_MODE_LINEAR &&
              destroy == CUDA_SUCCESS,
          "cuTexRefCreate / cuTexRefDestroy", "create %d set %d get %d destroy %d", r, set, get, destroy);

    // A surface reference written by a kernel.
    CUsurfref surf = nullptr;
    r = cuModuleGetSurfRef(&surf, mod, "surf");
    check(r == CUDA_SUCCESS && surf, "cuModuleGetSurfRef", "%d", r);
    if (surf) {
        CUDA_ARRAY3D_DESCRIPTOR sd = {n, 0, 0, CU_AD_FORMAT_UNSIGNED_INT32, 1, CUDA_ARRAY3D_SURFACE_LDST};
        CUarray sarr = nullptr, got_sarr = nullptr;
        r = cuArray3DCreate(&sarr, &sd);
        set = cuSurfRefSetArray(surf, sarr, 0);
        get = cuSurfRefGetArray(&got_sarr, surf);
        check(r == CUDA_SUCCESS && set == CUDA_SUCCESS && get == CUDA_SUCCESS && got_sarr == sarr,
              "cuSurfRefSetArray / cuSurfRefGetArray", "create %d set %d get %d", r, set, get);
        unsigned count = n;
        void* args[] = {&count};
        r = cuLaunchKernel(write_surf, 1, 1, 1, n, 1, 1, 0, s, args, nullptr);
        CUresult sync = cuStreamSynchronize(s);
        std::vector<unsigned> got(n);
        cuMemcpyAtoH(got.data(), sarr, 0, n * 4);
        bool same = r == CUDA_SUCCESS && sync == CUDA_SUCCESS;
        for (unsigned i = 0; i < n && same; i++) same = got[i] == 3 * i;
        check(same, "surfref written by a kernel", "launch %d sync %d first %u %u", r, sync, got[1], got[2]);
    }
}

static void vmm(CUdevice dev) {
    CUmemAllocationProp p;
    memset(&p, 0, sizeof p);
    p.type = CU_MEM_ALLOCATION_TYPE_PINNED;
    p.location.type = CU_MEM_LOCATION_TYPE_DEVICE;
    p.location.id = dev;
    size_t g = 0;
    CUmemGenericAllocationHandle h = 0;
    CUdeviceptr at = 0;
    CUresult r = cuMemGetAllocationGranularity(&g, &p, CU_MEM_ALLOC_GRANULARITY_MINIMUM);
    r = r ? r : cuMemCreate(&h, g, &p, 0);
    r = r ? r : cuMemAddressReserve(&at, g, 0, 0, 0);
    r = r ? r : cuMemMap(at, g, 0, h, 0);
    CUmemAccessDesc a = {{CU_MEM_LOCATION_TYPE_DEVICE, dev}, CU_MEM_ACCESS_FLAGS_PROT_READWRITE};
    r = r ? r : cuMemSetAccess(at, g, &a, 1);
    unsigned long long flags = 0;
    CUresult get = cuMemGetAccess(&flags, &a.location, at);
    check(r == CUDA_SUCCESS && get == CUDA_SUCCESS && flags == CU_MEM_ACCESS_FLAGS_PROT_READWRITE,
          "cuMemGetAccess", "setup %d get %d flags %llu", r, get, flags);
    cuMemUnmap(at, g);
    cuMemAddressFree(at, g);
    cuMemRelease(h);
}

// The im2col encoders and cuTensorMapReplaceAddress (Hopper and newer take them; the
// wide encoding is for compute capability 10 and newer, so on older GPUs only its code
// is shown).
static void tensor_maps(CUdevice dev, CUdeviceptr d) {
    int major = 0;
    cuDeviceGetAttribute(&major, CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MAJOR, dev);
    alignas(64) CUtensorMap map, again, moved;
    cuuint64_t dims[4] = {16, 8, 8, 2}, strides[3] = {64, 512, 4096};
    int lower[2] = {0, 0}, upper[2] = {0, 0};
    cuuint32_t elements[4] = {1, 1, 1, 1};
    CUresult r = cuTensorMapEncodeIm2col(&map, CU_TENSOR_MAP_DATA_TYPE_FLOAT32, 4, (void*)d, dims, strides, lower,
                                         upper, 16, 8, elements, CU_TENSOR_MAP_INTERLEAVE_NONE,
                                         CU_TENSOR_MAP_SWIZZLE_NONE, CU_TENSOR_MAP_L2_PROMOTION_NONE,
                                         CU_TENSOR_MAP_FLOAT_OOB_FILL_NONE);
    check(r == CUDA_SUCCESS, "cuTensorMapEncodeIm2col", "%d", r);
    again = map;
    moved = map;
    CUresult same = cuTensorMapReplaceAddress(&again, (void*)d);
    CUresult other = cuTensorMapReplaceAddress(&moved, (void*)(d + 4096));
    check(same == CUDA_SUCCESS && other == CUDA_SUCCESS && memcmp(&again, &map, sizeof map) == 0 &&
              memcmp(&moved, &map, sizeof map) != 0,
          "cuTensorMapReplaceAddress", "%d %d (same address: same map; another: another)", same, other);
    CUresult wide = cuTensorMapEncodeIm2colWide(&map, CU_TENSOR_MAP_DATA_TYPE_FLOAT32, 4, (void*)d, dims, strides, 0,
                                                0, 16, 8, elements, CU_TENSOR_MAP_INTERLEAVE_NONE,
                                                CU_TENSOR_MAP_IM2COL_WIDE_MODE_W, CU_TENSOR_MAP_SWIZZLE_128B,
                                                CU_TENSOR_MAP_L2_PROMOTION_NONE, CU_TENSOR_MAP_FLOAT_OOB_FILL_NONE);
    check(major < 10 || wide == CUDA_SUCCESS, "cuTensorMapEncodeIm2colWide", "%d (compute capability %d)", wide,
          major);
}

// A batch decompression: served where the GPU has a decompression engine (its
// algorithm mask not 0); elsewhere (Hopper) its refusal's code is shown.
static void decompress(CUdevice dev, CUstream s, CUdeviceptr d) {
    int mask = 0;
    CUresult a = cuDeviceGetAttribute(&mask, CU_DEVICE_ATTRIBUTE_MEM_DECOMPRESS_ALGORITHM_MASK, dev);
    CUmemDecompressParams p;
    memset(&p, 0, sizeof p);
    // A deflate stream of one stored block holding "vmcuda!!" (8 bytes).
    const unsigned char stored[] = {0x01, 0x08, 0x00, 0xf7, 0xff, 'v', 'm', 'c', 'u', 'd', 'a', '!', '!'};
    cuMemcpyHtoD(d + 2048, stored, sizeof stored);
    cuMemsetD8(d + 3072, 0, 64);
    p.srcNumBytes = sizeof stored;
    p.dstNumBytes = 8;
    p.src = (const void*)(d + 2048);
    p.dst = (void*)(d + 3072);
    p.dstActBytes = (cuuint32_t*)(d + 3584);
    p.algo = CU_MEM_DECOMPRESS_ALGORITHM_DEFLATE;
    size_t index = 7;
    CUresult r = cuMemBatchDecompressAsync(&p, 1, 0, &index, s);
    CUresult sync = cuStreamSynchronize(s);
    char out[9] = {};
    cuMemcpyDtoH(out, d + 3072, 8);
    bool engine = a == CUDA_SUCCESS && (mask & CU_MEM_DECOMPRESS_ALGORITHM_DEFLATE);
    bool ok = engine ? r == CUDA_SUCCESS && sync == CUDA_SUCCESS && memcmp(out, "vmcuda!!", 8) == 0
                     : r != CUDA_SUCCESS;
    check(ok, "cuMemBatchDecompressAsync", "%d (algorithm mask %d, attribute %d)", r, mask, a);
}

static void sparse(CUstream s) {
    CUDA_ARRAY3D_DESCRIPTOR d = {64, 64, 0, CU_AD_FORMAT_FLOAT, 1, 0};
    CUarray arr = nullptr;
    cuArray3DCreate(&arr, &d);
    CUarrayMapInfo info;
    memset(&info, 0, sizeof info);
    info.resourceType = CU_RESOURCE_TYPE_ARRAY;
    info.resource.array = arr;
    info.subresourceType = CU_ARRAY_SPARSE_SUBRESOURCE_TYPE_SPARSE_LEVEL;
    info.memOperationType = CU_MEM_OPERATION_TYPE_UNMAP;
    info.memHandleType = CU_MEM_HANDLE_TYPE_GENERIC;
    info.deviceBitMask = 1;
    CUresult r = cuMemMapArrayAsync(&info, 1, s);
    check(r != CUDA_SUCCESS, "cuMemMapArrayAsync (an array that is not sparse)", "refused: %d", r);
    cuArrayDestroy(arr);
}

int main() {
    CUdevice dev = 0;
    CUcontext ctx = nullptr;
    CUstream s = nullptr;
    CUdeviceptr d = 0, out = 0;
    CUresult r = cuInit(0);
    r = r ? r : cuDeviceGet(&dev, 0);
    r = r ? r : cuDevicePrimaryCtxRetain(&ctx, dev);
    r = r ? r : cuCtxSetCurrent(ctx);
    r = r ? r : cuStreamCreate(&s, CU_STREAM_NON_BLOCKING);
    r = r ? r : cuMemAlloc(&d, 4096);
    r = r ? r : cuMemAlloc(&out, 64 * 64 * 4);
    check(r == CUDA_SUCCESS, "setup", "%d", r);
    if (r != CUDA_SUCCESS) return 1;
    batches(ctx, s, d);
    texrefs(s, out);
    vmm(dev);
    tensor_maps(dev, d);
    decompress(dev, s, d);
    sparse(s);
    printf("%s: %d failed\n", failures ? "FAIL" : "PASS", failures);
    return failures ? 1 : 0;
}
