// tests/gpu/cuda12/cu12_device_query.cpp: what a CUDA 12 program asks first, through
// NVIDIA's CUDA 12 runtime (shared libcudart.so.12 or the static one, as built), on a
// CUDA 13 driver: versions, devices, properties, memory, and a round trip of bytes.
// Prints "cu12_device_query: PASS" when every answer is sane.
#include <cuda_runtime.h>

#include <cstdio>
#include <cstring>
#include <vector>

#include "../check_status.h"


int main() {
    int drv = 0, rt = 0, n = 0;
    CHECK(cudaDriverGetVersion(&drv));
    CHECK(cudaRuntimeGetVersion(&rt));
    std::printf("runtime %d.%d, driver %d.%d\n", rt / 1000, rt % 1000 / 10, drv / 1000,
                drv % 1000 / 10);
    if (rt / 1000 != 12 || drv < rt) return std::printf("unexpected versions\n"), 1;
    CHECK(cudaGetDeviceCount(&n));
    if (n < 1) return std::printf("no device\n"), 1;
    for (int d = 0; d < n; d++) {
        cudaDeviceProp p;
        CHECK(cudaGetDeviceProperties(&p, d));
        std::printf("device %d: %s, sm_%d%d, %d SMs, %zu MiB, warp %d\n", d, p.name, p.major,
                    p.minor, p.multiProcessorCount, p.totalGlobalMem >> 20, p.warpSize);
        int v = 0;
        CHECK(cudaDeviceGetAttribute(&v, cudaDevAttrComputeCapabilityMajor, d));
        if (v != p.major || p.warpSize != 32 || p.totalGlobalMem == 0)
            return std::printf("inconsistent properties\n"), 1;
    }
    size_t free_b = 0, total_b = 0;
    CHECK(cudaMemGetInfo(&free_b, &total_b));
    if (free_b == 0 || free_b > total_b) return std::printf("bad memory info\n"), 1;
    const size_t bytes = 8 << 20;
    std::vector<unsigned char> in(bytes), out(bytes);
    for (size_t i = 0; i < bytes; i++) in[i] = (unsigned char)(i * 7 + 3);
    void* d = nullptr;
    CHECK(cudaMalloc(&d, bytes));
    CHECK(cudaMemcpy(d, in.data(), bytes, cudaMemcpyHostToDevice));
    CHECK(cudaMemset((char*)d + 4096, 0xab, 4096));
    CHECK(cudaMemcpy(out.data(), d, bytes, cudaMemcpyDeviceToHost));
    std::memset(in.data() + 4096, 0xab, 4096);
    CHECK(cudaFree(d));
    if (in != out) return std::printf("round trip differs\n"), 1;
    std::printf("cu12_device_query: PASS\n");
    return 0;
}
