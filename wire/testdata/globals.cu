// Device globals the cubin tests read back (see ../src/cubin.rs tests).
// Regenerate the binaries with ./regen.sh; the tests only read the committed outputs.
__device__ int g = 5;
__device__ float z[3];
__constant__ float c[4] = {1.0f, 2.0f, 3.0f, 4.0f};
__constant__ int cz[2];
__device__ double d2[2] = {1.5, -2.0};

__global__ void use_globals(float *out) {
    out[0] = g + z[0] + c[1] + cz[0] + (float)d2[1];
    z[1] = 3.0f;
}
