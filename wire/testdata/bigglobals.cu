// A module whose zero-initialised global is far larger than the file: the cubin's
// .nv.global section is NOBITS, so only its header says 64 MiB. The compressed
// fatbinaries built from this (see ./regen.sh) must measure the same module data as
// the uncompressed one. Regenerate the binaries with ./regen.sh.
__device__ float big[16 << 20];            // 64 MiB, zero-initialised
__device__ int init[4] = {1, 2, 3, 4};     // initialised
__constant__ float coef[8] = {1, 2, 3, 4, 5, 6, 7, 8};

__global__ void touch(float *out, int i) {
    big[i] += coef[i & 7] + init[i & 3];
    out[0] = big[i];
}
