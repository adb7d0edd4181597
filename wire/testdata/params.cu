// Kernels whose parameter layouts the cubin tests check (see ../src/cubin.rs tests).
// Regenerate the binaries with ./regen.sh; the tests only read the committed outputs.
struct S {
    double d;
    int i;
    char c[12];
};

// Measured layout: offsets 0/8/16/40/48, sizes 4/8/24/1/8, 56 bytes in all.
__global__ void k(int a, float *p, S s, char c, double d) {
    if (a == 0) p[0] = (float)(s.d + s.i + s.c[3] + c + d);
}

__global__ void noparams() {}

// 22 parameters, mixing sizes so that padding shows up in the offsets.
__global__ void many(int a0, int a1, int a2, int a3, int a4, int a5, int a6, int a7,
                     int a8, int a9, float a10, float a11, double a12, double a13,
                     char a14, short a15, long long a16, int *a17, float *a18,
                     double *a19, char a20, int a21) {
    if (a17) a17[0] = a0 + a1 + a2 + a3 + a4 + a5 + a6 + a7 + a8 + a9 + (int)a10 + (int)a11
                      + (int)a12 + (int)a13 + a14 + a15 + (int)a16 + a20 + a21;
    if (a18) a18[0] = 1.0f;
    if (a19) a19[0] = 2.0;
}

template <typename T>
__global__ void tmpl(T *out, T v, int n) {
    if (n > 0) out[0] = v;
}
template __global__ void tmpl<float>(float *, float, int);
template __global__ void tmpl<double>(double *, double, int);

// Unused parameters still get a layout entry.
__global__ void unused(int a, double b, char c, int *p) { p[0] = 1; }
