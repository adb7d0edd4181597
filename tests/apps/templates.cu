// templates: templated kernels over int/float/double with functor and non-type
// template parameters, overloaded kernels, a kernel in a nested namespace, a
// kernel in an anonymous namespace and an extern "C" kernel.
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <vector>
#include <cuda_runtime.h>

static const char* base_name(const char* p) { const char* s = strrchr(p, '/'); return s ? s + 1 : p; }
#define CHECK(call) do { cudaError_t e_ = (call); if (e_ != cudaSuccess) { \
    printf("FAIL %s:%d %s\n", base_name(__FILE__), __LINE__, cudaGetErrorName(e_)); exit(1); } } while (0)

template <typename T> struct Add { __device__ T operator()(T a, T b) const { return a + b; } };
template <typename T> struct MulAdd {
    T k;
    __device__ T operator()(T a, T b) const { return a * k + b; }
};

template <typename T, typename Op, int UNROLL>
__global__ void apply(T* out, const T* a, const T* b, int n, Op op) {
    int base = (blockIdx.x * blockDim.x + threadIdx.x) * UNROLL;
#pragma unroll
    for (int u = 0; u < UNROLL; u++) {
        int i = base + u;
        if (i < n) out[i] = op(a[i], b[i]);
    }
}

template <int N, bool NEG>
__global__ void fill_const(int* out) { out[threadIdx.x] = (NEG ? -N : N) * (int)threadIdx.x; }

__global__ void over(int* p, int v) { p[threadIdx.x] = v + (int)threadIdx.x; }
__global__ void over(float* p, float v) { p[threadIdx.x] = v * (float)threadIdx.x; }

namespace outer { namespace inner {
__global__ void scale(float* x, float s, int n) {
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) x[i] *= s;
}
} }

namespace {
__global__ void anon_kernel(int* out) { out[threadIdx.x] = 1000 + (int)threadIdx.x; }
}

extern "C" __global__ void c_kernel(int* out, int n) {
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) out[i] = i * i - 3;
}

template <typename T, typename Op, int UNROLL>
static void run(const char* name, Op op, int n) {
    std::vector<T> a(n), b(n), c(n);
    for (int i = 0; i < n; i++) { a[i] = (T)(i % 17); b[i] = (T)(i % 5) + (T)1; }
    T *da, *db, *dc;
    CHECK(cudaMalloc(&da, n * sizeof(T)));
    CHECK(cudaMalloc(&db, n * sizeof(T)));
    CHECK(cudaMalloc(&dc, n * sizeof(T)));
    CHECK(cudaMemcpy(da, a.data(), n * sizeof(T), cudaMemcpyHostToDevice));
    CHECK(cudaMemcpy(db, b.data(), n * sizeof(T), cudaMemcpyHostToDevice));
    CHECK(cudaMemset(dc, 0, n * sizeof(T)));
    int threads = 128, per = threads * UNROLL;
    apply<T, Op, UNROLL><<<(n + per - 1) / per, threads>>>(dc, da, db, n, op);
    CHECK(cudaGetLastError());
    CHECK(cudaMemcpy(c.data(), dc, n * sizeof(T), cudaMemcpyDeviceToHost));
    double sum = 0;
    for (int i = 0; i < n; i++) sum += (double)c[i];
    printf("%-30s c[0..3]= %.3f %.3f %.3f %.3f sum=%.3f\n", name, (double)c[0], (double)c[1], (double)c[2],
           (double)c[3], sum);
    CHECK(cudaFree(da));
    CHECK(cudaFree(db));
    CHECK(cudaFree(dc));
}

int main() {
    const int n = 10007;
    run<int, Add<int>, 1>("apply<int,Add,1>", Add<int>(), n);
    run<int, MulAdd<int>, 4>("apply<int,MulAdd(3),4>", MulAdd<int>{3}, n);
    run<float, Add<float>, 2>("apply<float,Add,2>", Add<float>(), n);
    run<float, MulAdd<float>, 1>("apply<float,MulAdd(0.5),1>", MulAdd<float>{0.5f}, n);
    run<double, Add<double>, 8>("apply<double,Add,8>", Add<double>(), n);
    run<double, MulAdd<double>, 3>("apply<double,MulAdd(-1.25),3>", MulAdd<double>{-1.25}, n);

    int* di;
    float* df;
    CHECK(cudaMalloc(&di, 1024 * sizeof(int)));
    CHECK(cudaMalloc(&df, 1024 * sizeof(float)));
    int hi[1024];
    float hf[1024];

    fill_const<7, false><<<1, 32>>>(di);
    CHECK(cudaMemcpy(hi, di, 32 * sizeof(int), cudaMemcpyDeviceToHost));
    printf("fill_const<7,false>: %d %d %d\n", hi[0], hi[1], hi[31]);
    fill_const<7, true><<<1, 32>>>(di);
    CHECK(cudaMemcpy(hi, di, 32 * sizeof(int), cudaMemcpyDeviceToHost));
    printf("fill_const<7,true>: %d %d %d\n", hi[0], hi[1], hi[31]);
    fill_const<123456, false><<<1, 32>>>(di);
    CHECK(cudaMemcpy(hi, di, 32 * sizeof(int), cudaMemcpyDeviceToHost));
    printf("fill_const<123456,false>: %d %d %d\n", hi[0], hi[1], hi[31]);

    over<<<1, 16>>>(di, 40);
    CHECK(cudaMemcpy(hi, di, 16 * sizeof(int), cudaMemcpyDeviceToHost));
    printf("over(int*): %d %d\n", hi[0], hi[15]);
    over<<<1, 16>>>(df, 2.5f);
    CHECK(cudaMemcpy(hf, df, 16 * sizeof(float), cudaMemcpyDeviceToHost));
    printf("over(float*): %.2f %.2f\n", hf[0], hf[15]);

    for (int i = 0; i < 1024; i++) hf[i] = (float)i;
    CHECK(cudaMemcpy(df, hf, sizeof(hf), cudaMemcpyHostToDevice));
    outer::inner::scale<<<4, 256>>>(df, -0.5f, 1000);
    CHECK(cudaMemcpy(hf, df, sizeof(hf), cudaMemcpyDeviceToHost));
    printf("outer::inner::scale: %.2f %.2f %.2f %.2f\n", hf[0], hf[3], hf[999], hf[1000]);

    anon_kernel<<<1, 8>>>(di);
    CHECK(cudaMemcpy(hi, di, 8 * sizeof(int), cudaMemcpyDeviceToHost));
    printf("anon_kernel: %d %d\n", hi[0], hi[7]);

    c_kernel<<<4, 256>>>(di, 1000);
    CHECK(cudaGetLastError());
    CHECK(cudaMemcpy(hi, di, sizeof(hi), cudaMemcpyDeviceToHost));
    long long s = 0;
    for (int i = 0; i < 1000; i++) s += hi[i];
    printf("c_kernel: %d %d sum=%lld\n", hi[0], hi[999], s);

    CHECK(cudaFree(di));
    CHECK(cudaFree(df));
    printf("done\n");
    return 0;
}
