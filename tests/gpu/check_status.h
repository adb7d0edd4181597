// tests/gpu/check_status.h: the one status check of the GPU check programs
// (tests/gpu/cuda12, tests/gpu/npp): a call whose status is not OK prints the call and
// what the status means, and makes the enclosing function return 1.
#pragma once
#include <cstdio>

#define CHECK_STATUS(expr, ok, describe)                                                   \
    do {                                                                                   \
        auto s_ = (expr);                                                                  \
        if (s_ != (ok)) {                                                                  \
            std::printf("%s: %s\n", #expr, describe(s_));                                  \
            return 1;                                                                      \
        }                                                                                  \
    } while (0)

// The CUDA runtime's calls, described by the runtime.
#define CHECK(x) CHECK_STATUS(x, cudaSuccess, cudaGetErrorString)
