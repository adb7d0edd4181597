// tests/gpu/legacy_driver.cu: the driver's older entry points on a real GPU, with real
// kernels, self-checking: the launch ABI before cuLaunchKernel (cuFuncSetBlockShape,
// cuFuncSetSharedSize, cuParamSetSize/i/f/v, cuLaunch, cuLaunchGrid, cuLaunchGridAsync),
// cuLaunchCooperativeKernelMultiDevice (a grid-wide sync inside), cuCtxAttach and
// cuCtxDetach, cuCtxRecordEvent and cuCtxWaitEvent (against a kernel that spins),
// cuCtxGetExecAffinity, cuDeviceGetLuid, and the copies cuMemcpyAtoA,
// cuMemcpyHtoAAsync, cuMemcpyAtoHAsync (and their per-thread variants, from
// cuGetProcAddress), cuMemcpy3DPeer and cuMemcpy3DPeerAsync (between two devices'
// contexts where there are two).
//
// One line per check: "PASS <check>: <detail>" or "FAIL <check>: <detail>"; the details
// hold nothing that differs between runs, so tests/gpu/run-legacy.sh compares the
// native and bridged lines. Exits 1 on any FAIL. The runtime is used only to start and
// to find the kernels compiled here (cudaGetFuncBySymbol); every call checked is the
// driver's.
//
//   nvcc -cudart shared -arch=sm_90 -O2 -o legacy_driver tests/gpu/legacy_driver.cu -lcuda
#define CUDA_ENABLE_DEPRECATED  // the functions checked here are deprecated
#include <cooperative_groups.h>
#include <cuda.h>
#include <cuda_runtime.h>
#include <stdarg.h>
#include <stdio.h>
#include <string.h>

namespace cg = cooperative_groups;

static int failures;

static const char *name_of(CUresult r) {
    const char *s = "?";
    if (cuGetErrorName(r, &s) != CUDA_SUCCESS) s = "an unknown code";
    return s;
}

static void report(const char *check, bool ok, const char *fmt, ...) __attribute__((format(printf, 3, 4)));
static void report(const char *check, bool ok, const char *fmt, ...) {
    char detail[256];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(detail, sizeof detail, fmt, ap);
    va_end(ap);
    printf("%s %s: %s\n", ok ? "PASS" : "FAIL", check, detail);
    if (!ok) failures++;
}

// A call that must answer `want`.
static bool call(const char *check, CUresult r, CUresult want = CUDA_SUCCESS) {
    report(check, r == want, "%s%s%s", name_of(r), r == want ? "" : ", want ", r == want ? "" : name_of(want));
    return r == want;
}

struct Tag {
    unsigned char b[4];
};

// Every thread of the grid writes its slot: the parameters' sum, plus 1000000 if the
// dynamic shared memory is not `want_shared` bytes.
__global__ void legacy_fill(int *out, float f, int i, Tag t, unsigned want_shared) {
    extern __shared__ int scratch[];
    unsigned dyn;
    asm volatile("mov.u32 %0, %%dynamic_smem_size;" : "=r"(dyn));
    unsigned threads = blockDim.x * blockDim.y * blockDim.z;
    unsigned block = blockIdx.y * gridDim.x + blockIdx.x;
    unsigned thread = (threadIdx.z * blockDim.y + threadIdx.y) * blockDim.x + threadIdx.x;
    if (dyn > 0) scratch[0] = 0;
    out[block * threads + thread] = (int)(f * 2.0f) + i + t.b[0] + t.b[3] + (dyn == want_shared ? 0 : 1000000);
}

// A grid-wide barrier: every block counts itself before it, block 0 reads the count
// after it.
__global__ void coop_count(int *counter, int *seen) {
    cg::grid_group grid = cg::this_grid();
    if (threadIdx.x == 0) atomicAdd(counter, 1);
    grid.sync();
    if (blockIdx.x == 0 && threadIdx.x == 0) *seen = atomicAdd(counter, 0);
}

// Spins for `cycles` clocks, then sets the flag.
__global__ void spin(int *flag, long long cycles) {
    long long start = clock64();
    while (clock64() - start < cycles) {
    }
    *(volatile int *)flag = 1;
}

__global__ void read_flag(const int *flag, int *out) { *out = *(volatile const int *)flag; }

static CUfunction kernel(const void *symbol) {
    cudaFunction_t f = NULL;
    if (cudaGetFuncBySymbol(&f, symbol) != cudaSuccess) return NULL;
    return (CUfunction)f;
}

static const int kSentinel = -7;

// The slots a launch of `count` threads should have written, and the one after.
static bool filled(CUdeviceptr out, int count, int want, int *first_bad) {
    static int host[1 << 14];
    cuMemcpyDtoH(host, out, (count + 1) * sizeof(int));
    for (int k = 0; k < count; k++)
        if (host[k] != want) {
            *first_bad = host[k];
            return false;
        }
    *first_bad = host[count];
    return host[count] == kSentinel;
}

static void reset(CUdeviceptr out) { cuMemsetD32(out, (unsigned)kSentinel, 1 << 14); }

static void legacy_launches(CUfunction f, CUstream stream) {
    CUdeviceptr out;
    cuMemAlloc(&out, (1 << 14) * sizeof(int));
    float two_and_a_half = 2.5f;
    int seven = 7;
    Tag tag = {{1, 2, 3, 4}};
    unsigned shared = 128;
    // legacy_fill(int*, float, int, Tag, unsigned): offsets 0, 8, 12, 16, 20; 24 bytes.
    call("cuFuncSetBlockShape", cuFuncSetBlockShape(f, 32, 2, 1));
    call("cuFuncSetSharedSize", cuFuncSetSharedSize(f, shared));
    call("cuParamSetSize", cuParamSetSize(f, 24));
    call("cuParamSetv(pointer)", cuParamSetv(f, 0, &out, sizeof out));
    call("cuParamSetf", cuParamSetf(f, 8, two_and_a_half));
    call("cuParamSeti", cuParamSeti(f, 12, seven));
    call("cuParamSetv(struct)", cuParamSetv(f, 16, &tag, sizeof tag));
    call("cuParamSeti(unsigned)", cuParamSeti(f, 20, shared));
    int want = 5 + 7 + 1 + 4, bad = 0;

    reset(out);
    if (call("cuLaunchGrid", cuLaunchGrid(f, 3, 2))) {
        cuCtxSynchronize();
        bool ok = filled(out, 3 * 2 * 64, want, &bad);
        report("cuLaunchGrid(3x2 blocks of 32x2, 128 shared bytes) ran", ok, ok ? "every slot" : "slot value %d", bad);
    }
    reset(out);
    if (call("cuLaunch", cuLaunch(f))) {
        cuCtxSynchronize();
        bool ok = filled(out, 64, want, &bad);
        report("cuLaunch(one block) ran", ok, ok ? "every slot" : "slot value %d", bad);
    }
    reset(out);
    if (call("cuLaunchGridAsync", cuLaunchGridAsync(f, 2, 1, stream))) {
        cuStreamSynchronize(stream);
        bool ok = filled(out, 2 * 64, want, &bad);
        report("cuLaunchGridAsync(2x1 blocks) ran", ok, ok ? "every slot" : "slot value %d", bad);
    }
    // A smaller shape, another value: the function keeps what was set last.
    call("cuFuncSetBlockShape(8x1x1)", cuFuncSetBlockShape(f, 8, 1, 1));
    call("cuParamSeti(again)", cuParamSeti(f, 12, 100));
    reset(out);
    if (call("cuLaunchGrid(after changes)", cuLaunchGrid(f, 1, 1))) {
        cuCtxSynchronize();
        bool ok = filled(out, 8, want - 7 + 100, &bad);
        report("cuLaunchGrid ran the new shape and value", ok, ok ? "8 slots" : "slot value %d", bad);
    }
    // NVIDIA's driver takes parameters past the size (measured on the H200, 2026-12-03).
    call("cuParamSeti(past the size)", cuParamSeti(f, 24, 1));
    call("cuParamSetv(past the end)", cuParamSetv(f, 28, &tag, sizeof tag));
    call("cuFuncSetBlockShape(0 threads)", cuFuncSetBlockShape(f, 0, 1, 1), CUDA_ERROR_INVALID_VALUE);
    call("cuLaunchGrid(0 blocks)", cuLaunchGrid(f, 0, 1), CUDA_ERROR_INVALID_VALUE);
    call("cuFuncSetBlockShape(NULL)", cuFuncSetBlockShape(NULL, 1, 1, 1), CUDA_ERROR_INVALID_HANDLE);
    call("cuFuncSetSharedSize(NULL)", cuFuncSetSharedSize(NULL, 0), CUDA_ERROR_INVALID_HANDLE);
    call("cuParamSetSize(NULL)", cuParamSetSize(NULL, 4), CUDA_ERROR_INVALID_HANDLE);
    call("cuParamSetf(NULL)", cuParamSetf(NULL, 0, 1.0f), CUDA_ERROR_INVALID_HANDLE);
    call("cuLaunch(NULL)", cuLaunch(NULL), CUDA_ERROR_INVALID_HANDLE);
    call("cuLaunchGridAsync(NULL)", cuLaunchGridAsync(NULL, 1, 1, stream), CUDA_ERROR_INVALID_HANDLE);
    cuMemFree(out);
}

// One cooperative launch per device (up to two), each on a stream of its device.
static void multi_device(int devices) {
    int n = devices > 2 ? 2 : devices;
    CUDA_LAUNCH_PARAMS p[2];
    CUdeviceptr counter[2], seen[2];
    CUstream streams[2];
    void *args[2][2];
    CUcontext ctx[2];
    int blocks = 0;
    for (int d = 0; d < n; d++) {
        cudaSetDevice(d);
        cudaFree(0);
        cuCtxGetCurrent(&ctx[d]);
        CUfunction f = kernel((const void *)coop_count);
        int per_sm = 0, sms = 0;
        cuOccupancyMaxActiveBlocksPerMultiprocessor(&per_sm, f, 128, 0);
        cuDeviceGetAttribute(&sms, CU_DEVICE_ATTRIBUTE_MULTIPROCESSOR_COUNT, d);
        // The same shape everywhere: co-resident on the smallest device.
        int fit = per_sm * sms;
        blocks = d == 0 || fit < blocks ? fit : blocks;
        cuMemAlloc(&counter[d], sizeof(int));
        cuMemAlloc(&seen[d], sizeof(int));
        cuMemsetD32(counter[d], 0, 1);
        cuMemsetD32(seen[d], 0, 1);
        cuStreamCreate(&streams[d], CU_STREAM_NON_BLOCKING);
        args[d][0] = &counter[d];
        args[d][1] = &seen[d];
        memset(&p[d], 0, sizeof p[d]);
        p[d].function = f;
        p[d].blockDimX = 128;
        p[d].blockDimY = p[d].blockDimZ = 1;
        p[d].gridDimY = p[d].gridDimZ = 1;
        p[d].hStream = streams[d];
        p[d].kernelParams = args[d];
    }
    if (blocks > 64) blocks = 64;
    for (int d = 0; d < n; d++) p[d].gridDimX = blocks;
    cudaSetDevice(0);
    cuCtxSetCurrent(ctx[0]);
    bool launched = call("cuLaunchCooperativeKernelMultiDevice", cuLaunchCooperativeKernelMultiDevice(p, n, 0));
    for (int d = 0; d < n; d++) {
        cuCtxSetCurrent(ctx[d]);
        cuStreamSynchronize(streams[d]);
        int got = 0;
        cuMemcpyDtoH(&got, seen[d], sizeof got);
        if (launched)
            report(d == 0 ? "cuLaunchCooperativeKernelMultiDevice(the grid synced, device 0)"
                          : "cuLaunchCooperativeKernelMultiDevice(the grid synced, device 1)",
                   got == blocks, got == blocks ? "every block counted before the barrier" : "%d of %d", got, blocks);
        cuMemsetD32(counter[d], 0, 1);
    }
    cuCtxSetCurrent(ctx[0]);
    call("cuLaunchCooperativeKernelMultiDevice(no pre/post sync)",
         cuLaunchCooperativeKernelMultiDevice(p, n,
                                              CUDA_COOPERATIVE_LAUNCH_MULTI_DEVICE_NO_PRE_LAUNCH_SYNC |
                                                  CUDA_COOPERATIVE_LAUNCH_MULTI_DEVICE_NO_POST_LAUNCH_SYNC));
    for (int d = 0; d < n; d++) {
        cuCtxSetCurrent(ctx[d]);
        cuStreamSynchronize(streams[d]);
    }
    cuCtxSetCurrent(ctx[0]);
    call("cuLaunchCooperativeKernelMultiDevice(unknown flag)", cuLaunchCooperativeKernelMultiDevice(p, n, 4),
         CUDA_ERROR_INVALID_VALUE);
    call("cuLaunchCooperativeKernelMultiDevice(no launches)", cuLaunchCooperativeKernelMultiDevice(p, 0, 0),
         CUDA_ERROR_INVALID_VALUE);
    for (int d = 0; d < n; d++) {
        cuCtxSetCurrent(ctx[d]);
        cuStreamDestroy(streams[d]);
        cuMemFree(counter[d]);
        cuMemFree(seen[d]);
    }
    cuCtxSetCurrent(ctx[0]);
}

static void contexts(CUcontext ctx, CUdevice dev) {
    CUcontext attached = NULL;
    call("cuCtxAttach", cuCtxAttach(&attached, 0));
    report("cuCtxAttach passes back the current context", attached == ctx, "%s",
           attached == ctx ? "same handle" : "another handle");
    call("cuCtxAttach(flags 1)", cuCtxAttach(&attached, 1), CUDA_ERROR_INVALID_VALUE);
    call("cuCtxDetach", cuCtxDetach(attached));
    CUcontext now = NULL;
    cuCtxGetCurrent(&now);
    CUdeviceptr probe;
    CUresult r = cuMemAlloc(&probe, 256);
    report("cuCtxDetach of an attached count leaves the context", now == ctx && r == CUDA_SUCCESS,
           "current %s, cuMemAlloc %s", now == ctx ? "same" : "other", name_of(r));
    if (r == CUDA_SUCCESS) cuMemFree(probe);

    // cuCtxRecordEvent captures a stream's spinning kernel; cuCtxWaitEvent holds
    // another stream behind an event recorded after it.
    CUfunction spin_f = kernel((const void *)spin), read_f = kernel((const void *)read_flag);
    CUdeviceptr flag, out;
    cuMemAlloc(&flag, sizeof(int));
    cuMemAlloc(&out, sizeof(int));
    CUstream s1, s2;
    cuStreamCreate(&s1, CU_STREAM_NON_BLOCKING);
    cuStreamCreate(&s2, CU_STREAM_NON_BLOCKING);
    CUevent ev;
    cuEventCreate(&ev, CU_EVENT_DISABLE_TIMING);
    int clock_khz = 0;
    cuDeviceGetAttribute(&clock_khz, CU_DEVICE_ATTRIBUTE_CLOCK_RATE, dev);
    long long cycles = (long long)clock_khz * 500;  // about half a second
    void *spin_args[] = {&flag, &cycles};
    void *read_args[] = {&flag, &out};

    cuMemsetD32(flag, 0, 1);
    cuLaunchKernel(spin_f, 1, 1, 1, 1, 1, 1, 0, s1, spin_args, NULL);
    if (call("cuCtxRecordEvent", cuCtxRecordEvent(ctx, ev))) {
        CUresult q = cuEventQuery(ev);
        report("cuCtxRecordEvent captures a spinning kernel of another stream", q == CUDA_ERROR_NOT_READY,
               "cuEventQuery at once: %s", name_of(q));
        cuEventSynchronize(ev);
        int f = 0;
        cuMemcpyDtoH(&f, flag, sizeof f);
        report("cuEventSynchronize after cuCtxRecordEvent waited for it", f == 1, "flag %d", f);
    }

    cuMemsetD32(flag, 0, 1);
    cuMemsetD32(out, 0, 1);
    cuCtxSynchronize();
    cuLaunchKernel(spin_f, 1, 1, 1, 1, 1, 1, 0, s1, spin_args, NULL);
    cuEventRecord(ev, s1);
    if (call("cuCtxWaitEvent", cuCtxWaitEvent(ctx, ev))) {
        cuLaunchKernel(read_f, 1, 1, 1, 1, 1, 1, 0, s2, read_args, NULL);
        cuStreamSynchronize(s2);
        int seen = 0;
        cuMemcpyDtoH(&seen, out, sizeof seen);
        report("cuCtxWaitEvent holds later work of another stream", seen == 1, "the reader saw flag %d", seen);
    }
    cuCtxSynchronize();
    cuEventDestroy(ev);
    cuStreamDestroy(s1);
    cuStreamDestroy(s2);
    cuMemFree(flag);
    cuMemFree(out);

    CUexecAffinityParam affinity;
    memset(&affinity, 0, sizeof affinity);
    r = cuCtxGetExecAffinity(&affinity, CU_EXEC_AFFINITY_TYPE_SM_COUNT);
    int sms = 0;
    cuDeviceGetAttribute(&sms, CU_DEVICE_ATTRIBUTE_MULTIPROCESSOR_COUNT, dev);
    if (r == CUDA_SUCCESS)
        report("cuCtxGetExecAffinity(SM_COUNT)", affinity.param.smCount.val == (unsigned)sms, "%s, %s",
               name_of(r), affinity.param.smCount.val == (unsigned)sms ? "the device's SM count" : "another count");
    else
        report("cuCtxGetExecAffinity(SM_COUNT)", r == CUDA_ERROR_UNSUPPORTED_EXEC_AFFINITY, "%s", name_of(r));
    call("cuCtxGetExecAffinity(NULL)", cuCtxGetExecAffinity(NULL, CU_EXEC_AFFINITY_TYPE_SM_COUNT),
         CUDA_ERROR_INVALID_VALUE);

    char luid[8];
    memset(luid, 0x5a, sizeof luid);
    unsigned mask = 0x5a5a5a5a;
    r = cuDeviceGetLuid(luid, &mask, dev);
    bool untouched = mask == 0x5a5a5a5a && luid[0] == 0x5a && luid[7] == 0x5a;
    // Linux has no LUIDs: the driver answers CUDA_ERROR_NOT_SUPPORTED and writes nothing.
    report("cuDeviceGetLuid", r == CUDA_ERROR_NOT_SUPPORTED && untouched, "%s, outputs %s", name_of(r),
           untouched ? "untouched" : "written");
    call("cuDeviceGetLuid(NULL)", cuDeviceGetLuid(NULL, &mask, dev), CUDA_ERROR_INVALID_VALUE);
    call("cuDeviceGetLuid(no such device)", cuDeviceGetLuid(luid, &mask, 999), CUDA_ERROR_INVALID_DEVICE);
}

static void *proc(const char *name) {
    void *f = NULL;
    CUdriverProcAddressQueryResult status;
    CUresult r = cuGetProcAddress(name, &f, 13000, CU_GET_PROC_ADDRESS_PER_THREAD_DEFAULT_STREAM, &status);
    char check[96];
    snprintf(check, sizeof check, "cuGetProcAddress(%s, per-thread)", name);
    report(check, r == CUDA_SUCCESS && f != NULL && status == CU_GET_PROC_ADDRESS_SUCCESS, "%s", name_of(r));
    return f;
}

static void array_copies(CUstream stream) {
    // 1D arrays of 64 elements of 4 bytes ("rows" below: 16 elements).
    CUDA_ARRAY_DESCRIPTOR d;
    d.Width = 64;
    d.Height = 0;
    d.Format = CU_AD_FORMAT_UNSIGNED_INT32;
    d.NumChannels = 1;
    // A 2D array of 16 x 4: NVIDIA's driver takes these 1D copies within its first row
    // only (measured on the H200, 2026-12-03).
    CUDA_ARRAY_DESCRIPTOR d2 = d;
    d2.Width = 16;
    d2.Height = 4;
    CUarray c;
    cuArrayCreate(&c, &d2);
    unsigned row[16] = {0};
    call("cuMemcpyHtoAAsync(across a 2D array's rows)", cuMemcpyHtoAAsync(c, 0, row, 128, stream),
          CUDA_ERROR_INVALID_VALUE);
    call("cuMemcpyAtoHAsync(across a 2D array's rows)", cuMemcpyAtoHAsync(row, c, 32, 64, stream),
          CUDA_ERROR_INVALID_VALUE);
    call("cuMemcpyAtoA(across a 2D array's rows)", cuMemcpyAtoA(c, 0, c, 64, 64), CUDA_ERROR_INVALID_VALUE);
    call("cuMemcpyHtoAAsync(a 2D array's first row)", cuMemcpyHtoAAsync(c, 0, row, 64, stream));
    cuStreamSynchronize(stream);
    cuArrayDestroy(c);
    CUarray a, b;
    cuArrayCreate(&a, &d);
    cuArrayCreate(&b, &d);
    unsigned src[64], got[64], zero[64];
    for (int i = 0; i < 64; i++) src[i] = 1000 + i;
    memset(zero, 0, sizeof zero);
    call("cuMemcpyHtoAAsync", cuMemcpyHtoAAsync(a, 0, src, sizeof src, stream));
    cuMemcpyHtoA(b, 0, zero, sizeof zero);
    cuStreamSynchronize(stream);
    cuMemcpyAtoH(got, a, 0, sizeof got);
    report("cuMemcpyHtoAAsync moved the bytes", memcmp(got, src, sizeof src) == 0, "64 elements");
    // Two whole rows from a's second row to b's third.
    call("cuMemcpyAtoA(two rows)", cuMemcpyAtoA(b, 128, a, 64, 128));
    memset(got, 0xff, sizeof got);
    call("cuMemcpyAtoHAsync", cuMemcpyAtoHAsync(got, b, 0, sizeof got, stream));
    cuStreamSynchronize(stream);
    bool ok = true;
    for (int i = 0; i < 64; i++) ok &= got[i] == (i >= 32 ? 1000u + i - 16 : 0u);
    report("cuMemcpyAtoA and cuMemcpyAtoHAsync moved the rows asked for", ok, "rows 2-3 of b");
    call("cuMemcpyAtoA(within a row)", cuMemcpyAtoA(b, 4, a, 8, 8));
    cuMemcpyAtoH(got, b, 0, 16);
    ok = got[0] == 0 && got[1] == 1002 && got[2] == 1003 && got[3] == 0;
    report("cuMemcpyAtoA within a row", ok, "elements 1-2 of b");

    typedef CUresult (*htoa_t)(CUarray, size_t, const void *, size_t, CUstream);
    typedef CUresult (*atoh_t)(void *, CUarray, size_t, size_t, CUstream);
    typedef CUresult (*atoa_t)(CUarray, size_t, CUarray, size_t, size_t);
    htoa_t htoa = (htoa_t)proc("cuMemcpyHtoAAsync");
    atoh_t atoh = (atoh_t)proc("cuMemcpyAtoHAsync");
    atoa_t atoa = (atoa_t)proc("cuMemcpyAtoA");
    if (htoa && atoh && atoa) {
        for (int i = 0; i < 64; i++) src[i] = 5000 + i;
        call("cuMemcpyHtoAAsync_v2_ptsz", htoa(a, 0, src, sizeof src, NULL));
        call("cuMemcpyAtoA_v2_ptds", atoa(b, 0, a, 0, sizeof src));
        memset(got, 0, sizeof got);
        call("cuMemcpyAtoHAsync_v2_ptsz", atoh(got, b, 0, sizeof got, NULL));
        cuStreamSynchronize(CU_STREAM_PER_THREAD);
        report("the per-thread array copies moved the bytes", memcmp(got, src, sizeof src) == 0, "64 elements");
    }
    cuArrayDestroy(a);
    cuArrayDestroy(b);
}

// cuMemcpy3DPeer: a 16-byte x 3 x 2 box from device 0's buffer to device `peer`'s (the
// same device with one GPU).
static void peer_copies(CUcontext c0, CUcontext cp, CUstream stream) {
    CUdeviceptr x, y;
    cuCtxSetCurrent(c0);
    cuMemAlloc(&x, 4096);
    cuCtxSetCurrent(cp);
    cuMemAlloc(&y, 4096);
    cuMemsetD8(y, 0, 4096);
    cuCtxSynchronize();
    cuCtxSetCurrent(c0);
    static unsigned char host[4096], back[4096];
    for (int i = 0; i < 4096; i++) host[i] = (unsigned char)(i * 7 + 3);
    cuMemcpyHtoD(x, host, sizeof host);
    CUDA_MEMCPY3D_PEER p;
    memset(&p, 0, sizeof p);
    p.srcMemoryType = CU_MEMORYTYPE_DEVICE;
    p.srcDevice = x;
    p.srcContext = c0;
    p.srcPitch = 64;
    p.srcHeight = 4;
    p.srcXInBytes = 8;
    p.dstMemoryType = CU_MEMORYTYPE_DEVICE;
    p.dstDevice = y;
    p.dstContext = cp;
    p.dstPitch = 32;
    p.dstHeight = 3;
    p.WidthInBytes = 16;
    p.Height = 3;
    p.Depth = 2;
    const char *what = c0 == cp ? "one context" : "two devices";
    char check[96];
    snprintf(check, sizeof check, "cuMemcpy3DPeer(%s)", what);
    if (call(check, cuMemcpy3DPeer(&p))) {
        cuMemcpyDtoH(back, y, sizeof back);
        bool ok = true;
        for (int z = 0; z < 2; z++)
            for (int r = 0; r < 3; r++)
                for (int c = 0; c < 16; c++) ok &= back[z * 96 + r * 32 + c] == host[z * 256 + r * 64 + 8 + c];
        report("cuMemcpy3DPeer moved the box", ok, "%s", what);
    }
    p.dstXInBytes = 16;
    snprintf(check, sizeof check, "cuMemcpy3DPeerAsync(%s)", what);
    if (call(check, cuMemcpy3DPeerAsync(&p, stream))) {
        cuStreamSynchronize(stream);
        cuMemcpyDtoH(back, y, sizeof back);
        bool ok = back[16] == host[8] && back[96 + 32 + 16 + 15] == host[256 + 64 + 8 + 15];
        report("cuMemcpy3DPeerAsync moved the box", ok, "%s", what);
    }
    typedef CUresult (*peer_t)(const CUDA_MEMCPY3D_PEER *);
    typedef CUresult (*peer_async_t)(const CUDA_MEMCPY3D_PEER *, CUstream);
    peer_t peer_ptds = (peer_t)proc("cuMemcpy3DPeer");
    peer_async_t peer_ptsz = (peer_async_t)proc("cuMemcpy3DPeerAsync");
    if (peer_ptds && peer_ptsz) {
        p.dstXInBytes = 0;
        cuMemsetD8(y, 0, 4096);
        call("cuMemcpy3DPeer_ptds", peer_ptds(&p));
        cuMemcpyDtoH(back, y, 16);
        report("cuMemcpy3DPeer_ptds moved the box", memcmp(back, host + 8, 16) == 0, "first row");
        p.dstXInBytes = 16;
        call("cuMemcpy3DPeerAsync_ptsz", peer_ptsz(&p, NULL));
        cuStreamSynchronize(CU_STREAM_PER_THREAD);
        cuMemcpyDtoH(back, y, 32);
        report("cuMemcpy3DPeerAsync_ptsz moved the box", memcmp(back + 16, host + 8, 16) == 0, "first row");
    }
    cuMemFree(x);
    cuCtxSetCurrent(cp);
    cuMemFree(y);
    cuCtxSetCurrent(c0);
}

int main() {
    if (cudaFree(0) != cudaSuccess) {
        printf("FAIL start: no device\n");
        return 1;
    }
    CUcontext ctx;
    CUdevice dev;
    cuCtxGetCurrent(&ctx);
    cuCtxGetDevice(&dev);
    int devices = 0;
    cuDeviceGetCount(&devices);
    CUfunction fill = kernel((const void *)legacy_fill);
    if (!fill || !kernel((const void *)coop_count) || !kernel((const void *)spin)) {
        printf("FAIL start: cudaGetFuncBySymbol\n");
        return 1;
    }
    CUstream stream;
    cuStreamCreate(&stream, CU_STREAM_NON_BLOCKING);
    legacy_launches(fill, stream);
    multi_device(devices);
    contexts(ctx, dev);
    array_copies(stream);
    CUcontext peer = ctx;
    if (devices > 1) {
        cudaSetDevice(1);
        cudaFree(0);
        cuCtxGetCurrent(&peer);
        cudaSetDevice(0);
        cuCtxSetCurrent(ctx);
    }
    peer_copies(ctx, ctx, stream);
    if (peer != ctx) peer_copies(ctx, peer, stream);
    cuStreamDestroy(stream);
    printf("%s legacy_driver: %d failure(s)\n", failures ? "FAIL" : "PASS", failures);
    return failures ? 1 : 0;
}
