// stream_attributes: cudaStreamSetAttribute / GetAttribute / CopyAttributes (and the
// driver's cuStreamSetAttribute on the same stream): an access policy window over the
// program's own buffer, the synchronization policy, the priority, a copy of them to
// another stream, and a kernel on the stream. Deterministic output.
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <cuda.h>
#include <cuda_runtime.h>

static const char* base_name(const char* p) { const char* s = strrchr(p, '/'); return s ? s + 1 : p; }
#define CHECK(call) do { cudaError_t e_ = (call); if (e_ != cudaSuccess) { \
    printf("FAIL %s:%d %s\n", base_name(__FILE__), __LINE__, cudaGetErrorName(e_)); exit(1); } } while (0)

__global__ void scale(float* p, int n) {
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) p[i] = p[i] * 2 + 1;
}

int main() {
    const int n = 1 << 20;
    float* d;
    CHECK(cudaMalloc(&d, n * sizeof(float)));
    CHECK(cudaMemset(d, 0, n * sizeof(float)));
    cudaStream_t s, t;
    CHECK(cudaStreamCreateWithPriority(&s, cudaStreamNonBlocking, -1));
    CHECK(cudaStreamCreate(&t));

    cudaStreamAttrValue v;
    memset(&v, 0, sizeof v);
    v.accessPolicyWindow.base_ptr = d;
    v.accessPolicyWindow.num_bytes = 1 << 20;
    v.accessPolicyWindow.hitRatio = 0.5f;
    v.accessPolicyWindow.hitProp = cudaAccessPropertyPersisting;
    v.accessPolicyWindow.missProp = cudaAccessPropertyStreaming;
    CHECK(cudaStreamSetAttribute(s, cudaStreamAttributeAccessPolicyWindow, &v));
    memset(&v, 0, sizeof v);
    v.syncPolicy = cudaSyncPolicyYield;
    CHECK(cudaStreamSetAttribute(s, cudaStreamAttributeSynchronizationPolicy, &v));

    cudaStreamAttrValue got;
    memset(&got, 0, sizeof got);
    CHECK(cudaStreamGetAttribute(s, cudaStreamAttributeAccessPolicyWindow, &got));
    printf("window: base is the buffer %d, bytes %zu, hit ratio %.2f, hit %d, miss %d\n",
           got.accessPolicyWindow.base_ptr == d, got.accessPolicyWindow.num_bytes, got.accessPolicyWindow.hitRatio,
           (int)got.accessPolicyWindow.hitProp, (int)got.accessPolicyWindow.missProp);
    CHECK(cudaStreamGetAttribute(s, cudaStreamAttributeSynchronizationPolicy, &got));
    printf("sync policy %d\n", (int)got.syncPolicy);
    CHECK(cudaStreamGetAttribute(s, cudaStreamAttributePriority, &got));
    printf("priority %d\n", got.priority);

    // The driver's name for the same call, on the same stream.
    CUstreamAttrValue dv;
    memset(&dv, 0, sizeof dv);
    dv.syncPolicy = CU_SYNC_POLICY_SPIN;
    if (cuStreamSetAttribute((CUstream)s, CU_STREAM_ATTRIBUTE_SYNCHRONIZATION_POLICY, &dv) != CUDA_SUCCESS) {
        printf("FAIL cuStreamSetAttribute\n");
        return 1;
    }
    CHECK(cudaStreamGetAttribute(s, cudaStreamAttributeSynchronizationPolicy, &got));
    printf("sync policy after the driver's call %d\n", (int)got.syncPolicy);

    CHECK(cudaStreamCopyAttributes(t, s));
    CHECK(cudaStreamGetAttribute(t, cudaStreamAttributeAccessPolicyWindow, &got));
    printf("copied window: base is the buffer %d, bytes %zu\n", got.accessPolicyWindow.base_ptr == d,
           got.accessPolicyWindow.num_bytes);
    CHECK(cudaStreamGetAttribute(t, cudaStreamAttributeSynchronizationPolicy, &got));
    printf("copied sync policy %d\n", (int)got.syncPolicy);

    scale<<<(n + 255) / 256, 256, 0, s>>>(d, n);
    CHECK(cudaGetLastError());
    CHECK(cudaStreamSynchronize(s));
    float h[4];
    CHECK(cudaMemcpy(h, d + n - 4, sizeof h, cudaMemcpyDeviceToHost));
    printf("kernel on the stream: %.1f %.1f\n", h[0], h[3]);

    // A window reset to nothing.
    memset(&v, 0, sizeof v);
    CHECK(cudaStreamSetAttribute(s, cudaStreamAttributeAccessPolicyWindow, &v));
    CHECK(cudaStreamGetAttribute(s, cudaStreamAttributeAccessPolicyWindow, &got));
    printf("window after reset: bytes %zu\n", got.accessPolicyWindow.num_bytes);

    CHECK(cudaStreamDestroy(s));
    CHECK(cudaStreamDestroy(t));
    CHECK(cudaFree(d));
    printf("done\n");
    return 0;
}
