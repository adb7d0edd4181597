// cuFFT through vmcuda: a batched 1D complex-to-complex FFT, forward and back, checked
// against a direct DFT on the CPU. cuFFT carries its own static CUDA runtime and
// reaches the GPU only through libcuda.so.1.
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <vector>
#include <cuda_runtime.h>
#include <cufft.h>

#define CHECK_CUDA(x) do { cudaError_t e = (x); if (e != cudaSuccess) { printf("FAIL %s:%d %s\n", __FILE__, __LINE__, cudaGetErrorName(e)); return 1; } } while (0)
#define CHECK_FFT(x) do { cufftResult r = (x); if (r != CUFFT_SUCCESS) { printf("FAIL %s:%d cufft status %d\n", __FILE__, __LINE__, (int)r); return 1; } } while (0)

int main() {
    const int n = 1024, batch = 4;
    std::vector<cufftComplex> h(n * batch), back(n * batch), freq(n * batch);
    for (int i = 0; i < n * batch; i++) {
        h[i].x = (float)((i * 37) % 101) / 101.0f - 0.5f;
        h[i].y = (float)((i * 53) % 97) / 97.0f - 0.5f;
    }
    cufftComplex *d = nullptr;
    CHECK_CUDA(cudaMalloc(&d, sizeof(cufftComplex) * n * batch));
    CHECK_CUDA(cudaMemcpy(d, h.data(), sizeof(cufftComplex) * n * batch, cudaMemcpyHostToDevice));
    cufftHandle plan;
    CHECK_FFT(cufftPlan1d(&plan, n, CUFFT_C2C, batch));
    size_t work = 0;
    CHECK_FFT(cufftGetSize(plan, &work));
    CHECK_FFT(cufftExecC2C(plan, d, d, CUFFT_FORWARD));
    CHECK_CUDA(cudaMemcpy(freq.data(), d, sizeof(cufftComplex) * n * batch, cudaMemcpyDeviceToHost));
    CHECK_FFT(cufftExecC2C(plan, d, d, CUFFT_INVERSE));
    CHECK_CUDA(cudaMemcpy(back.data(), d, sizeof(cufftComplex) * n * batch, cudaMemcpyDeviceToHost));
    CHECK_FFT(cufftDestroy(plan));
    CHECK_CUDA(cudaFree(d));

    // Direct DFT of the second batch, in double precision.
    double fwd_err = 0;
    const int b = 1;
    for (int k = 0; k < n; k++) {
        double re = 0, im = 0;
        for (int t = 0; t < n; t++) {
            double a = -2.0 * M_PI * (double)k * t / n;
            re += h[b * n + t].x * cos(a) - h[b * n + t].y * sin(a);
            im += h[b * n + t].x * sin(a) + h[b * n + t].y * cos(a);
        }
        fwd_err = fmax(fwd_err, fabs(re - freq[b * n + k].x) + fabs(im - freq[b * n + k].y));
    }
    double rt_err = 0;
    for (int i = 0; i < n * batch; i++)
        rt_err = fmax(rt_err, fabs(back[i].x / n - h[i].x) + fabs(back[i].y / n - h[i].y));
    bool ok = fwd_err < 1e-2 && rt_err < 1e-4;
    printf("X[1..3] of batch 1: %.3f%+.3fi %.3f%+.3fi %.3f%+.3fi\n", freq[n + 1].x, freq[n + 1].y,
           freq[n + 2].x, freq[n + 2].y, freq[n + 3].x, freq[n + 3].y);
    printf("%s cufft_c2c: forward vs DFT %s, round trip %s\n", ok ? "PASS" : "FAIL",
           fwd_err < 1e-2 ? "ok" : "wrong", rt_err < 1e-4 ? "ok" : "wrong");
    return ok ? 0 : 1;
}
