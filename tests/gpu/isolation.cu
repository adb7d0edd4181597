// What one guest can learn of another's GPU memory, and whether quotas hold; run
// natively and through vmcuda by tests/gpu/run-isolation.sh.
//
//   isolation fill BYTES        allocate, fill with 0xAB, print the pointer, wait for stdin to close
//   isolation probe BYTES       allocate fresh memory; count bytes that are not zero
//   isolation reuse BYTES       fill, free, allocate again in this process; count stale bytes
//   isolation peek PTR          copy 64 bytes from another process's pointer
//   isolation quota BYTES       the device as a guest with a quota of BYTES sees it
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <vector>
#include <unistd.h>
#include <cuda_runtime.h>

static size_t count_nonzero(const unsigned char *dev, size_t bytes) {
    std::vector<unsigned char> host(bytes);
    cudaError_t e = cudaMemcpy(host.data(), dev, bytes, cudaMemcpyDeviceToHost);
    if (e != cudaSuccess) {
        printf("copy back: %s\n", cudaGetErrorName(e));
        exit(1);
    }
    size_t n = 0;
    for (unsigned char b : host) n += b != 0;
    return n;
}

int main(int argc, char **argv) {
    if (argc < 3) {
        fprintf(stderr, "usage: isolation fill|probe|reuse|peek|quota ARG\n");
        return 2;
    }
    const char *mode = argv[1];
    unsigned long long arg = strtoull(argv[2], nullptr, 0);
    unsigned char *p = nullptr;
    if (!strcmp(mode, "fill")) {
        if (cudaMalloc(&p, arg) != cudaSuccess || cudaMemset(p, 0xAB, arg) != cudaSuccess ||
            cudaDeviceSynchronize() != cudaSuccess) {
            printf("fill failed\n");
            return 1;
        }
        printf("filled %p\n", (void *)p);
        fflush(stdout);
        // Hold the memory until told to go, then leave without freeing it.
        char buf[16];
        while (fread(buf, 1, sizeof buf, stdin) > 0) {
        }
        _exit(0);
    }
    if (!strcmp(mode, "probe")) {
        if (cudaMalloc(&p, arg) != cudaSuccess) return 1;
        printf("fresh allocation: %zu of %llu bytes not zero\n", count_nonzero(p, arg), arg);
        return 0;
    }
    if (!strcmp(mode, "reuse")) {
        unsigned char *q = nullptr;
        cudaMalloc(&p, arg);
        cudaMemset(p, 0xCD, arg);
        cudaFree(p);
        cudaMalloc(&q, arg);
        printf("reallocated in-process (%s address): %zu of %llu bytes stale\n",
               p == q ? "same" : "other", count_nonzero(q, arg), arg);
        return 0;
    }
    if (!strcmp(mode, "peek")) {
        unsigned char buf[64];
        cudaError_t e = cudaMemcpy(buf, (void *)(uintptr_t)arg, sizeof buf, cudaMemcpyDeviceToHost);
        printf("copy from another process's pointer: %s\n", cudaGetErrorName(e));
        return 0;
    }
    if (!strcmp(mode, "quota")) {
        size_t free_b = 0, total_b = 0;
        cudaMemGetInfo(&free_b, &total_b);
        printf("cudaMemGetInfo total %s quota\n", total_b == arg ? "==" : "!=");
        unsigned char *a = nullptr, *b = nullptr;
        cudaError_t e1 = cudaMalloc(&a, arg / 4 * 3);
        cudaError_t e2 = cudaMalloc(&b, arg / 2);
        cudaGetLastError();
        cudaError_t e3 = cudaFree(a);
        cudaError_t e4 = cudaMalloc(&b, arg / 2);
        printf("3/4 of quota: %s; then 1/2 more: %s; after freeing the first, 1/2: %s (free %s)\n",
               cudaGetErrorName(e1), cudaGetErrorName(e2), cudaGetErrorName(e4),
               cudaGetErrorName(e3));
        return 0;
    }
    fprintf(stderr, "unknown mode %s\n", mode);
    return 2;
}
