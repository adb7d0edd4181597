// sync_copy: synchronous pinned copies of 1 and 4 MiB, 500 each way: best, median and
// mean time per copy. Run natively and through vmcuda side by side to see where a
// synchronous copy's time goes (bench/run.sh reports only the best of 50).
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstring>
#include <vector>
#include <cuda_runtime.h>

#define CHECK(x) do { cudaError_t e_ = (x); if (e_ != cudaSuccess) { printf("FAIL %s: %s\n", #x, cudaGetErrorName(e_)); return 1; } } while (0)

int main() {
    for (size_t mib : {1, 4}) {
        size_t bytes = mib << 20;
        char* host; char* dev;
        CHECK(cudaMallocHost(&host, bytes));
        CHECK(cudaMalloc(&dev, bytes));
        memset(host, 5, bytes);
        for (int h2d = 1; h2d >= 0; h2d--) {
            std::vector<double> t;
            for (int i = 0; i < 520; i++) {
                auto s = std::chrono::steady_clock::now();
                if (h2d) CHECK(cudaMemcpy(dev, host, bytes, cudaMemcpyHostToDevice));
                else CHECK(cudaMemcpy(host, dev, bytes, cudaMemcpyDeviceToHost));
                double us = std::chrono::duration<double, std::micro>(std::chrono::steady_clock::now() - s).count();
                if (i >= 20) t.push_back(us);
            }
            std::sort(t.begin(), t.end());
            double mean = 0;
            for (double v : t) mean += v;
            mean /= t.size();
            printf("%s %zu MiB: best %.2f us, median %.2f us, mean %.2f us\n", h2d ? "h2d" : "d2h", mib,
                   t.front(), t[t.size() / 2], mean);
        }
        CHECK(cudaFreeHost(host));
        CHECK(cudaFree(dev));
    }
    return 0;
}
