// symbols: __device__ and __constant__ variables (scalars, arrays, structs;
// initialised and not), cudaMemcpyTo/FromSymbol (+offsets, +Async, +D2D),
// cudaGetSymbolAddress / cudaGetSymbolSize, kernels reading constants and writing
// globals. Symbol round trips are self-checked; kernel results are printed.
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <cuda_runtime.h>

static const char* base_name(const char* p) { const char* s = strrchr(p, '/'); return s ? s + 1 : p; }
#define CHECK(call) do { cudaError_t e_ = (call); if (e_ != cudaSuccess) { \
    printf("FAIL %s:%d %s\n", base_name(__FILE__), __LINE__, cudaGetErrorName(e_)); exit(1); } } while (0)
#define EXPECT(cond) do { if (!(cond)) { \
    printf("MISMATCH %s:%d %s\n", base_name(__FILE__), __LINE__, #cond); exit(1); } } while (0)

struct Params { int a; float b; double c; char tag[8]; };

__device__ int g_scalar = 42;
__device__ int g_uninit;
__device__ float g_arr[256];
__device__ double g_out[64];
__device__ Params g_params = {7, 2.5f, -3.25, "init"};
__device__ unsigned short g_small[5] = {1, 2, 3, 4, 5};
__constant__ float c_coef[16] = {1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15, 16};
__constant__ int c_scalar;
__constant__ Params c_params;
static __device__ long long g_static_ll = -1234567890123ll;

__global__ void compute(int n) {
    int i = threadIdx.x;
    if (i < n)
        g_out[i] = (double)g_arr[i] * c_coef[i % 16] + c_scalar + c_params.a * (double)c_params.b + c_params.c;
    if (i == 0) { g_scalar += 1000; g_uninit = c_params.tag[0]; g_static_ll *= 2; }
}

int main() {
    // Initial values uploaded with the module (no kernel needed).
    int v = 0;
    CHECK(cudaMemcpyFromSymbol(&v, g_scalar, sizeof(int)));
    EXPECT(v == 42);
    Params p;
    memset(&p, 0, sizeof(p));
    CHECK(cudaMemcpyFromSymbol(&p, g_params, sizeof(p)));
    EXPECT(p.a == 7 && p.b == 2.5f && p.c == -3.25 && strcmp(p.tag, "init") == 0);
    float coef[16];
    CHECK(cudaMemcpyFromSymbol(coef, c_coef, sizeof(coef)));
    for (int i = 0; i < 16; i++) EXPECT(coef[i] == (float)(i + 1));
    unsigned short sm[3];
    CHECK(cudaMemcpyFromSymbol(sm, g_small, sizeof(sm), 2 * sizeof(unsigned short)));
    EXPECT(sm[0] == 3 && sm[1] == 4 && sm[2] == 5);
    long long ll = 0;
    CHECK(cudaMemcpyFromSymbol(&ll, g_static_ll, sizeof(ll)));
    EXPECT(ll == -1234567890123ll);
    int un = -1;
    CHECK(cudaMemcpyFromSymbol(&un, g_uninit, sizeof(int)));
    printf("initial values: ok (g_uninit=%d)\n", un);

    // Sizes.
    size_t sz = 0;
    CHECK(cudaGetSymbolSize(&sz, g_arr)); printf("size g_arr=%zu\n", sz);
    CHECK(cudaGetSymbolSize(&sz, g_params)); printf("size g_params=%zu\n", sz);
    CHECK(cudaGetSymbolSize(&sz, c_coef)); printf("size c_coef=%zu\n", sz);
    CHECK(cudaGetSymbolSize(&sz, g_small)); printf("size g_small=%zu\n", sz);
    EXPECT(sz == sizeof(g_small));

    // To/From with offsets.
    float a[256], b[256];
    for (int i = 0; i < 256; i++) a[i] = (float)i * 0.25f - 7.0f;
    CHECK(cudaMemcpyToSymbol(g_arr, a, sizeof(a)));
    CHECK(cudaMemcpyToSymbol(g_arr, a, 10 * sizeof(float), 100 * sizeof(float)));
    CHECK(cudaMemcpyFromSymbol(b, g_arr, sizeof(b)));
    for (int i = 0; i < 256; i++) EXPECT(b[i] == ((i >= 100 && i < 110) ? a[i - 100] : a[i]));
    memset(b, 0, sizeof(b));
    CHECK(cudaMemcpyFromSymbol(b, g_arr, 16 * sizeof(float), 240 * sizeof(float)));
    for (int i = 0; i < 16; i++) EXPECT(b[i] == a[240 + i]);
    CHECK(cudaMemcpyToSymbol(g_arr, a, sizeof(a)));
    printf("to/from symbol with offsets: ok\n");

    // Async variants on a stream.
    cudaStream_t s;
    CHECK(cudaStreamCreate(&s));
    int cs = 17;
    Params cp = {3, 0.5f, 100.0, "const"};
    CHECK(cudaMemcpyToSymbolAsync(c_scalar, &cs, sizeof(cs), 0, cudaMemcpyHostToDevice, s));
    CHECK(cudaMemcpyToSymbolAsync(c_params, &cp, sizeof(cp), 0, cudaMemcpyHostToDevice, s));
    Params back;
    int csb = 0;
    CHECK(cudaMemcpyFromSymbolAsync(&back, c_params, sizeof(back), 0, cudaMemcpyDeviceToHost, s));
    CHECK(cudaMemcpyFromSymbolAsync(&csb, c_scalar, sizeof(int), 0, cudaMemcpyDeviceToHost, s));
    CHECK(cudaStreamSynchronize(s));
    EXPECT(csb == 17 && back.a == 3 && back.c == 100.0 && strcmp(back.tag, "const") == 0);
    printf("async symbol copies: ok\n");

    // Symbol address + plain cudaMemcpy; device-to-device symbol copies.
    float* addr = nullptr;
    CHECK(cudaGetSymbolAddress((void**)&addr, g_arr));
    EXPECT(addr != nullptr);
    CHECK(cudaMemcpy(b, addr, sizeof(b), cudaMemcpyDeviceToHost));
    EXPECT(memcmp(a, b, sizeof(a)) == 0);
    float one = 1234.5f;
    CHECK(cudaMemcpy(addr + 5, &one, sizeof(float), cudaMemcpyHostToDevice));
    float f5 = 0;
    CHECK(cudaMemcpyFromSymbol(&f5, g_arr, sizeof(float), 5 * sizeof(float)));
    EXPECT(f5 == 1234.5f);
    CHECK(cudaMemcpyToSymbol(g_arr, &a[5], sizeof(float), 5 * sizeof(float)));
    float* dbuf;
    CHECK(cudaMalloc(&dbuf, sizeof(a)));
    CHECK(cudaMemcpyFromSymbol(dbuf, g_arr, sizeof(a), 0, cudaMemcpyDeviceToDevice));
    CHECK(cudaMemcpyToSymbol(g_arr, dbuf, 128 * sizeof(float), 128 * sizeof(float), cudaMemcpyDeviceToDevice));
    CHECK(cudaMemcpyFromSymbol(b, g_arr, sizeof(b)));
    for (int i = 0; i < 256; i++) EXPECT(b[i] == (i < 128 ? a[i] : a[i - 128]));
    CHECK(cudaMemcpyToSymbol(g_arr, a, sizeof(a), 0, cudaMemcpyDefault));
    void* paddr = nullptr;
    CHECK(cudaGetSymbolAddress(&paddr, c_params));
    Params viaaddr;
    CHECK(cudaMemcpy(&viaaddr, paddr, sizeof(viaaddr), cudaMemcpyDeviceToHost));
    EXPECT(viaaddr.a == 3 && strcmp(viaaddr.tag, "const") == 0);
    printf("symbol address copies: ok\n");

    // Errors: out-of-range offset, non-symbol address.
    printf("to symbol past end: %s\n", cudaGetErrorName(cudaMemcpyToSymbol(g_arr, a, sizeof(a), 4)));
    cudaGetLastError();
    static int not_a_symbol;
    printf("from non-symbol: %s\n", cudaGetErrorName(cudaMemcpyFromSymbol(&v, not_a_symbol, sizeof(int))));
    cudaGetLastError();
    printf("size of non-symbol: %s\n", cudaGetErrorName(cudaGetSymbolSize(&sz, not_a_symbol)));
    cudaGetLastError();

    // Kernel using constants and writing globals.
    compute<<<1, 64>>>(64);
    CHECK(cudaGetLastError());
    double out[64];
    CHECK(cudaMemcpyFromSymbol(out, g_out, sizeof(out)));
    double sum = 0;
    for (int i = 0; i < 64; i++) sum += out[i];
    printf("g_out: %.4f %.4f %.4f sum=%.4f\n", out[0], out[1], out[63], sum);
    CHECK(cudaMemcpyFromSymbol(&v, g_scalar, sizeof(int)));
    CHECK(cudaMemcpyFromSymbol(&un, g_uninit, sizeof(int)));
    CHECK(cudaMemcpyFromSymbol(&ll, g_static_ll, sizeof(ll)));
    printf("g_scalar=%d g_uninit=%d g_static_ll=%lld\n", v, un, ll);

    CHECK(cudaFree(dbuf));
    CHECK(cudaStreamDestroy(s));
    printf("done\n");
    return 0;
}
