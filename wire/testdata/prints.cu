// A kernel that calls device printf (its cubin leaves `vprintf` to the driver).
#include <cstdio>
extern "C" __global__ void hello(int x) { printf("hello %d\n", x); }
