// A kernel with more than 4 KiB of parameters: nvcc describes its layout with
// EIATTR_KPARAM_INFO_V2 (0x45) instead of EIATTR_KPARAM_INFO (0x17).
// Regenerate the binaries with ./regen.sh; the tests only read the committed outputs.
struct Big {
    char b[5000];
};
__global__ void big(int a, Big s, int *p) { p[0] = s.b[p[1]] + a; }
