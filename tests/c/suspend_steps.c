/* suspend_steps: a program that keeps using its GPU memory while its VM may be
   suspended and resumed under it. It fills a large buffer once (a pattern in its
   first 16 MiB, a constant after, so that tens of GiB need no host copy), then for each step
   writes a pattern, copies it on the device and reads it back, printing "step N ok"
   (flushed) each time; at the end it checks the large buffer is still what it wrote,
   and prints the longest gap between two steps: the pause its program saw.
   Usage: suspend_steps [STEPS=40] [INTERVAL_MS=25] [BIG_MIB=64] */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

typedef int CUresult;
typedef int CUdevice;
typedef void* CUcontext;
typedef unsigned long long CUdeviceptr;
CUresult cuInit(unsigned);
CUresult cuDeviceGet(CUdevice*, int);
CUresult cuDevicePrimaryCtxRetain(CUcontext*, CUdevice);
CUresult cuCtxSetCurrent(CUcontext);
CUresult cuMemAlloc_v2(CUdeviceptr*, size_t);
CUresult cuMemcpyHtoD_v2(CUdeviceptr, const void*, size_t);
CUresult cuMemcpyDtoH_v2(void*, CUdeviceptr, size_t);
CUresult cuMemcpyDtoD_v2(CUdeviceptr, CUdeviceptr, size_t);
CUresult cuMemFree_v2(CUdeviceptr);
CUresult cuMemsetD32_v2(CUdeviceptr, unsigned, size_t);

#define CHECK(call)                                                   \
    do {                                                              \
        CUresult r_ = (call);                                         \
        if (r_ != 0) {                                                \
            printf("FAIL %s = %d\n", #call, r_);                      \
            return 1;                                                 \
        }                                                             \
    } while (0)

static double now_ms(void) {
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return t.tv_sec * 1e3 + t.tv_nsec / 1e6;
}

int main(int argc, char** argv) {
    int steps = argc > 1 ? atoi(argv[1]) : 40;
    int interval = argc > 2 ? atoi(argv[2]) : 25;
    size_t big = (size_t)(argc > 3 ? atoi(argv[3]) : 64) << 20;
    const size_t small = 1 << 20;
    CUdevice dev;
    CUcontext ctx;
    CHECK(cuInit(0));
    CHECK(cuDeviceGet(&dev, 0));
    CHECK(cuDevicePrimaryCtxRetain(&ctx, dev));
    CHECK(cuCtxSetCurrent(ctx));
    CUdeviceptr a, b, large;
    CHECK(cuMemAlloc_v2(&a, small));
    CHECK(cuMemAlloc_v2(&b, small));
    CHECK(cuMemAlloc_v2(&large, big));
    const size_t chunk = 16 << 20;
    const size_t head = big < chunk ? big : chunk;
    uint32_t* host = malloc(chunk);
    CHECK(cuMemsetD32_v2(large, 0x5a5a5a5au, big / 4));
    for (size_t i = 0; i < head / 4; i++) host[i] = (uint32_t)(i * 2654435761u);
    CHECK(cuMemcpyHtoD_v2(large, host, head));
    uint32_t* pattern = malloc(small);
    uint32_t* back = malloc(small);
    printf("ready\n");
    fflush(stdout);
    double last = now_ms(), longest = 0;
    for (int s = 0; s < steps; s++) {
        for (size_t i = 0; i < small / 4; i++) pattern[i] = (uint32_t)(s * 7919 + i);
        CHECK(cuMemcpyHtoD_v2(a, pattern, small));
        CHECK(cuMemcpyDtoD_v2(b, a, small));
        memset(back, 0, small);
        CHECK(cuMemcpyDtoH_v2(back, b, small));
        if (memcmp(back, pattern, small) != 0) {
            printf("FAIL step %d read back other bytes\n", s);
            return 1;
        }
        double t = now_ms();
        if (t - last > longest) longest = t - last;
        last = t;
        printf("step %d ok\n", s);
        fflush(stdout);
        usleep(interval * 1000);
    }
    for (size_t at = 0; at < big; at += chunk) {
        size_t n = big - at < chunk ? big - at : chunk;
        memset(host, 0, n);
        CHECK(cuMemcpyDtoH_v2(host, large + at, n));
        for (size_t i = 0; i < n / 4; i++) {
            uint32_t want = at == 0 ? (uint32_t)(i * 2654435761u) : 0x5a5a5a5au;
            if (host[i] != want) {
                printf("FAIL the large buffer changed at byte %zu\n", at + i * 4);
                return 1;
            }
        }
    }
    CHECK(cuMemFree_v2(large));
    CHECK(cuMemFree_v2(b));
    CHECK(cuMemFree_v2(a));
    printf("longest pause between steps: %.1f ms\n", longest);
    printf("PASS suspend_steps\n");
    return 0;
}
