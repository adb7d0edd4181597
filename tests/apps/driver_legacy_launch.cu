// The driver's older entry points: the launch ABI before cuLaunchKernel
// (cuFuncSetBlockShape, cuFuncSetSharedSize, cuParamSet*, cuLaunch, cuLaunchGrid,
// cuLaunchGridAsync), cuLaunchCooperativeKernelMultiDevice, context usage counts
// (cuCtxAttach/cuCtxDetach), events over a whole context (cuCtxRecordEvent,
// cuCtxWaitEvent), cuCtxGetExecAffinity, cuDeviceGetLuid, and the array copies
// cuMemcpyAtoA, cuMemcpyHtoAAsync, cuMemcpyAtoHAsync (and their per-thread variants
// from cuGetProcAddress) and cuMemcpy3DPeer(Async). Prints call results and checks
// what copies move; the kernels' effects are checked by tests/gpu/legacy_driver.cu on
// a GPU (the test double records launches without running them).
#define CUDA_ENABLE_DEPRECATED  // the functions checked here are deprecated
#include <cuda.h>
#include <cuda_runtime.h>
#include <stdio.h>
#include <string.h>

static int failures;

static const char *name_of(CUresult r) {
    const char *s = "?";
    cuGetErrorName(r, &s);
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

struct Tag {
    unsigned char b[4];
};

// Parameters at offsets 0 (8 bytes), 8, 12 and 16 (4 each): 20 bytes.
__global__ void legacy_fill(int *out, float f, int i, Tag t) {
    unsigned at = blockIdx.y * gridDim.x * blockDim.x * blockDim.y + blockIdx.x * blockDim.x * blockDim.y +
                  threadIdx.y * blockDim.x + threadIdx.x;
    out[at] = (int)(f * 2.0f) + i + t.b[0] + t.b[3];
}

static void *proc(const char *name, cuuint64_t flags) {
    void *f = NULL;
    CUdriverProcAddressQueryResult status;
    CUresult r = cuGetProcAddress(name, &f, 13000, flags, &status);
    if (r != CUDA_SUCCESS || f == NULL) {
        printf("FAIL cuGetProcAddress(%s)\n", name);
        failures++;
    }
    return f;
}

static void legacy_launches(CUfunction f, CUdeviceptr out, CUstream stream) {
    float two_and_a_half = 2.5f;
    int seven = 7;
    Tag tag = {{1, 2, 3, 4}};
    check("cuFuncSetBlockShape", cuFuncSetBlockShape(f, 32, 2, 1));
    check("cuFuncSetSharedSize", cuFuncSetSharedSize(f, 128));
    check("cuParamSetSize", cuParamSetSize(f, 20));
    check("cuParamSetv(pointer)", cuParamSetv(f, 0, &out, sizeof out));
    check("cuParamSetf", cuParamSetf(f, 8, two_and_a_half));
    check("cuParamSeti", cuParamSeti(f, 12, seven));
    check("cuParamSetv(struct)", cuParamSetv(f, 16, &tag, sizeof tag));
    // Past the size is taken, as NVIDIA's driver takes it (measured on the H200); the
    // launches below pass the size's 20 bytes only.
    check("cuParamSeti past the size", cuParamSeti(f, 20, 1));
    check("cuParamSetv past the end", cuParamSetv(f, 24, &tag, sizeof tag));
    check("cuLaunchGrid", cuLaunchGrid(f, 3, 2));
    check("cuLaunch", cuLaunch(f));
    check("cuLaunchGridAsync", cuLaunchGridAsync(f, 2, 1, stream));
    check("cuStreamSynchronize", cuStreamSynchronize(stream));
    check("cuFuncSetBlockShape(0 threads)", cuFuncSetBlockShape(f, 0, 1, 1), CUDA_ERROR_INVALID_VALUE);
    check("cuLaunchGrid(0 blocks)", cuLaunchGrid(f, 0, 1), CUDA_ERROR_INVALID_VALUE);
    check("cuFuncSetBlockShape(NULL)", cuFuncSetBlockShape(NULL, 1, 1, 1), CUDA_ERROR_INVALID_HANDLE);
    check("cuParamSetSize(NULL)", cuParamSetSize(NULL, 4), CUDA_ERROR_INVALID_HANDLE);
    check("cuLaunch(NULL)", cuLaunch(NULL), CUDA_ERROR_INVALID_HANDLE);
}

static void multi_device(CUfunction f, CUdeviceptr out, CUstream stream) {
    float f0 = 1.0f;
    int i0 = 3;
    Tag tag = {{0, 0, 0, 0}};
    void *args[] = {&out, &f0, &i0, &tag};
    CUDA_LAUNCH_PARAMS p;
    memset(&p, 0, sizeof p);
    p.function = f;
    p.gridDimX = 2;
    p.gridDimY = 1;
    p.gridDimZ = 1;
    p.blockDimX = 64;
    p.blockDimY = 1;
    p.blockDimZ = 1;
    p.sharedMemBytes = 0;
    p.hStream = stream;
    p.kernelParams = args;
    check("cuLaunchCooperativeKernelMultiDevice", cuLaunchCooperativeKernelMultiDevice(&p, 1, 0));
    check("cuLaunchCooperativeKernelMultiDevice(no syncs)",
          cuLaunchCooperativeKernelMultiDevice(
              &p, 1,
              CUDA_COOPERATIVE_LAUNCH_MULTI_DEVICE_NO_PRE_LAUNCH_SYNC |
                  CUDA_COOPERATIVE_LAUNCH_MULTI_DEVICE_NO_POST_LAUNCH_SYNC));
    check("cuLaunchCooperativeKernelMultiDevice(bad flags)", cuLaunchCooperativeKernelMultiDevice(&p, 1, 4),
          CUDA_ERROR_INVALID_VALUE);
    check("cuStreamSynchronize", cuStreamSynchronize(stream));
}

static void contexts(CUcontext ctx, CUdevice dev) {
    CUcontext attached = NULL;
    check("cuCtxAttach", cuCtxAttach(&attached, 0));
    expect("cuCtxAttach passes back the current context", attached == ctx);
    check("cuCtxAttach(flags 1)", cuCtxAttach(&attached, 1), CUDA_ERROR_INVALID_VALUE);
    check("cuCtxDetach", cuCtxDetach(attached));
    CUcontext now = NULL;
    cuCtxGetCurrent(&now);
    expect("the context is still current after cuCtxDetach", now == ctx);

    CUevent ev;
    check("cuEventCreate", cuEventCreate(&ev, CU_EVENT_DEFAULT));
    check("cuCtxRecordEvent", cuCtxRecordEvent(ctx, ev));
    check("cuEventSynchronize after cuCtxRecordEvent", cuEventSynchronize(ev));
    check("cuCtxWaitEvent", cuCtxWaitEvent(ctx, ev));
    check("cuCtxSynchronize", cuCtxSynchronize());
    check("cuEventDestroy", cuEventDestroy(ev));

    CUexecAffinityParam affinity;
    memset(&affinity, 0xab, sizeof affinity);
    CUresult r = cuCtxGetExecAffinity(&affinity, CU_EXEC_AFFINITY_TYPE_SM_COUNT);
    int sms = 0;
    cuDeviceGetAttribute(&sms, CU_DEVICE_ATTRIBUTE_MULTIPROCESSOR_COUNT, dev);
    printf("cuCtxGetExecAffinity(SM_COUNT): %s\n", name_of(r));
    if (r == CUDA_SUCCESS)
        expect("the context's SM count is the device's", affinity.param.smCount.val == (unsigned)sms &&
                                                              affinity.type == CU_EXEC_AFFINITY_TYPE_SM_COUNT);
    check("cuCtxGetExecAffinity(NULL)", cuCtxGetExecAffinity(NULL, CU_EXEC_AFFINITY_TYPE_SM_COUNT),
          CUDA_ERROR_INVALID_VALUE);

    char luid[8];
    unsigned mask = 0;
    printf("cuDeviceGetLuid: %s\n", name_of(cuDeviceGetLuid(luid, &mask, dev)));
}

static void array_copies(CUcontext ctx, CUstream stream) {
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
    check("cuMemcpyHtoAAsync(across a 2D array's rows)", cuMemcpyHtoAAsync(c, 0, row, 128, stream),
          CUDA_ERROR_INVALID_VALUE);
    check("cuMemcpyAtoHAsync(across a 2D array's rows)", cuMemcpyAtoHAsync(row, c, 32, 64, stream),
          CUDA_ERROR_INVALID_VALUE);
    check("cuMemcpyAtoA(across a 2D array's rows)", cuMemcpyAtoA(c, 0, c, 64, 64), CUDA_ERROR_INVALID_VALUE);
    check("cuMemcpyHtoAAsync(a 2D array's first row)", cuMemcpyHtoAAsync(c, 0, row, 64, stream));
    cuStreamSynchronize(stream);
    cuArrayDestroy(c);
    CUarray a, b;
    check("cuArrayCreate(a)", cuArrayCreate(&a, &d));
    check("cuArrayCreate(b)", cuArrayCreate(&b, &d));
    unsigned src[64], got[64], zero[64];
    for (int i = 0; i < 64; i++) src[i] = 1000 + i;
    memset(zero, 0, sizeof zero);
    check("cuMemcpyHtoAAsync", cuMemcpyHtoAAsync(a, 0, src, sizeof src, stream));
    check("cuMemcpyHtoA(b, zeros)", cuMemcpyHtoA(b, 0, zero, sizeof zero));
    check("cuStreamSynchronize", cuStreamSynchronize(stream));
    // Two whole rows from a's second row to b's third.
    check("cuMemcpyAtoA", cuMemcpyAtoA(b, 128, a, 64, 128));
    memset(got, 0xff, sizeof got);
    check("cuMemcpyAtoHAsync", cuMemcpyAtoHAsync(got, b, 0, sizeof got, stream));
    check("cuStreamSynchronize", cuStreamSynchronize(stream));
    bool ok = true;
    for (int i = 0; i < 64; i++) ok &= got[i] == (i >= 32 ? 1000 + i - 16 : 0u);
    expect("cuMemcpyAtoA moved the rows asked for", ok);
    // Part of one row.
    check("cuMemcpyAtoA(within a row)", cuMemcpyAtoA(b, 4, a, 8, 8));
    check("cuMemcpyAtoH", cuMemcpyAtoH(got, b, 0, 16));
    expect("cuMemcpyAtoA within a row", got[0] == 0 && got[1] == 1002 && got[2] == 1003 && got[3] == 0);

    // The per-thread variants, as cuGetProcAddress hands them out.
    typedef CUresult (*htoa_t)(CUarray, size_t, const void *, size_t, CUstream);
    typedef CUresult (*atoh_t)(void *, CUarray, size_t, size_t, CUstream);
    typedef CUresult (*atoa_t)(CUarray, size_t, CUarray, size_t, size_t);
    cuuint64_t pt = CU_GET_PROC_ADDRESS_PER_THREAD_DEFAULT_STREAM;
    htoa_t htoa = (htoa_t)proc("cuMemcpyHtoAAsync", pt);
    atoh_t atoh = (atoh_t)proc("cuMemcpyAtoHAsync", pt);
    atoa_t atoa = (atoa_t)proc("cuMemcpyAtoA", pt);
    if (htoa && atoh && atoa) {
        for (int i = 0; i < 64; i++) src[i] = 5000 + i;
        check("cuMemcpyHtoAAsync_v2_ptsz", htoa(a, 0, src, sizeof src, NULL));
        check("cuMemcpyAtoA_v2_ptds", atoa(b, 0, a, 0, sizeof src));
        memset(got, 0, sizeof got);
        check("cuMemcpyAtoHAsync_v2_ptsz", atoh(got, b, 0, sizeof got, NULL));
        check("cuStreamSynchronize(per-thread)", cuStreamSynchronize(CU_STREAM_PER_THREAD));
        expect("the per-thread array copies", memcmp(got, src, sizeof src) == 0);
    }
    check("cuArrayDestroy(a)", cuArrayDestroy(a));
    check("cuArrayDestroy(b)", cuArrayDestroy(b));

    // cuMemcpy3DPeer: a 16-byte x 3 x 2 box between two pitched buffers of one context.
    CUdeviceptr x, y;
    check("cuMemAlloc(x)", cuMemAlloc(&x, 4096));
    check("cuMemAlloc(y)", cuMemAlloc(&y, 4096));
    unsigned char host[4096], back[4096];
    for (int i = 0; i < 4096; i++) host[i] = (unsigned char)(i * 7);
    check("cuMemcpyHtoD", cuMemcpyHtoD(x, host, sizeof host));
    check("cuMemsetD8", cuMemsetD8(y, 0, 4096));
    CUDA_MEMCPY3D_PEER p;
    memset(&p, 0, sizeof p);
    p.srcMemoryType = CU_MEMORYTYPE_DEVICE;
    p.srcDevice = x;
    p.srcContext = ctx;
    p.srcPitch = 64;
    p.srcHeight = 4;
    p.srcXInBytes = 8;
    p.dstMemoryType = CU_MEMORYTYPE_DEVICE;
    p.dstDevice = y;
    p.dstContext = ctx;
    p.dstPitch = 32;
    p.dstHeight = 3;
    p.WidthInBytes = 16;
    p.Height = 3;
    p.Depth = 2;
    check("cuMemcpy3DPeer", cuMemcpy3DPeer(&p));
    check("cuMemcpyDtoH", cuMemcpyDtoH(back, y, sizeof back));
    ok = true;
    for (int z = 0; z < 2; z++)
        for (int r = 0; r < 3; r++)
            for (int c = 0; c < 16; c++)
                ok &= back[z * 96 + r * 32 + c] == host[z * 256 + r * 64 + 8 + c];
    expect("cuMemcpy3DPeer moved the box", ok);
    p.dstXInBytes = 16;
    check("cuMemcpy3DPeerAsync", cuMemcpy3DPeerAsync(&p, stream));
    check("cuStreamSynchronize", cuStreamSynchronize(stream));
    check("cuMemcpyDtoH", cuMemcpyDtoH(back, y, sizeof back));
    expect("cuMemcpy3DPeerAsync moved the box", back[16] == host[8] && back[96 + 32 + 16 + 15] == host[256 + 64 + 8 + 15]);
    cuMemFree(x);
    cuMemFree(y);
}

int main() {
    if (cudaFree(0) != cudaSuccess) {
        printf("FAIL no device\n");
        return 1;
    }
    CUcontext ctx;
    CUdevice dev;
    cuCtxGetCurrent(&ctx);
    cuCtxGetDevice(&dev);
    cudaFunction_t rf;
    if (cudaGetFuncBySymbol(&rf, (const void *)legacy_fill) != cudaSuccess) {
        printf("FAIL cudaGetFuncBySymbol\n");
        return 1;
    }
    CUfunction f = (CUfunction)rf;
    CUdeviceptr out;
    check("cuMemAlloc", cuMemAlloc(&out, 1 << 16));
    CUstream stream;
    check("cuStreamCreate", cuStreamCreate(&stream, CU_STREAM_NON_BLOCKING));
    legacy_launches(f, out, stream);
    multi_device(f, out, stream);
    contexts(ctx, dev);
    array_copies(ctx, stream);
    cuStreamDestroy(stream);
    cuMemFree(out);
    printf("%s driver_legacy_launch: %d failure(s)\n", failures ? "FAIL" : "PASS", failures);
    return failures ? 1 : 0;
}
