// tests/gpu/cuda12/cu12_nvrtc.cpp: NVRTC 12 (the nvidia-cuda-nvrtc-cu12 12.4 wheel)
// compiles kernels at run time, as CUDA 12 frameworks do, to PTX (JIT-compiled by the
// driver at load) and to a cubin for the device's architecture; NVIDIA's CUDA 12 runtime
// loads each as a library and runs its kernel. Prints "cu12_nvrtc: PASS" when every
// result is right.
#include <cuda_runtime.h>
#include <nvrtc.h>

#include <cstdio>
#include <string>
#include <vector>

#include "../check_status.h"

#define NVRTC(call)                                                                   \
    do {                                                                              \
        nvrtcResult r_ = (call);                                                      \
        if (r_ != NVRTC_SUCCESS) {                                                    \
            std::printf("FAIL %s: %s\n", #call, nvrtcGetErrorString(r_));             \
            return 1;                                                                 \
        }                                                                             \
    } while (0)

static const char* kSource = R"(
extern "C" __global__ void axpy(float a, const float* x, float* y, int n) {
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) y[i] = a * x[i] + y[i];
}
)";

// Compile kSource for `arch` ("compute_90": PTX, "sm_90": a cubin) into `image`.
static int compile(const std::string& arch, bool cubin, std::vector<char>& image) {
    nvrtcProgram prog;
    NVRTC(nvrtcCreateProgram(&prog, kSource, "axpy.cu", 0, nullptr, nullptr));
    std::string opt = "--gpu-architecture=" + arch;
    const char* opts[] = {opt.c_str()};
    nvrtcResult r = nvrtcCompileProgram(prog, 1, opts);
    size_t log_len = 0;
    nvrtcGetProgramLogSize(prog, &log_len);
    if (r != NVRTC_SUCCESS) {
        std::string log(log_len, '\0');
        nvrtcGetProgramLog(prog, log.data());
        std::printf("FAIL nvrtcCompileProgram(%s): %s\n%s\n", arch.c_str(), nvrtcGetErrorString(r), log.c_str());
        return 1;
    }
    size_t len = 0;
    if (cubin) {
        NVRTC(nvrtcGetCUBINSize(prog, &len));
        image.resize(len);
        NVRTC(nvrtcGetCUBIN(prog, image.data()));
    } else {
        NVRTC(nvrtcGetPTXSize(prog, &len));
        image.resize(len);
        NVRTC(nvrtcGetPTX(prog, image.data()));
    }
    NVRTC(nvrtcDestroyProgram(&prog));
    return 0;
}

static int run(const char* what, const std::vector<char>& image) {
    cudaLibrary_t lib;
    CHECK(cudaLibraryLoadData(&lib, image.data(), nullptr, nullptr, 0, nullptr, nullptr, 0));
    cudaKernel_t axpy;
    CHECK(cudaLibraryGetKernel(&axpy, lib, "axpy"));
    const int n = 1 << 20;
    std::vector<float> hx(n), hy(n);
    for (int i = 0; i < n; i++) hx[i] = (float)(i % 977), hy[i] = (float)(i % 13);
    float *x, *y;
    CHECK(cudaMalloc(&x, n * sizeof(float)));
    CHECK(cudaMalloc(&y, n * sizeof(float)));
    CHECK(cudaMemcpy(x, hx.data(), n * sizeof(float), cudaMemcpyHostToDevice));
    CHECK(cudaMemcpy(y, hy.data(), n * sizeof(float), cudaMemcpyHostToDevice));
    float a = 3.0f;
    int nn = n;
    void* args[] = {&a, &x, &y, &nn};
    CHECK(cudaLaunchKernel((const void*)axpy, dim3((n + 255) / 256), dim3(256), args, 0, 0));
    std::vector<float> out(n);
    CHECK(cudaMemcpy(out.data(), y, n * sizeof(float), cudaMemcpyDeviceToHost));
    int bad = 0;
    for (int i = 0; i < n; i++)
        if (out[i] != 3.0f * hx[i] + hy[i]) bad++;
    std::printf("%s: %d wrong of %d\n", what, bad, n);
    CHECK(cudaFree(x));
    CHECK(cudaFree(y));
    CHECK(cudaLibraryUnload(lib));
    return bad ? 1 : 0;
}

int main() {
    int major = 0, minor = 0;
    NVRTC(nvrtcVersion(&major, &minor));
    std::printf("NVRTC %d.%d\n", major, minor);
    int runtime = 0;
    CHECK(cudaRuntimeGetVersion(&runtime));
    std::printf("runtime %d\n", runtime);
    cudaDeviceProp prop;
    CHECK(cudaGetDeviceProperties(&prop, 0));
    std::string sm = std::to_string(prop.major * 10 + prop.minor);
    std::vector<char> ptx, cubin;
    if (compile("compute_" + sm, false, ptx) || compile("sm_" + sm, true, cubin)) return 1;
    std::string head(ptx.begin(), ptx.begin() + std::min<size_t>(ptx.size(), 400));
    size_t at = head.find(".version");
    std::printf("PTX %s\n", at == std::string::npos ? "without .version" : head.substr(at, head.find('\n', at) - at).c_str());
    int failed = major == 12 ? 0 : 1;
    failed |= run("ptx", ptx);
    failed |= run("cubin", cubin);
    std::printf("cu12_nvrtc: %s\n", failed ? "FAIL" : "PASS");
    return failed;
}
