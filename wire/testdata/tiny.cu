// Smallest useful kernel, for the fatbinary container tests.
// Regenerate the binaries with ./regen.sh; the tests only read the committed outputs.
__global__ void tiny(int *p) { p[0] = 1; }
