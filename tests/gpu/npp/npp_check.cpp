// tests/gpu/npp/npp_check.cpp: NVIDIA's NPP image functions on the GPU, checked against
// the same arithmetic on the CPU. Built by tests/gpu/samples/build.sh (list.txt's
// npp_check line) with nvcc's static runtime and NVIDIA's NPP libraries (core, memory
// support, colour conversion, data exchange): NPP runs unmodified on whichever
// libcuda.so.1 the loader finds. Prints one line per check and "npp_check: PASS" only
// when every check matched; exits 1 otherwise.
#include <cuda_runtime.h>
#include <npp.h>

#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <vector>

#include "../check_status.h"

static const char* npp_status(NppStatus s) {
    static char text[32];
    std::snprintf(text, sizeof text, "NPP status %d", (int)s);
    return text;
}
#define CHECK_NPP(x) CHECK_STATUS(x, NPP_SUCCESS, npp_status)

static int failures = 0;

static void report(const char* what, bool ok, const char* detail = "") {
    std::printf("%-34s %s %s\n", what, ok ? "ok" : "FAIL", detail);
    if (!ok) failures++;
}



int main() {
    const NppLibraryVersion* v = nppGetLibVersion();
    std::printf("NPP %d.%d.%d\n", v->major, v->minor, v->build);

    int dev = 0;
    CHECK(cudaSetDevice(dev));
    cudaStream_t stream;
    CHECK(cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking));
    // The application-managed stream context NPP 13 asks for.
    NppStreamContext ctx = {};
    ctx.hStream = stream;
    ctx.nCudaDeviceId = dev;
    CHECK(cudaDeviceGetAttribute(&ctx.nMultiProcessorCount, cudaDevAttrMultiProcessorCount, dev));
    CHECK(cudaDeviceGetAttribute(&ctx.nMaxThreadsPerMultiProcessor,
                                      cudaDevAttrMaxThreadsPerMultiProcessor, dev));
    CHECK(cudaDeviceGetAttribute(&ctx.nMaxThreadsPerBlock, cudaDevAttrMaxThreadsPerBlock, dev));
    int smem = 0;
    CHECK(cudaDeviceGetAttribute(&smem, cudaDevAttrMaxSharedMemoryPerBlock, dev));
    ctx.nSharedMemPerBlock = (size_t)smem;
    CHECK(cudaDeviceGetAttribute(&ctx.nCudaDevAttrComputeCapabilityMajor,
                                      cudaDevAttrComputeCapabilityMajor, dev));
    CHECK(cudaDeviceGetAttribute(&ctx.nCudaDevAttrComputeCapabilityMinor,
                                      cudaDevAttrComputeCapabilityMinor, dev));
    CHECK(cudaStreamGetFlags(stream, &ctx.nStreamFlags));

    // An odd size, so that NPP's pitched rows are wider than the image.
    const int w = 1021, h = 509;
    const NppiSize roi = {w, h};
    std::vector<Npp8u> rgb((size_t)w * h * 3);
    unsigned seed = 12345;
    for (auto& b : rgb) {
        seed = seed * 1103515245u + 12345u;
        b = (Npp8u)(seed >> 16);
    }

    int rgbStep = 0, grayStep = 0, fStep = 0, tStep = 0, mStep = 0;
    Npp8u* dRgb = nppiMalloc_8u_C3(w, h, &rgbStep);
    Npp8u* dGray = nppiMalloc_8u_C1(w, h, &grayStep);
    Npp32f* dF = nppiMalloc_32f_C1(w, h, &fStep);
    Npp8u* dT = nppiMalloc_8u_C1(h, w, &tStep);
    Npp8u* dM = nppiMalloc_8u_C1(w, h, &mStep);
    report("nppiMalloc (pitched)", dRgb && dGray && dF && dT && dM && rgbStep >= w * 3 &&
                                       grayStep >= w);
    if (!(dRgb && dGray && dF && dT && dM)) return 1;
    CHECK(cudaMemcpy2DAsync(dRgb, rgbStep, rgb.data(), (size_t)w * 3, (size_t)w * 3, h,
                                 cudaMemcpyHostToDevice, stream));

    // Colour conversion (nppicc).
    CHECK_NPP(nppiRGBToGray_8u_C3C1R_Ctx(dRgb, rgbStep, dGray, grayStep, roi, ctx));
    std::vector<Npp8u> gray((size_t)w * h);
    CHECK(cudaMemcpy2DAsync(gray.data(), w, dGray, grayStep, w, h, cudaMemcpyDeviceToHost, stream));
    CHECK(cudaStreamSynchronize(stream));
    int worst = 0;
    unsigned long long sum = 0;
    for (size_t i = 0; i < gray.size(); i++) {
        double y = 0.299 * rgb[3 * i] + 0.587 * rgb[3 * i + 1] + 0.114 * rgb[3 * i + 2];
        int d = std::abs((int)gray[i] - (int)y);
        if (d > worst) worst = d;
        sum += gray[i];
    }
    char detail[96];
    std::snprintf(detail, sizeof detail, "(largest difference %d, sum %llu)", worst, sum);
    report("nppiRGBToGray_8u_C3C1R_Ctx", worst <= 1, detail);

    // Data exchange (nppidei): convert to float, transpose, set, and a mirror's twin.
    CHECK_NPP(nppiConvert_8u32f_C1R_Ctx(dGray, grayStep, dF, fStep, roi, ctx));
    std::vector<float> f((size_t)w * h);
    CHECK(cudaMemcpy2DAsync(f.data(), (size_t)w * 4, dF, fStep, (size_t)w * 4, h,
                                 cudaMemcpyDeviceToHost, stream));
    CHECK_NPP(nppiTranspose_8u_C1R_Ctx(dGray, grayStep, dT, tStep, roi, ctx));
    std::vector<Npp8u> t((size_t)w * h);
    CHECK(cudaMemcpy2DAsync(t.data(), h, dT, tStep, h, w, cudaMemcpyDeviceToHost, stream));
    CHECK_NPP(nppiSet_8u_C1R_Ctx(77, dM, mStep, roi, ctx));
    std::vector<Npp8u> m((size_t)w * h);
    CHECK(cudaMemcpy2DAsync(m.data(), w, dM, mStep, w, h, cudaMemcpyDeviceToHost, stream));
    CHECK(cudaStreamSynchronize(stream));
    bool convert_ok = true, transpose_ok = true, set_ok = true;
    for (int y = 0; y < h; y++)
        for (int x = 0; x < w; x++) {
            Npp8u g = gray[(size_t)y * w + x];
            if (f[(size_t)y * w + x] != (float)g) convert_ok = false;
            if (t[(size_t)x * h + y] != g) transpose_ok = false;
            if (m[(size_t)y * w + x] != 77) set_ok = false;
        }
    report("nppiConvert_8u32f_C1R_Ctx", convert_ok);
    report("nppiTranspose_8u_C1R_Ctx", transpose_ok);
    report("nppiSet_8u_C1R_Ctx", set_ok);

    // Many small calls on the stream, then one synchronize, as image pipelines do.
    for (int i = 0; i < 200; i++) CHECK_NPP(nppiSet_8u_C1R_Ctx((Npp8u)i, dM, mStep, roi, ctx));
    CHECK(cudaMemcpy2DAsync(m.data(), w, dM, mStep, w, h, cudaMemcpyDeviceToHost, stream));
    CHECK(cudaStreamSynchronize(stream));
    bool last_ok = true;
    for (auto b : m) last_ok &= (b == 199);
    report("200 calls in stream order", last_ok);

    nppiFree(dRgb);
    nppiFree(dGray);
    nppiFree(dF);
    nppiFree(dT);
    nppiFree(dM);
    CHECK(cudaStreamDestroy(stream));
    std::printf("npp_check: %s\n", failures ? "FAIL" : "PASS");
    return failures ? 1 : 0;
}
