// graph_memory_zeroed: graph memory is handed out zeroed through vmcuda, never with
// what an earlier launch left in it. Graph A allocates, fills with 0xff and frees;
// graph B allocates the same size and counts the nonzero bytes it sees, three rounds,
// at sizes with and without a 16-byte tail. Natively the driver hands the same memory
// back as it was (the count is the size times three); bridged the count is 0 (the
// host zeroes each allocation in the graph, see host-backend/src/executor/cuda/zero.rs).
// Build: nvcc -cudart shared -arch=sm_90 -o graph_memory_zeroed graph_memory_zeroed.cu
#include <cstdio>
#include <cuda_runtime.h>
__global__ void dirty(unsigned char* p, size_t n) { for (size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x; i < n; i += (size_t)gridDim.x * blockDim.x) p[i] = 0xff; }
__global__ void count(const unsigned char* p, size_t n, unsigned long long* out) { for (size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x; i < n; i += (size_t)gridDim.x * blockDim.x) if (p[i]) atomicAdd(out, 1ull); }
int main() {
    cudaStream_t s; cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking);
    unsigned long long* out; cudaMalloc(&out, 8);
    size_t sizes[] = {1000003, 4096, 33, 1 << 22};
    for (size_t n : sizes) {
        cudaGraph_t ga, gb; cudaGraphExec_t ea, eb; unsigned char* p;
        cudaStreamBeginCapture(s, cudaStreamCaptureModeGlobal);
        cudaMallocAsync((void**)&p, n, s); dirty<<<256, 256, 0, s>>>(p, n); cudaFreeAsync(p, s);
        cudaStreamEndCapture(s, &ga);
        cudaStreamBeginCapture(s, cudaStreamCaptureModeGlobal);
        cudaMallocAsync((void**)&p, n, s); count<<<256, 256, 0, s>>>(p, n, out); cudaFreeAsync(p, s);
        cudaStreamEndCapture(s, &gb);
        cudaGraphInstantiate(&ea, ga, 0); cudaGraphInstantiate(&eb, gb, 0);
        cudaMemset(out, 0, 8);
        for (int r = 0; r < 3; r++) { cudaGraphLaunch(ea, s); cudaGraphLaunch(eb, s); }
        cudaStreamSynchronize(s);
        unsigned long long c = 0; cudaMemcpy(&c, out, 8, cudaMemcpyDeviceToHost);
        size_t nodes = 0; cudaGraphGetNodes(gb, nullptr, &nodes);
        printf("size %zu: nonzero bytes seen %llu, nodes %zu, %s\n", n, c, nodes, cudaGetErrorName(cudaGetLastError()));
    }
}
