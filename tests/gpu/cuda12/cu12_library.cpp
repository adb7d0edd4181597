// tests/gpu/cuda12/cu12_library.cpp: kernels through NVIDIA's CUDA 12 runtime on a CUDA
// 13 driver, the way a CUDA 12 framework loads them: a library from a cubin and one from
// PTX (JIT-compiled by the driver), kernels launched on a stream, events, a captured
// graph replayed, and pinned memory. Prints "cu12_library: PASS" when every result is
// right. Runs in the directory holding vector_add.cubin and vector_add.ptx.
#include <cuda_runtime.h>

#include <cmath>
#include <cstdio>
#include <fstream>
#include <iterator>
#include <string>
#include <vector>

#include "../check_status.h"


static std::string slurp(const char* path) {
    std::ifstream f(path, std::ios::binary);
    return std::string(std::istreambuf_iterator<char>(f), {});
}

static int run(const char* file, bool ptx) {
    std::string image = slurp(file);
    if (image.empty()) return std::printf("%s: missing\n", file), 1;
    if (ptx) image.push_back('\0');
    cudaLibrary_t lib;
    CHECK(cudaLibraryLoadData(&lib, image.data(), nullptr, nullptr, 0, nullptr, nullptr, 0));
    cudaKernel_t add, scale;
    CHECK(cudaLibraryGetKernel(&add, lib, "vector_add"));
    CHECK(cudaLibraryGetKernel(&scale, lib, "scale"));
    const int n = 1 << 20;
    float *ha, *hc;
    CHECK(cudaMallocHost(&ha, n * sizeof(float)));
    CHECK(cudaMallocHost(&hc, n * sizeof(float)));
    for (int i = 0; i < n; i++) ha[i] = (float)(i % 1000);
    float *a, *b, *c;
    CHECK(cudaMalloc(&a, n * sizeof(float)));
    CHECK(cudaMalloc(&b, n * sizeof(float)));
    CHECK(cudaMalloc(&c, n * sizeof(float)));
    cudaStream_t s;
    CHECK(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking));
    cudaEvent_t e0, e1;
    CHECK(cudaEventCreate(&e0));
    CHECK(cudaEventCreate(&e1));
    CHECK(cudaMemcpyAsync(a, ha, n * sizeof(float), cudaMemcpyHostToDevice, s));
    CHECK(cudaMemcpyAsync(b, ha, n * sizeof(float), cudaMemcpyHostToDevice, s));
    CHECK(cudaEventRecord(e0, s));
    int nn = n;
    void* add_args[] = {&a, &b, &c, &nn};
    CHECK(cudaLaunchKernel((const void*)add, dim3((n + 255) / 256), dim3(256), add_args, 0, s));
    CHECK(cudaEventRecord(e1, s));
    // A graph captured from the stream: scale c by 0.5, three replays.
    cudaGraph_t g;
    cudaGraphExec_t ge;
    float half = 0.5f;
    void* scale_args[] = {&c, &half, &nn};
    CHECK(cudaStreamBeginCapture(s, cudaStreamCaptureModeThreadLocal));
    CHECK(cudaLaunchKernel((const void*)scale, dim3((n + 255) / 256), dim3(256), scale_args, 0, s));
    CHECK(cudaStreamEndCapture(s, &g));
    CHECK(cudaGraphInstantiate(&ge, g, 0));
    for (int r = 0; r < 3; r++) CHECK(cudaGraphLaunch(ge, s));
    CHECK(cudaMemcpyAsync(hc, c, n * sizeof(float), cudaMemcpyDeviceToHost, s));
    CHECK(cudaStreamSynchronize(s));
    float ms = -1;
    CHECK(cudaEventElapsedTime(&ms, e0, e1));
    int bad = 0;
    for (int i = 0; i < n; i++)
        if (hc[i] != 2.0f * ha[i] * 0.125f) bad++;
    std::printf("%s: %d wrong of %d, kernel time %s\n", ptx ? "ptx" : "cubin", bad, n,
                ms >= 0 ? "measured" : "missing");
    CHECK(cudaGraphExecDestroy(ge));
    CHECK(cudaGraphDestroy(g));
    CHECK(cudaEventDestroy(e0));
    CHECK(cudaEventDestroy(e1));
    CHECK(cudaStreamDestroy(s));
    CHECK(cudaFree(a));
    CHECK(cudaFree(b));
    CHECK(cudaFree(c));
    CHECK(cudaFreeHost(ha));
    CHECK(cudaFreeHost(hc));
    CHECK(cudaLibraryUnload(lib));
    return bad != 0 || ms < 0;
}

int main() {
    int rt = 0;
    CHECK(cudaRuntimeGetVersion(&rt));
    std::printf("runtime %d.%d\n", rt / 1000, rt % 1000 / 10);
    if (run("vector_add.cubin", false) || run("vector_add.ptx", true)) {
        std::printf("cu12_library: FAIL\n");
        return 1;
    }
    std::printf("cu12_library: PASS\n");
    return 0;
}
