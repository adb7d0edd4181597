/* A program reaching cuDNN through the bridge's libcudnn.so.9, which does not forward
   cuDNN yet: the versions answer truthfully, every other call returns
   CUDNN_STATUS_NOT_SUPPORTED and says on stderr, once per function, what is missing.
   Declares the few cuDNN functions it calls itself (no cuDNN headers needed). */
#include <stddef.h>
#include <stdio.h>

typedef void *cudnnHandle_t;
typedef int cudnnStatus_t;
size_t cudnnGetVersion(void);
size_t cudnnGetCudartVersion(void);
size_t cudnnGetMaxDeviceVersion(void);
const char *cudnnGetErrorString(cudnnStatus_t status);
void cudnnGetLastErrorString(char *message, size_t max_size);
cudnnStatus_t cudnnCreate(cudnnHandle_t *handle);
cudnnStatus_t cudnnSetStream(cudnnHandle_t handle, void *stream);

int main(void) {
    printf("cudnnGetVersion: %zu\n", cudnnGetVersion());
    printf("cudnnGetCudartVersion: %zu\n", cudnnGetCudartVersion());
    printf("cudnnGetMaxDeviceVersion: %zu\n", cudnnGetMaxDeviceVersion());
    cudnnHandle_t h = NULL;
    cudnnStatus_t s = cudnnCreate(&h);
    printf("cudnnCreate: %d %s\n", s, cudnnGetErrorString(s));
    printf("cudnnCreate again: %d\n", cudnnCreate(&h));
    printf("cudnnSetStream: %d\n", cudnnSetStream(h, NULL));
    printf("cudnnSetStream again: %d\n", cudnnSetStream(h, NULL));
    char message[512];
    cudnnGetLastErrorString(message, sizeof message);
    printf("last error: %s\n", message);
    return 0;
}
