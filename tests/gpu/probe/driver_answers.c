// tests/gpu/probe/driver_answers.c PTX: how NVIDIA's driver answers calls vmcuda copies
// its answers from: an old PTX text loaded by each entry point, and cuMemGetAttribute(_v2).
#include <cuda.h>
#include <dlfcn.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>
static char *slurp(const char *p) {
  FILE *f = fopen(p, "rb"); fseek(f, 0, SEEK_END); long n = ftell(f); rewind(f);
  char *b = calloc(n + 1, 1); fread(b, 1, n, f); fclose(f); return b;
}
int main(int argc, char **argv) {
  char *ptx = slurp(argv[1]);
  CUdevice d; CUcontext c;
  printf("init %d\n", cuInit(0)); cuDeviceGet(&d, 0); printf("ctx %d\n", cuCtxCreate(&c, NULL, 0, d));
  CUmodule m; CUresult r;
  r = cuModuleLoadData(&m, ptx); printf("cuModuleLoadData %d\n", r);
  char info[8192] = {0}, err[8192] = {0};
  CUjit_option o[5] = {CU_JIT_INFO_LOG_BUFFER_SIZE_BYTES, CU_JIT_INFO_LOG_BUFFER, CU_JIT_MAX_REGISTERS, CU_JIT_ERROR_LOG_BUFFER_SIZE_BYTES, CU_JIT_ERROR_LOG_BUFFER};
  void *v[5] = {(void *)(size_t)8192, info, (void *)(size_t)32, (void *)(size_t)8192, err};
  r = cuModuleLoadDataEx(&m, ptx, 5, o, v); printf("cuModuleLoadDataEx %d info[%s] err[%s]\n", r, info, err);
  CUlibrary l; memset(info, 0, sizeof info); memset(err, 0, sizeof err);
  r = cuLibraryLoadData(&l, ptx, NULL, NULL, 0, NULL, NULL, 0); printf("cuLibraryLoadData(no opts) %d\n", r);
  if (r == 0) { CUkernel k; r = cuLibraryGetKernel(&k, l, "matrixMul_bs16_32bit"); printf(" getKernel %d\n", r); CUfunction f; r = cuKernelGetFunction(&f, k); printf(" getFunction %d\n", r);}
  r = cuLibraryLoadData(&l, ptx, o, v, 5, NULL, NULL, 0); printf("cuLibraryLoadData(opts) %d info[%s] err[%s]\n", r, info, err);
  if (r == 0) { CUkernel k; r = cuLibraryGetKernel(&k, l, "matrixMul_bs16_32bit"); printf(" getKernel %d\n", r); CUfunction f; r = cuKernelGetFunction(&f, k); printf(" getFunction %d\n", r);}
  // The linker, as vmcuda's host measures a PTX module's globals with it.
  {
    CUlinkState ls; void *cubin; size_t cubin_len = 0;
    memset(info, 0, sizeof info); memset(err, 0, sizeof err);
    CUjit_option lo[4] = {CU_JIT_INFO_LOG_BUFFER, CU_JIT_INFO_LOG_BUFFER_SIZE_BYTES, CU_JIT_ERROR_LOG_BUFFER, CU_JIT_ERROR_LOG_BUFFER_SIZE_BYTES};
    void *lv[4] = {info, (void *)(size_t)8192, err, (void *)(size_t)8192};
    r = cuLinkCreate(4, lo, lv, &ls); printf("cuLinkCreate %d\n", r);
    r = cuLinkAddData(ls, CU_JIT_INPUT_PTX, ptx, strlen(ptx) + 1, "module", 0, NULL, NULL);
    printf("cuLinkAddData(PTX) %d err[%s]\n", r, err);
    if (r == 0) { r = cuLinkComplete(ls, &cubin, &cubin_len); printf("cuLinkComplete %d bytes %zu err[%s]\n", r, cubin_len, err); }
    cuLinkDestroy(ls);
  }
  // cuMemGetAttribute(_v2): no public signature; called with pointers to a scratch
  // buffer and small integers, each in a child so a crash is only reported.
  void *h = dlopen("libcuda.so.1", RTLD_NOW);
  const char *names[2] = {"cuMemGetAttribute", "cuMemGetAttribute_v2"};
  CUdeviceptr dp; cuMemAlloc(&dp, 1 << 20);
  for (int n = 0; n < 2; n++) {
    void *s = dlsym(h, names[n]); printf("%s at %p\n", names[n], s);
    if (!s) continue;
    typedef int (*F)(void *, long, unsigned long long, long);
    unsigned long long args[][3] = {{0, 0, 0}, {1, 0, 0}, {0, (unsigned long long)dp, 0}, {1, (unsigned long long)dp, 0}, {2, (unsigned long long)dp, 0}, {0, (unsigned long long)dp, 16}};
    for (int a = 0; a < 6; a++) {
      fflush(stdout);
      pid_t p = fork();
      if (p == 0) {
        unsigned long long buf[16] = {0};
        int rr = ((F)s)(buf, (long)args[a][0], args[a][1], (long)args[a][2]);
        printf("  %s(buf, %llu, %s, %llu) = %d buf0=%llx\n", names[n], args[a][0], args[a][1] ? "dptr" : "0", args[a][2], rr, buf[0]);
        fflush(stdout); _exit(0);
      }
      int st; waitpid(p, &st, 0); if (!WIFEXITED(st)) printf("  args %d: child died (signal %d)\n", a, WTERMSIG(st));
    }
  }
  return 0;
}
