// The cuBLAS functions beyond the GEMMs, checked against CPU computations: every
// level-1, level-2 and level-3 family in S/D/C/Z (and the mixed Csscal, Zdrot, Scnrm2,
// Icamax...), host and device pointer mode, DotEx and SgemmEx, the batched solvers
// (trsm, LU getrf/getrs, QR geqrf, least squares gels) on small matrices, the vector
// and matrix copies, and argument errors. Inputs are small integers; results print
// with limited precision, so native and forwarded runs on one GPU print the same.
// A call that fails prints its cuBLAS status or CUDA error instead of PASS/FAIL.
#include <cmath>
#include <complex>
#include <cstdio>
#include <cstdlib>
#include <string>
#include <vector>
#include <cuda_runtime.h>
#include <cuda_fp16.h>
#include <cublas_v2.h>

typedef std::complex<double> cd;
typedef std::vector<cd> vec;

static int failures = 0, errors = 0;
static cublasHandle_t h;

template <class T> struct E;
template <> struct E<float> {
    static const char c = 'S'; static const bool cx = false; typedef float R;
    static float to(cd v) { return (float)v.real(); }
    static cd from(float x) { return cd(x, 0); }
    static constexpr double tol = 1e-4;
};
template <> struct E<double> {
    static const char c = 'D'; static const bool cx = false; typedef double R;
    static double to(cd v) { return v.real(); }
    static cd from(double x) { return cd(x, 0); }
    static constexpr double tol = 1e-10;
};
template <> struct E<cuComplex> {
    static const char c = 'C'; static const bool cx = true; typedef float R;
    static cuComplex to(cd v) { return make_cuComplex((float)v.real(), (float)v.imag()); }
    static cd from(cuComplex x) { return cd(x.x, x.y); }
    static constexpr double tol = 1e-4;
};
template <> struct E<cuDoubleComplex> {
    static const char c = 'Z'; static const bool cx = true; typedef double R;
    static cuDoubleComplex to(cd v) { return make_cuDoubleComplex(v.real(), v.imag()); }
    static cd from(cuDoubleComplex x) { return cd(x.x, x.y); }
    static constexpr double tol = 1e-10;
};

// Small integers in [-3, 3] (imaginary parts too for complex types).
template <class T> static vec vals(size_t n, unsigned seed) {
    vec v(n);
    auto next = [&]() { seed = seed * 1103515245u + 12345u; return (double)((int)((seed >> 16) % 7) - 3); };
    for (auto& x : v) { double re = next(); x = cd(re, E<T>::cx ? next() : 0); }
    return v;
}

template <class T> static T* upload(const vec& v) {
    std::vector<T> hst(v.size() ? v.size() : 1);
    for (size_t i = 0; i < v.size(); i++) hst[i] = E<T>::to(v[i]);
    T* d = nullptr;
    cudaMalloc(&d, hst.size() * sizeof(T));
    cudaMemcpy(d, hst.data(), hst.size() * sizeof(T), cudaMemcpyHostToDevice);
    return d;
}

// Waits for the device; on an (asynchronous) error prints it for `what`.
static bool synced(const std::string& what) {
    cudaError_t e = cudaDeviceSynchronize();
    if (e != cudaSuccess) { printf("%s: %s\n", what.c_str(), cudaGetErrorName(e)); errors++; return false; }
    return true;
}

template <class T> static vec download(const T* d, size_t n) {
    std::vector<T> hst(n);
    cudaMemcpy(hst.data(), d, n * sizeof(T), cudaMemcpyDeviceToHost);
    vec v(n);
    for (size_t i = 0; i < n; i++) v[i] = E<T>::from(hst[i]);
    return v;
}

static void check(const std::string& what, const vec& got, const vec& want, double tol) {
    size_t bad = 0;
    cd sum = 0;
    for (size_t i = 0; i < want.size(); i++) {
        if (std::abs(got[i] - want[i]) > tol * (1 + std::abs(want[i]))) bad++;
        sum += got[i] * (double)((i % 7) + 1);
    }
    if (bad) { printf("FAIL %s: %zu of %zu differ\n", what.c_str(), bad, want.size()); failures++; }
    else printf("PASS %s sum=(%.3f,%.3f)\n", what.c_str(), sum.real(), sum.imag());
}

// Whether a cuBLAS call ran: its status, then (it may have been queued) the device's
// state after it. A failure is printed for `what`.
static bool ran(const std::string& what, cublasStatus_t s) {
    if (s != CUBLAS_STATUS_SUCCESS) { printf("%s: %s\n", what.c_str(), cublasGetStatusName(s)); errors++; return false; }
    return synced(what);
}
// Inside ONCE or a loop: a call that did not run skips the rest of that block.
#define TRY(what, x) if (!ran(what, x)) continue
#define ONCE for (int once_ = 0; once_ < 1; once_++)

// One name for the four precisions of a cuBLAS function: the first argument (a null
// pointer of the element type) picks it.
#define OVL(name, fS, fD, fC, fZ) \
    template <class... A> static cublasStatus_t name(float*, A... a) { return fS(a...); } \
    template <class... A> static cublasStatus_t name(double*, A... a) { return fD(a...); } \
    template <class... A> static cublasStatus_t name(cuComplex*, A... a) { return fC(a...); } \
    template <class... A> static cublasStatus_t name(cuDoubleComplex*, A... a) { return fZ(a...); }
OVL(axpy, cublasSaxpy, cublasDaxpy, cublasCaxpy, cublasZaxpy)
OVL(scal, cublasSscal, cublasDscal, cublasCscal, cublasZscal)
OVL(dotu, cublasSdot, cublasDdot, cublasCdotu, cublasZdotu)
OVL(dotc, cublasSdot, cublasDdot, cublasCdotc, cublasZdotc)
OVL(nrm2, cublasSnrm2, cublasDnrm2, cublasScnrm2, cublasDznrm2)
OVL(asum, cublasSasum, cublasDasum, cublasScasum, cublasDzasum)
OVL(iamax, cublasIsamax, cublasIdamax, cublasIcamax, cublasIzamax)
OVL(iamin, cublasIsamin, cublasIdamin, cublasIcamin, cublasIzamin)
OVL(copy, cublasScopy, cublasDcopy, cublasCcopy, cublasZcopy)
OVL(swap, cublasSswap, cublasDswap, cublasCswap, cublasZswap)
OVL(rotg, cublasSrotg, cublasDrotg, cublasCrotg, cublasZrotg)
OVL(gemv, cublasSgemv, cublasDgemv, cublasCgemv, cublasZgemv)
OVL(geru, cublasSger, cublasDger, cublasCgeru, cublasZgeru)
OVL(gerc, cublasSger, cublasDger, cublasCgerc, cublasZgerc)
OVL(symv, cublasSsymv, cublasDsymv, cublasCsymv, cublasZsymv)
OVL(syr, cublasSsyr, cublasDsyr, cublasCsyr, cublasZsyr)
OVL(syr2, cublasSsyr2, cublasDsyr2, cublasCsyr2, cublasZsyr2)
OVL(trmv, cublasStrmv, cublasDtrmv, cublasCtrmv, cublasZtrmv)
OVL(trsv, cublasStrsv, cublasDtrsv, cublasCtrsv, cublasZtrsv)
OVL(symm, cublasSsymm, cublasDsymm, cublasCsymm, cublasZsymm)
OVL(syrk, cublasSsyrk, cublasDsyrk, cublasCsyrk, cublasZsyrk)
OVL(syr2k, cublasSsyr2k, cublasDsyr2k, cublasCsyr2k, cublasZsyr2k)
OVL(trmm, cublasStrmm, cublasDtrmm, cublasCtrmm, cublasZtrmm)
OVL(trsm, cublasStrsm, cublasDtrsm, cublasCtrsm, cublasZtrsm)
OVL(trsmBatched, cublasStrsmBatched, cublasDtrsmBatched, cublasCtrsmBatched, cublasZtrsmBatched)
OVL(getrfBatched, cublasSgetrfBatched, cublasDgetrfBatched, cublasCgetrfBatched, cublasZgetrfBatched)
OVL(getrsBatched, cublasSgetrsBatched, cublasDgetrsBatched, cublasCgetrsBatched, cublasZgetrsBatched)
OVL(geqrfBatched, cublasSgeqrfBatched, cublasDgeqrfBatched, cublasCgeqrfBatched, cublasZgeqrfBatched)
OVL(gelsBatched, cublasSgelsBatched, cublasDgelsBatched, cublasCgelsBatched, cublasZgelsBatched)
// The Hermitian families exist for C and Z only; S and D use the symmetric ones.
OVL(hemv, cublasSsymv, cublasDsymv, cublasChemv, cublasZhemv)
OVL(hemm, cublasSsymm, cublasDsymm, cublasChemm, cublasZhemm)

template <class T> static std::string nm(const char* f) { return std::string(1, E<T>::c) + f; }

// Element i of a vector of n, inc apart, at its BLAS position.
static size_t pos(int i, int n, int inc) { return inc >= 0 ? (size_t)i * inc : (size_t)(n - 1 - i) * -inc; }
static size_t span(int n, int inc) { return n <= 0 ? 0 : (size_t)(n - 1) * std::abs(inc) + 1; }

// ---- level 1 ----

template <class T> static void level1() {
    typedef typename E<T>::R R;
    const int n = 7, incx = 1, incy = -2;
    vec x = vals<T>(span(n, incx), 1), y = vals<T>(span(n, incy), 2);
    T *dx = upload<T>(x), *dy = upload<T>(y);
    T* tag = nullptr;
    double tol = E<T>::tol;
    ONCE {   // axpy
        cd alpha(2, E<T>::cx ? -1 : 0);
        T a = E<T>::to(alpha);
        T* d = upload<T>(y);
        TRY(nm<T>("axpy"), axpy(tag, h, n, &a, dx, incx, d, incy));
        vec want = y;
        for (int i = 0; i < n; i++) want[pos(i, n, incy)] += alpha * x[pos(i, n, incx)];
        if (synced(nm<T>("axpy"))) check(nm<T>("axpy"), download(d, y.size()), want, tol);
        cudaFree(d);
    }
    ONCE {   // scal, and for complex the real-alpha Csscal / Zdscal
        cd alpha(-3, E<T>::cx ? 2 : 0);
        T a = E<T>::to(alpha);
        T* d = upload<T>(x);
        TRY(nm<T>("scal"), scal(tag, h, n, &a, d, incx));
        vec want = x;
        for (auto& v : want) v *= alpha;
        if (synced(nm<T>("scal"))) check(nm<T>("scal"), download(d, x.size()), want, tol);
        if (E<T>::cx) {
            R ra = 3;
            std::string what = E<T>::c == 'C' ? "Csscal" : "Zdscal";
            cublasStatus_t s = E<T>::c == 'C'
                ? cublasCsscal(h, n, (float*)&ra, (cuComplex*)d, incx)
                : cublasZdscal(h, n, (double*)&ra, (cuDoubleComplex*)d, incx);
            TRY(what, s);
            for (auto& v : want) v *= 3.0;
            if (synced(what)) check(what, download(d, x.size()), want, tol);
        }
        cudaFree(d);
    }
    ONCE {   // dot (dotu and dotc for complex), host results
        T r1, r2;
        TRY(nm<T>("dotu"), dotu(tag, h, n, dx, incx, dy, incy, &r1));
        TRY(nm<T>("dotc"), dotc(tag, h, n, dx, incx, dy, incy, &r2));
        cd u = 0, c = 0;
        for (int i = 0; i < n; i++) {
            u += x[pos(i, n, incx)] * y[pos(i, n, incy)];
            c += std::conj(x[pos(i, n, incx)]) * y[pos(i, n, incy)];
        }
        check(E<T>::cx ? nm<T>("dotu") : nm<T>("dot"), {E<T>::from(r1)}, {u}, tol);
        if (E<T>::cx) check(nm<T>("dotc"), {E<T>::from(r2)}, {c}, tol);
    }
    ONCE {   // nrm2, asum, iamax, iamin, host results
        R nr, as;
        int imax, imin;
        const char* p = E<T>::c == 'S' ? "S" : E<T>::c == 'D' ? "D" : E<T>::c == 'C' ? "Sc" : "Dz";
        TRY(std::string(p) + "nrm2", nrm2(tag, h, n, dx, incx, &nr));
        TRY(std::string(p) + "asum", asum(tag, h, n, dx, incx, &as));
        TRY(nm<T>("iamax"), iamax(tag, h, n, dx, incx, &imax));
        TRY(nm<T>("iamin"), iamin(tag, h, n, dx, incx, &imin));
        double sq = 0, ab = 0;
        int wmax = 0, wmin = 0;
        for (int i = 0; i < n; i++) {
            cd v = x[i];
            sq += std::norm(v);
            ab += std::fabs(v.real()) + std::fabs(v.imag());
            double m = std::fabs(v.real()) + std::fabs(v.imag());
            auto mag = [&](int k) { return std::fabs(x[k].real()) + std::fabs(x[k].imag()); };
            if (i == 0 || m > mag(wmax - 1)) wmax = i + 1;
            if (i == 0 || m < mag(wmin - 1)) wmin = i + 1;
        }
        check(std::string(p) + "nrm2", {cd(nr, 0)}, {cd(std::sqrt(sq), 0)}, tol);
        check(std::string(p) + "asum", {cd(as, 0)}, {cd(ab, 0)}, tol);
        std::string ia = std::string("I") + (char)(E<T>::c + 'a' - 'A');
        check(ia + "amax", {cd(imax, 0)}, {cd(wmax, 0)}, 0);
        check(ia + "amin", {cd(imin, 0)}, {cd(wmin, 0)}, 0);
    }
    ONCE {   // copy, swap
        T *a = upload<T>(x), *b = upload<T>(y);
        TRY(nm<T>("copy"), copy(tag, h, n, a, incx, b, incy));
        vec want = y;
        for (int i = 0; i < n; i++) want[pos(i, n, incy)] = x[pos(i, n, incx)];
        if (synced(nm<T>("copy"))) check(nm<T>("copy"), download(b, y.size()), want, 0);
        T* c = upload<T>(y);
        TRY(nm<T>("swap"), swap(tag, h, n, a, incx, c, incy));
        vec wa = x, wc = y;
        for (int i = 0; i < n; i++) std::swap(wa[pos(i, n, incx)], wc[pos(i, n, incy)]);
        if (synced(nm<T>("swap"))) {
            vec got = download(a, x.size()), got2 = download(c, y.size());
            got.insert(got.end(), got2.begin(), got2.end());
            wa.insert(wa.end(), wc.begin(), wc.end());
            check(nm<T>("swap"), got, wa, 0);
        }
        cudaFree(a); cudaFree(b); cudaFree(c);
    }
    ONCE {   // rotg: [c s; -conj(s) c] [a; b] = [r; 0]
        cd a0(3, E<T>::cx ? 1 : 0), b0(-4, E<T>::cx ? 2 : 0);
        T a = E<T>::to(a0), b = E<T>::to(b0), s;
        R c;
        TRY(nm<T>("rotg"), rotg(tag, h, &a, &b, &c, &s));
        cd sv = E<T>::from(s), r = E<T>::from(a);
        cd first = (double)c * a0 + sv * b0, second = -std::conj(sv) * a0 + (double)c * b0;
        check(nm<T>("rotg"), {first, second, cd((double)c * c + std::norm(sv), 0)}, {r, 0, 1}, tol * 10);
    }
    cudaFree(dx); cudaFree(dy);
}

// rot (all precisions and the real-sine Csrot / Zdrot), rotm and rotmg (S, D).
template <class T> static void rotations() {
    typedef typename E<T>::R R;
    const int n = 5;
    vec x = vals<T>(n, 3), y = vals<T>(n, 4);
    double tol = E<T>::tol;
    for (int real_sine = 0; real_sine < (E<T>::cx ? 2 : 1); real_sine++) {
        T *dx = upload<T>(x), *dy = upload<T>(y);
        R c = 0.6;
        cd s0(0.8, E<T>::cx && !real_sine ? 0.0 : 0.0);
        if (E<T>::cx && !real_sine) s0 = cd(0.48, 0.64);  // |s| = 0.8
        std::string what;
        cublasStatus_t st;
        if (E<T>::c == 'S') { what = "Srot"; R s = 0.8; st = cublasSrot(h, n, (float*)dx, 1, (float*)dy, 1, (float*)&c, (float*)&s); }
        else if (E<T>::c == 'D') { what = "Drot"; R s = 0.8; st = cublasDrot(h, n, (double*)dx, 1, (double*)dy, 1, (double*)&c, (double*)&s); }
        else if (real_sine) {
            R s = 0.8;
            what = E<T>::c == 'C' ? "Csrot" : "Zdrot";
            st = E<T>::c == 'C' ? cublasCsrot(h, n, (cuComplex*)dx, 1, (cuComplex*)dy, 1, (float*)&c, (float*)&s)
                                : cublasZdrot(h, n, (cuDoubleComplex*)dx, 1, (cuDoubleComplex*)dy, 1, (double*)&c, (double*)&s);
        } else {
            T s = E<T>::to(s0);
            what = nm<T>("rot");
            st = E<T>::c == 'C' ? cublasCrot(h, n, (cuComplex*)dx, 1, (cuComplex*)dy, 1, (float*)&c, (cuComplex*)&s)
                                : cublasZrot(h, n, (cuDoubleComplex*)dx, 1, (cuDoubleComplex*)dy, 1, (double*)&c, (cuDoubleComplex*)&s);
        }
        TRY(what, st);
        vec want;
        for (int i = 0; i < n; i++) want.push_back((double)c * x[i] + s0 * y[i]);
        for (int i = 0; i < n; i++) want.push_back((double)c * y[i] - std::conj(s0) * x[i]);
        if (synced(what)) {
            vec got = download(dx, n), g2 = download(dy, n);
            got.insert(got.end(), g2.begin(), g2.end());
            check(what, got, want, tol * 10);
        }
        cudaFree(dx); cudaFree(dy);
    }
}

template <class R> static void rotm_rotmg() {
    const char p = sizeof(R) == 4 ? 'S' : 'D';
    auto apply = [](const R* param, double& x, double& y) {
        double h11 = param[1], h21 = param[2], h12 = param[3], h22 = param[4];
        if (param[0] == 0) { h11 = 1; h22 = 1; }
        if (param[0] == 1) { h12 = 1; h21 = -1; }
        if (param[0] == -2) return;
        double nx = h11 * x + h12 * y, ny = h21 * x + h22 * y;
        x = nx; y = ny;
    };
    ONCE {
    std::string what = std::string(1, p) + "rotmg";
    R d1 = 4, d2 = 1, x1 = 2, y1 = 3, param[5];
    cublasStatus_t st = p == 'S' ? cublasSrotmg(h, (float*)&d1, (float*)&d2, (float*)&x1, (float*)&y1, (float*)param)
                                 : cublasDrotmg(h, (double*)&d1, (double*)&d2, (double*)&x1, (double*)&y1, (double*)param);
    TRY(what, st);
    double x = 2, y = 3;  // H [x1; y1] = [x1'; 0]
    apply(param, x, y);
    check(what, {cd(x, 0), cd(y, 0)}, {cd(x1, 0), cd(0, 0)}, 1e-4);
    }
    ONCE {
    std::string what = std::string(1, p) + "rotm";
    R prm[5] = {-1, 2, -1, 1, 3};
    std::vector<double> xs = {1, 2, -1, 3}, ys = {2, 0, 1, -2};
    vec vx, vy;
    for (double v : xs) vx.push_back(v);
    for (double v : ys) vy.push_back(v);
    R *dx = upload<R>(vx), *dy = upload<R>(vy);
    cublasStatus_t st = p == 'S' ? cublasSrotm(h, 4, (float*)dx, 1, (float*)dy, 1, (float*)prm)
                                 : cublasDrotm(h, 4, (double*)dx, 1, (double*)dy, 1, (double*)prm);
    TRY(what, st);
    vec want(8);
    for (int i = 0; i < 4; i++) { double a = xs[i], b = ys[i]; apply(prm, a, b); want[i] = a; want[4 + i] = b; }
    if (synced(what)) {
        vec got = download(dx, 4), g2 = download(dy, 4);
        got.insert(got.end(), g2.begin(), g2.end());
        check(what, got, want, 1e-4);
    }
    cudaFree(dx); cudaFree(dy);
    }
}

// Device pointer mode: scalars and results in device memory.
static void device_pointer_mode() {
    if (!ran("SetPointerMode", cublasSetPointerMode(h, CUBLAS_POINTER_MODE_DEVICE))) return;
    const int n = 6;
    vec x = vals<double>(n, 5), y = vals<double>(n, 6);
    double *dx = upload<double>(x), *dy = upload<double>(y);
    double* dres = upload<double>(vec(4, 0));
    double* dalpha = upload<double>(vec(1, cd(-2, 0)));
    int* dindex;
    cudaMalloc(&dindex, sizeof(int));
    double a[4] = {3, 4, 0, 0};  // Drotg: a, b, c, s in device memory
    double* dr = upload<double>(vec(a, a + 4));
    bool dot_ran = ran("Ddot device", cublasDdot(h, n, dx, 1, dy, 1, dres));
    bool nrm_ran = ran("Dnrm2 device", cublasDnrm2(h, n, dx, 1, dres + 1));
    bool axpy_ran = ran("Daxpy device", cublasDaxpy(h, n, dalpha, dx, 1, dy, 1));
    bool amax_ran = ran("Idamax device", cublasIdamax(h, n, dx, 1, dindex));
    bool rotg_ran = ran("Drotg device", cublasDrotg(h, dr, dr + 1, dr + 2, dr + 3));
    cublasSetPointerMode(h, CUBLAS_POINTER_MODE_HOST);
    cd dot = 0, sq = 0;
    int best = 1;
    for (int i = 0; i < n; i++) {
        dot += x[i] * y[i];
        sq += x[i] * x[i];
        if (std::fabs(x[i].real()) > std::fabs(x[best - 1].real())) best = i + 1;
    }
    vec res = download(dres, 2);
    if (dot_ran) check("Ddot device", {res[0]}, {dot}, 1e-10);
    if (nrm_ran) check("Dnrm2 device", {res[1]}, {std::sqrt(sq)}, 1e-10);
    vec want = y;
    for (int i = 0; i < n; i++) want[i] += -2.0 * x[i];
    if (axpy_ran) check("Daxpy device", download(dy, n), want, 1e-10);
    int idx = 0;
    cudaMemcpy(&idx, dindex, sizeof idx, cudaMemcpyDeviceToHost);
    if (amax_ran) check("Idamax device", {cd(idx, 0)}, {cd(best, 0)}, 0);
    vec r = download(dr, 4);  // r = 5, c = 0.6, s = 0.8
    if (rotg_ran) check("Drotg device", {r[0], r[2], r[3]}, {5, 0.6, 0.8}, 1e-10);
    cudaFree(dx); cudaFree(dy); cudaFree(dres); cudaFree(dalpha); cudaFree(dindex); cudaFree(dr);
}

// DotEx on half inputs with a float result, and SgemmEx on half inputs.
static void ex_functions() {
    const int n = 8;
    vec x = vals<float>(n, 7), y = vals<float>(n, 8);
    std::vector<__half> hx(n), hy(n);
    for (int i = 0; i < n; i++) { hx[i] = __float2half((float)x[i].real()); hy[i] = __float2half((float)y[i].real()); }
    __half *dx, *dy;
    cudaMalloc(&dx, n * sizeof(__half)); cudaMalloc(&dy, n * sizeof(__half));
    cudaMemcpy(dx, hx.data(), n * sizeof(__half), cudaMemcpyHostToDevice);
    cudaMemcpy(dy, hy.data(), n * sizeof(__half), cudaMemcpyHostToDevice);
    float r = 0;
    cd want = 0;
    for (int i = 0; i < n; i++) want += x[i] * y[i];
    cublasStatus_t s = cublasDotEx(h, n, dx, CUDA_R_16F, 1, dy, CUDA_R_16F, 1, &r, CUDA_R_32F, CUDA_R_32F);
    if (s != CUBLAS_STATUS_SUCCESS) { printf("DotEx: %s\n", cublasGetStatusName(s)); errors++; }
    else check("DotEx f16", {cd(r, 0)}, {want}, 1e-4);
    // SgemmEx: C (2x2, float) = A (2x4, half) * B (4x2, half), as [x; y] [x y]^T blocks.
    float alpha = 1, beta = 0;
    float* dc = upload<float>(vec(4, 0));
    s = cublasSgemmEx(h, CUBLAS_OP_N, CUBLAS_OP_T, 2, 2, 4, &alpha, dx, CUDA_R_16F, 2, dy, CUDA_R_16F, 2,
                      &beta, dc, CUDA_R_32F, 2);
    if (s != CUBLAS_STATUS_SUCCESS) { printf("SgemmEx: %s\n", cublasGetStatusName(s)); errors++; }
    else if (synced("SgemmEx")) {
        vec w(4, 0);
        for (int i = 0; i < 2; i++)
            for (int j = 0; j < 2; j++)
                for (int l = 0; l < 4; l++) w[i + 2 * j] += x[i + 2 * l] * y[j + 2 * l];
        check("SgemmEx f16", download(dc, 4), w, 1e-4);
    }
    cudaFree(dx); cudaFree(dy); cudaFree(dc);
}

// ---- level 2 ----

// op(A)(r, c) of a column-major matrix.
static cd opA(const vec& a, int ld, int t, int r, int c) {
    if (t == 0) return a[r + (size_t)c * ld];
    cd v = a[c + (size_t)r * ld];
    return t == 2 ? std::conj(v) : v;
}
// The full matrix of a stored triangle: symmetric, Hermitian, or triangular (zeros
// outside it, ones on a unit diagonal).
enum Shape { SYM, HERM, TRI, TRI_UNIT };
static vec full(const vec& a, int n, int ld, bool lower, Shape sh) {
    vec f((size_t)n * n);
    for (int c = 0; c < n; c++)
        for (int r = 0; r < n; r++) {
            bool stored = lower ? r >= c : r <= c;
            cd v = stored ? a[r + (size_t)c * ld] : a[c + (size_t)r * ld];
            if (sh == HERM) { if (!stored) v = std::conj(v); if (r == c) v = v.real(); }
            if (sh == TRI || sh == TRI_UNIT) { if (!stored) v = 0; if (r == c && sh == TRI_UNIT) v = 1; }
            f[r + (size_t)c * n] = v;
        }
    return f;
}
static vec matvec(const vec& a, int rows, int cols, int ld, int t, const vec& x) {
    int orows = t ? cols : rows, ocols = t ? rows : cols;
    vec y(orows, 0);
    for (int i = 0; i < orows; i++)
        for (int j = 0; j < ocols; j++) y[i] += opA(a, ld, t, i, j) * x[j];
    return y;
}

template <class T> static void level2() {
    T* tag = nullptr;
    double tol = E<T>::tol;
    const int m = 5, n = 4, lda = 6;
    cd alpha(2, E<T>::cx ? 1 : 0), beta(-1, 0);
    T a_ = E<T>::to(alpha), b_ = E<T>::to(beta);
    vec A = vals<T>((size_t)lda * n, 11);
    for (int t = 0; t < 2; t++) {  // gemv N, and T (C for complex)
        int op = t ? (E<T>::cx ? 2 : 1) : 0;
        int xl = t ? m : n, yl = t ? n : m;
        vec x = vals<T>(xl, 12), y = vals<T>((size_t)yl * 2, 13);
        T *dA = upload<T>(A), *dx = upload<T>(x), *dy = upload<T>(y);
        std::string what = nm<T>("gemv") + (t ? (E<T>::cx ? " C" : " T") : " N");
        TRY(what, gemv(tag, h, (cublasOperation_t)op, m, n, &a_, dA, lda, dx, 1, &b_, dy, 2));
        vec ax = matvec(A, m, n, lda, op, x), want = y;
        for (int i = 0; i < yl; i++) want[2 * i] = alpha * ax[i] + beta * y[2 * i];
        if (synced(what)) check(what, download(dy, y.size()), want, tol);
        cudaFree(dA); cudaFree(dx); cudaFree(dy);
    }
    for (int c = 0; c < (E<T>::cx ? 2 : 1); c++) {  // ger / geru / gerc
        vec x = vals<T>(m, 14), y = vals<T>(n, 15);
        T *dA = upload<T>(A), *dx = upload<T>(x), *dy = upload<T>(y);
        std::string what = E<T>::cx ? nm<T>(c ? "gerc" : "geru") : nm<T>("ger");
        TRY(what, (c ? gerc(tag, h, m, n, &a_, dx, 1, dy, 1, dA, lda) : geru(tag, h, m, n, &a_, dx, 1, dy, 1, dA, lda)));
        vec want = A;
        for (int j = 0; j < n; j++)
            for (int i = 0; i < m; i++) want[i + (size_t)j * lda] += alpha * x[i] * (c ? std::conj(y[j]) : y[j]);
        if (synced(what)) check(what, download(dA, A.size()), want, tol);
        cudaFree(dA); cudaFree(dx); cudaFree(dy);
    }
    const int k = 4, ldk = 5;
    vec S = vals<T>((size_t)ldk * k, 16);
    for (int herm = 0; herm < (E<T>::cx ? 2 : 1); herm++) {
        Shape sh = herm ? HERM : SYM;
        for (int lower = 0; lower < 2; lower++) {
            cublasFillMode_t uplo = lower ? CUBLAS_FILL_MODE_LOWER : CUBLAS_FILL_MODE_UPPER;
            std::string sfx = lower ? " L" : " U";
            vec F = full(S, k, ldk, lower, sh);
            vec x = vals<T>(k, 17), y = vals<T>(k, 18);
            ONCE {   // symv / hemv
                T *dS = upload<T>(S), *dx = upload<T>(x), *dy = upload<T>(y);
                std::string what = nm<T>(herm ? "hemv" : "symv") + sfx;
                TRY(what, (herm ? hemv(tag, h, uplo, k, &a_, dS, ldk, dx, 1, &b_, dy, 1)
                                : symv(tag, h, uplo, k, &a_, dS, ldk, dx, 1, &b_, dy, 1)));
                vec ax = matvec(F, k, k, k, 0, x), want(k);
                for (int i = 0; i < k; i++) want[i] = alpha * ax[i] + beta * y[i];
                if (synced(what)) check(what, download(dy, k), want, tol);
                cudaFree(dS); cudaFree(dx); cudaFree(dy);
            }
            ONCE {   // syr / her, syr2 / her2: only the stored triangle changes
                T *dS = upload<T>(S), *dx = upload<T>(x), *dS2 = upload<T>(S), *dy = upload<T>(y);
                std::string w1 = nm<T>(herm ? "her" : "syr") + sfx, w2 = nm<T>(herm ? "her2" : "syr2") + sfx;
                typename E<T>::R ra = 2;
                cublasStatus_t s1;
                if (!herm) s1 = syr(tag, h, uplo, k, &a_, dx, 1, dS, ldk);
                else if (E<T>::c == 'C') s1 = cublasCher(h, uplo, k, (float*)&ra, (cuComplex*)dx, 1, (cuComplex*)dS, ldk);
                else s1 = cublasZher(h, uplo, k, (double*)&ra, (cuDoubleComplex*)dx, 1, (cuDoubleComplex*)dS, ldk);
                bool r1 = ran(w1, s1);
                cublasStatus_t s2;
                if (!herm) s2 = syr2(tag, h, uplo, k, &a_, dx, 1, dy, 1, dS2, ldk);
                else if (E<T>::c == 'C') s2 = cublasCher2(h, uplo, k, (cuComplex*)&a_, (cuComplex*)dx, 1, (cuComplex*)dy, 1, (cuComplex*)dS2, ldk);
                else s2 = cublasZher2(h, uplo, k, (cuDoubleComplex*)&a_, (cuDoubleComplex*)dx, 1, (cuDoubleComplex*)dy, 1, (cuDoubleComplex*)dS2, ldk);
                bool r2 = ran(w2, s2);
                vec want1 = S, want2 = S;
                for (int j = 0; j < k; j++)
                    for (int i = 0; i < k; i++) {
                        if (lower ? i < j : i > j) continue;
                        size_t at = i + (size_t)j * ldk;
                        if (herm) {
                            want1[at] += 2.0 * x[i] * std::conj(x[j]);
                            want2[at] += alpha * x[i] * std::conj(y[j]) + std::conj(alpha) * y[i] * std::conj(x[j]);
                            if (i == j) { want1[at] = want1[at].real(); want2[at] = want2[at].real(); }
                        } else {
                            want1[at] += alpha * x[i] * x[j];
                            want2[at] += alpha * (x[i] * y[j] + y[i] * x[j]);
                        }
                    }
                if (r1) check(w1, download(dS, S.size()), want1, tol);
                if (r2) check(w2, download(dS2, S.size()), want2, tol);
                cudaFree(dS); cudaFree(dx); cudaFree(dS2); cudaFree(dy);
            }
        }
    }
    // trmv / trsv: b = op(A) x0, then trsv solves back to x0 (a dominant diagonal).
    vec Tm = vals<T>((size_t)ldk * k, 19);
    for (int i = 0; i < k; i++) Tm[i + (size_t)i * ldk] = cd(8 + i, E<T>::cx ? 1 : 0);
    for (int lower = 0; lower < 2; lower++)
        for (int t = 0; t < 2; t++) {
            int op = t ? (E<T>::cx ? 2 : 1) : 0;
            cublasFillMode_t uplo = lower ? CUBLAS_FILL_MODE_LOWER : CUBLAS_FILL_MODE_UPPER;
            cublasDiagType_t diag = t ? CUBLAS_DIAG_UNIT : CUBLAS_DIAG_NON_UNIT;
            std::string sfx = std::string(lower ? " L" : " U") + (t ? (E<T>::cx ? "C" : "T") : "N") + (t ? "U" : "N");
            vec F = full(Tm, k, ldk, lower, t ? TRI_UNIT : TRI);
            vec x0 = vals<T>(k, 20), b = matvec(F, k, k, k, op, x0);
            T *dA = upload<T>(Tm), *dx = upload<T>(x0), *db = upload<T>(b);
            if (ran(nm<T>("trmv") + sfx, trmv(tag, h, uplo, (cublasOperation_t)op, diag, k, dA, ldk, dx, 1)))
                check(nm<T>("trmv") + sfx, download(dx, k), b, tol);
            if (ran(nm<T>("trsv") + sfx, trsv(tag, h, uplo, (cublasOperation_t)op, diag, k, dA, ldk, db, 1)))
                check(nm<T>("trsv") + sfx, download(db, k), x0, tol * 100);
            cudaFree(dA); cudaFree(dx); cudaFree(db);
        }
}

// ---- level 3 ----

static vec matmul(const vec& a, int lda, int ta, const vec& b, int ldb, int tb, int m, int n, int k) {
    vec c((size_t)m * n, 0);
    for (int j = 0; j < n; j++)
        for (int i = 0; i < m; i++)
            for (int l = 0; l < k; l++) c[i + (size_t)j * m] += opA(a, lda, ta, i, l) * opA(b, ldb, tb, l, j);
    return c;
}

template <class T> static void level3() {
    T* tag = nullptr;
    double tol = E<T>::tol;
    typedef typename E<T>::R R;
    const int m = 4, n = 3, ld = 5;
    cd alpha(2, E<T>::cx ? -1 : 0), beta(-1, 0);
    T a_ = E<T>::to(alpha), b_ = E<T>::to(beta);
    vec B = vals<T>((size_t)ld * n, 21), C = vals<T>((size_t)ld * n, 22);
    // symm / hemm, both sides.
    for (int herm = 0; herm < (E<T>::cx ? 2 : 1); herm++)
        for (int right = 0; right < 2; right++) {
            int ka = right ? n : m;
            vec A = vals<T>((size_t)ld * ka, 23 + right);
            vec F = full(A, ka, ld, true, herm ? HERM : SYM);
            T *dA = upload<T>(A), *dB = upload<T>(B), *dC = upload<T>(C);
            std::string what = nm<T>(herm ? "hemm" : "symm") + (right ? " R" : " L");
            cublasSideMode_t side = right ? CUBLAS_SIDE_RIGHT : CUBLAS_SIDE_LEFT;
            TRY(what, (herm ? hemm(tag, h, side, CUBLAS_FILL_MODE_LOWER, m, n, &a_, dA, ld, dB, ld, &b_, dC, ld)
                            : symm(tag, h, side, CUBLAS_FILL_MODE_LOWER, m, n, &a_, dA, ld, dB, ld, &b_, dC, ld)));
            vec p = right ? matmul(B, ld, 0, F, ka, 0, m, n, n) : matmul(F, ka, 0, B, ld, 0, m, n, m);
            vec want = C;
            for (int j = 0; j < n; j++)
                for (int i = 0; i < m; i++) want[i + (size_t)j * ld] = alpha * p[i + (size_t)j * m] + beta * C[i + (size_t)j * ld];
            if (synced(what)) check(what, download(dC, C.size()), want, tol);
            cudaFree(dA); cudaFree(dB); cudaFree(dC);
        }
    // syrk / herk, syr2k / her2k: C (n x n, upper) from A (n x k, or k x n transposed).
    const int kk = 4;
    for (int herm = 0; herm < (E<T>::cx ? 2 : 1); herm++)
        for (int t = 0; t < 2; t++) {
            int op = t ? (herm ? 2 : 1) : 0;
            vec A = vals<T>((size_t)ld * (t ? n : kk), 25), A2 = vals<T>((size_t)ld * (t ? n : kk), 26);
            vec Cn = vals<T>((size_t)ld * n, 27);
            if (herm) for (int i = 0; i < n; i++) Cn[i + (size_t)i * ld] = Cn[i + (size_t)i * ld].real();
            int back = op ? 0 : (herm ? 2 : 1);  // op(A) op(A)^T: the transpose of op
            vec p = matmul(A, ld, op, A, ld, back, n, n, kk);
            vec p2a = matmul(A, ld, op, A2, ld, back, n, n, kk), p2b = matmul(A2, ld, op, A, ld, back, n, n, kk);
            std::string sfx = t ? (herm ? " C" : " T") : " N";
            T *dA = upload<T>(A), *dA2 = upload<T>(A2), *dC = upload<T>(Cn), *dC2 = upload<T>(Cn);
            std::string w1 = nm<T>(herm ? "herk" : "syrk") + sfx, w2 = nm<T>(herm ? "her2k" : "syr2k") + sfx;
            R ra = 2, rb = -1;
            cublasOperation_t o = (cublasOperation_t)op;
            cublasFillMode_t up = CUBLAS_FILL_MODE_UPPER;
            cublasStatus_t s1, s2;
            if (!herm) s1 = syrk(tag, h, up, o, n, kk, &a_, dA, ld, &b_, dC, ld);
            else if (E<T>::c == 'C') s1 = cublasCherk(h, up, o, n, kk, (float*)&ra, (cuComplex*)dA, ld, (float*)&rb, (cuComplex*)dC, ld);
            else s1 = cublasZherk(h, up, o, n, kk, (double*)&ra, (cuDoubleComplex*)dA, ld, (double*)&rb, (cuDoubleComplex*)dC, ld);
            bool r1 = ran(w1, s1);
            if (!herm) s2 = syr2k(tag, h, up, o, n, kk, &a_, dA, ld, dA2, ld, &b_, dC2, ld);
            else if (E<T>::c == 'C') s2 = cublasCher2k(h, up, o, n, kk, (cuComplex*)&a_, (cuComplex*)dA, ld, (cuComplex*)dA2, ld, (float*)&rb, (cuComplex*)dC2, ld);
            else s2 = cublasZher2k(h, up, o, n, kk, (cuDoubleComplex*)&a_, (cuDoubleComplex*)dA, ld, (cuDoubleComplex*)dA2, ld, (double*)&rb, (cuDoubleComplex*)dC2, ld);
            bool r2 = ran(w2, s2);
            vec want1 = Cn, want2 = Cn;
            cd a1 = herm ? cd(2, 0) : alpha;
            for (int j = 0; j < n; j++)
                for (int i = 0; i <= j; i++) {
                    size_t at = i + (size_t)j * ld, q = i + (size_t)j * n;
                    want1[at] = a1 * p[q] + beta * Cn[at];
                    want2[at] = alpha * p2a[q] + (herm ? std::conj(alpha) : alpha) * p2b[q] + beta * Cn[at];
                    if (herm && i == j) { want1[at] = want1[at].real(); want2[at] = want2[at].real(); }
                }
            if (r1) check(w1, download(dC, Cn.size()), want1, tol);
            if (r2) check(w2, download(dC2, Cn.size()), want2, tol);
            cudaFree(dA); cudaFree(dA2); cudaFree(dC); cudaFree(dC2);
        }
    // trmm (out of place into C) / trsm (in place, back to the original B), both sides.
    for (int right = 0; right < 2; right++) {
        int ka = right ? n : m;
        vec A = vals<T>((size_t)ld * ka, 28);
        for (int i = 0; i < ka; i++) A[i + (size_t)i * ld] = cd(6 + i, 0);
        vec F = full(A, ka, ld, false, TRI);
        cublasSideMode_t side = right ? CUBLAS_SIDE_RIGHT : CUBLAS_SIDE_LEFT;
        int op = E<T>::cx ? 2 : 1;
        vec p = right ? matmul(B, ld, 0, F, ka, op, m, n, n) : matmul(F, ka, op, B, ld, 0, m, n, m);
        vec want = C, Bp = B;
        for (int j = 0; j < n; j++)
            for (int i = 0; i < m; i++) { want[i + (size_t)j * ld] = alpha * p[i + (size_t)j * m]; Bp[i + (size_t)j * ld] = p[i + (size_t)j * m]; }
        T *dA = upload<T>(A), *dB = upload<T>(B), *dC = upload<T>(C), *dBp = upload<T>(Bp);
        std::string sfx = right ? " R" : " L";
        T one = E<T>::to(1);
        if (ran(nm<T>("trmm") + sfx, trmm(tag, h, side, CUBLAS_FILL_MODE_UPPER, (cublasOperation_t)op, CUBLAS_DIAG_NON_UNIT, m, n, &a_, dA, ld, dB, ld, dC, ld)))
            check(nm<T>("trmm") + sfx, download(dC, C.size()), want, tol);
        if (ran(nm<T>("trsm") + sfx, trsm(tag, h, side, CUBLAS_FILL_MODE_UPPER, (cublasOperation_t)op, CUBLAS_DIAG_NON_UNIT, m, n, &one, dA, ld, dBp, ld)))
            check(nm<T>("trsm") + sfx, download(dBp, B.size()), B, tol * 100);
        cudaFree(dA); cudaFree(dB); cudaFree(dC); cudaFree(dBp);
    }
}

// ---- batched solvers ----

// Device arrays of device pointers to `count` copies of the given matrices.
template <class T> static T** pointers(const std::vector<T*>& p) {
    T** d;
    cudaMalloc(&d, p.size() * sizeof(T*));
    cudaMemcpy(d, p.data(), p.size() * sizeof(T*), cudaMemcpyHostToDevice);
    return d;
}

template <class T> static void batched() {
    T* tag = nullptr;
    double tol = E<T>::tol * 100;
    const int n = 3, batch = 2, nrhs = 2;
    std::vector<vec> As, Xs, Bs;
    std::vector<T*> dA, dB;
    for (int b = 0; b < batch; b++) {
        vec A = vals<T>(n * n, 31 + b);
        for (int i = 0; i < n; i++) A[i + i * n] += 7.0;
        vec X = vals<T>(n * nrhs, 33 + b);
        As.push_back(A); Xs.push_back(X);
        Bs.push_back(matmul(A, n, 0, X, n, 0, n, nrhs, n));
        dA.push_back(upload<T>(A)); dB.push_back(upload<T>(Bs[b]));
    }
    T **dAp = pointers(dA), **dBp = pointers(dB);
    int *dpiv, *dinfo;
    cudaMalloc(&dpiv, n * batch * sizeof(int));
    cudaMalloc(&dinfo, batch * sizeof(int));
    ONCE {   // LU: getrf then getrs solves A X = B back to X.
        TRY(nm<T>("getrfBatched"), getrfBatched(tag, h, n, dAp, n, dpiv, dinfo, batch));
        int info = -99;
        TRY(nm<T>("getrsBatched"), getrsBatched(tag, h, CUBLAS_OP_N, n, nrhs, (const T* const*)dAp, n, dpiv, dBp, n, &info, batch));
        if (synced(nm<T>("getrsBatched"))) {
            int infos[batch];
            cudaMemcpy(infos, dinfo, sizeof infos, cudaMemcpyDeviceToHost);
            printf("%s info=%d infos=%d,%d\n", nm<T>("getrsBatched").c_str(), info, infos[0], infos[1]);
            vec got, want;
            for (int b = 0; b < batch; b++) {
                vec g = download(dB[b], n * nrhs);
                got.insert(got.end(), g.begin(), g.end());
                want.insert(want.end(), Xs[b].begin(), Xs[b].end());
            }
            check(nm<T>("getrf+getrsBatched"), got, want, tol);
        }
    }
    ONCE {   // trsm batched: upper triangle of the original A, left side.
        std::vector<T*> dT, dY;
        vec want;
        for (int b = 0; b < batch; b++) {
            dT.push_back(upload<T>(As[b]));
            vec F = full(As[b], n, n, false, TRI);
            dY.push_back(upload<T>(matmul(F, n, 0, Xs[b], n, 0, n, nrhs, n)));
            want.insert(want.end(), Xs[b].begin(), Xs[b].end());
        }
        T **dTp = pointers(dT), **dYp = pointers(dY);
        T one = E<T>::to(1);
        TRY(nm<T>("trsmBatched"), trsmBatched(tag, h, CUBLAS_SIDE_LEFT, CUBLAS_FILL_MODE_UPPER, CUBLAS_OP_N, CUBLAS_DIAG_NON_UNIT,
                                              n, nrhs, &one, (const T* const*)dTp, n, dYp, n, batch));
        if (synced(nm<T>("trsmBatched"))) {
            vec got;
            for (int b = 0; b < batch; b++) { vec g = download(dY[b], n * nrhs); got.insert(got.end(), g.begin(), g.end()); }
            check(nm<T>("trsmBatched"), got, want, tol);
        }
        for (auto p : dT) cudaFree(p);
        for (auto p : dY) cudaFree(p);
        cudaFree(dTp); cudaFree(dYp);
    }
    ONCE {   // QR: R^H R = A^H A, whatever the signs cuBLAS picks.
        const int m = 4, k = 3;
        std::vector<T*> dQ, dTau;
        std::vector<vec> Qs;
        for (int b = 0; b < batch; b++) {
            vec A = vals<T>(m * k, 35 + b);
            for (int i = 0; i < k; i++) A[i + i * m] += 5.0;
            Qs.push_back(A);
            dQ.push_back(upload<T>(A)); dTau.push_back(upload<T>(vec(k, 0)));
        }
        T **dQp = pointers(dQ), **dTaup = pointers(dTau);
        int info = -99;
        TRY(nm<T>("geqrfBatched"), geqrfBatched(tag, h, m, k, dQp, m, dTaup, &info, batch));
        if (synced(nm<T>("geqrfBatched"))) {
            vec got, want;
            for (int b = 0; b < batch; b++) {
                vec r = download(dQ[b], m * k), R(k * k, 0);
                for (int j = 0; j < k; j++) for (int i = 0; i <= j; i++) R[i + j * k] = r[i + j * m];
                vec rr = matmul(R, k, 2, R, k, 0, k, k, k), aa = matmul(Qs[b], m, 2, Qs[b], m, 0, k, k, m);
                got.insert(got.end(), rr.begin(), rr.end());
                want.insert(want.end(), aa.begin(), aa.end());
            }
            printf("%s info=%d\n", nm<T>("geqrfBatched").c_str(), info);
            check(nm<T>("geqrfBatched"), got, want, tol);
        }
        for (auto p : dQ) cudaFree(p);
        for (auto p : dTau) cudaFree(p);
        cudaFree(dQp); cudaFree(dTaup);
    }
    ONCE {   // Least squares (m = 4 > n = 2): the solution of the normal equations.
        const int m = 4, k = 2;
        std::vector<T*> dG, dC;
        vec want;
        for (int b = 0; b < batch; b++) {
            vec A = vals<T>(m * k, 37 + b), c = vals<T>(m, 39 + b);
            A[0] += 4.0; A[1 + m] += 4.0;
            // Solve (A^H A) x = A^H c (2x2) by Cramer's rule.
            vec N = matmul(A, m, 2, A, m, 0, k, k, m), r = matmul(A, m, 2, c, m, 0, k, 1, m);
            cd det = N[0] * N[3] - N[2] * N[1];
            want.push_back((r[0] * N[3] - N[2] * r[1]) / det);
            want.push_back((N[0] * r[1] - r[0] * N[1]) / det);
            dG.push_back(upload<T>(A)); dC.push_back(upload<T>(c));
        }
        T **dGp = pointers(dG), **dCp = pointers(dC);
        int info = -99;
        TRY(nm<T>("gelsBatched"), gelsBatched(tag, h, CUBLAS_OP_N, m, k, 1, dGp, m, dCp, m, &info, dinfo, batch));
        if (synced(nm<T>("gelsBatched"))) {
            vec got;
            for (int b = 0; b < batch; b++) { vec g = download(dC[b], k); got.insert(got.end(), g.begin(), g.end()); }
            printf("%s info=%d\n", nm<T>("gelsBatched").c_str(), info);
            check(nm<T>("gelsBatched"), got, want, tol);
        }
        for (auto p : dG) cudaFree(p);
        for (auto p : dC) cudaFree(p);
        cudaFree(dGp); cudaFree(dCp);
    }
    for (auto p : dA) cudaFree(p);
    for (auto p : dB) cudaFree(p);
    cudaFree(dAp); cudaFree(dBp); cudaFree(dpiv); cudaFree(dinfo);
}

// ---- copies and argument errors ----

static void copies() {
    cudaStream_t stream;
    cudaStreamCreate(&stream);
    double hv[8] = {1, -1, 2, -2, 3, -3, 4, -4}, back[8] = {0};
    double* d;
    cudaMalloc(&d, 16 * sizeof(double));
    cudaMemset(d, 0, 16 * sizeof(double));
    ONCE {
    TRY("SetVectorAsync", cublasSetVectorAsync(4, sizeof(double), hv, 2, d, 3, stream));  // 1, 2, 3, 4
    TRY("GetVectorAsync", cublasGetVectorAsync(4, sizeof(double), d, 3, back, 1, stream));
    cudaStreamSynchronize(stream);
    check("Set/GetVectorAsync", {back[0], back[1], back[2], back[3]}, {1, 2, 3, 4}, 0);
    // A 2x3 matrix with lda 3 into ldb 4 and back out with ldb 2.
    double m[9] = {1, 2, 0, 3, 4, 0, 5, 6, 0}, out[6] = {0};
    TRY("SetMatrixAsync", cublasSetMatrixAsync(2, 3, sizeof(double), m, 3, d, 4, stream));
    TRY("GetMatrixAsync", cublasGetMatrixAsync(2, 3, sizeof(double), d, 4, out, 2, stream));
    cudaStreamSynchronize(stream);
    check("Set/GetMatrixAsync", vec(out, out + 6), {1, 2, 3, 4, 5, 6}, 0);
    TRY("SetVector", cublasSetVector(2, sizeof(double), hv, 1, d, 1));
    TRY("GetMatrix", cublasGetMatrix(2, 1, sizeof(double), d, 2, out, 2));
    check("SetVector/GetMatrix", {out[0], out[1]}, {1, -1}, 0);
    }
    printf("SetVector(incx=0): %s\n", cublasGetStatusName(cublasSetVector(2, 8, hv, 0, d, 1)));
    cudaFree(d);
    cudaStreamDestroy(stream);
}

static void argument_errors() {
    float x = 0, r = 0;
    float* dx;
    cudaMalloc(&dx, 64 * sizeof(float));
    printf("Sgemv(lda<m): %s\n", cublasGetStatusName(cublasSgemv(h, CUBLAS_OP_N, 4, 2, &x, dx, 3, dx, 1, &x, dx, 1)));
    printf("Sgemv(incx=0): %s\n", cublasGetStatusName(cublasSgemv(h, CUBLAS_OP_N, 2, 2, &x, dx, 2, dx, 0, &x, dx, 1)));
    printf("Strsv(uplo=7): %s\n", cublasGetStatusName(cublasStrsv(h, (cublasFillMode_t)7, CUBLAS_OP_N, CUBLAS_DIAG_UNIT, 2, dx, 2, dx, 1)));
    printf("Ssyrk(n<0): %s\n", cublasGetStatusName(cublasSsyrk(h, CUBLAS_FILL_MODE_UPPER, CUBLAS_OP_N, -1, 2, &x, dx, 2, &x, dx, 2)));
    printf("Saxpy(n=0): %s\n", cublasGetStatusName(cublasSaxpy(h, 0, &x, dx, 1, dx, 1)));
    cublasStatus_t s = cublasSdot(h, -3, dx, 1, dx, 1, &r);
    printf("Sdot(n<0): %s result=%g\n", cublasGetStatusName(s), r);
    cudaFree(dx);
}

int main() {
    if (cublasCreate(&h) != CUBLAS_STATUS_SUCCESS) { printf("FAIL cublasCreate\n"); return 1; }
    level1<float>(); level1<double>(); level1<cuComplex>(); level1<cuDoubleComplex>();
    rotations<float>(); rotations<double>(); rotations<cuComplex>(); rotations<cuDoubleComplex>();
    rotm_rotmg<float>(); rotm_rotmg<double>();
    device_pointer_mode();
    ex_functions();
    level2<float>(); level2<double>(); level2<cuComplex>(); level2<cuDoubleComplex>();
    level3<float>(); level3<double>(); level3<cuComplex>(); level3<cuDoubleComplex>();
    batched<float>(); batched<double>(); batched<cuComplex>(); batched<cuDoubleComplex>();
    copies();
    argument_errors();
    cublasDestroy(h);
    printf("%s cublas_blas (%d failures, %d errors)\n", failures ? "FAIL" : "DONE", failures, errors);
    return failures ? 1 : 0;
}
