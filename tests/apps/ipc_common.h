// ipc_common.h: what the CUDA IPC test programs (ipc_processes.cu,
// pool_processes.cu, and bench/ipc_copy.cu) share: their checks, a refusal's code on
// stderr with IPC_SHOW_CODES=1, whole reads and writes of a pipe, the fork of the
// importing child with a pipe each way (and a socket for descriptors), and the exchange
// over the shared memory: the parent writes pattern(i) and a kernel adds 1000 to the second half; the
// child reads that, writes `marker` + i to the first quarter and a kernel adds `added`
// to the second; the parent reads that back. Kernel results are printed, not checked.
#pragma once
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>
#include <vector>
#include <cuda_runtime.h>

static const char* base_name(const char* p) { const char* s = strrchr(p, '/'); return s ? s + 1 : p; }
#define CHECK(call) do { cudaError_t e_ = (call); if (e_ != cudaSuccess) { \
    printf("FAIL %s:%d %s\n", base_name(__FILE__), __LINE__, cudaGetErrorName(e_)); exit(1); } } while (0)
#define EXPECT(cond) do { if (!(cond)) { \
    printf("MISMATCH %s:%d %s\n", base_name(__FILE__), __LINE__, #cond); exit(1); } } while (0)

// Whether `e` is a refusal; the code itself on stderr when asked.
static bool refused(const char* what, cudaError_t e) {
    if (getenv("IPC_SHOW_CODES")) fprintf(stderr, "%s: %s\n", what, cudaGetErrorName(e));
    cudaGetLastError();
    return e != cudaSuccess;
}

static void put(int fd, const void* p, size_t n) { EXPECT(write(fd, p, n) == (ssize_t)n); }
static void get(int fd, void* p, size_t n) {
    size_t got = 0;
    while (got < n) {
        ssize_t r = read(fd, (char*)p + got, n - got);
        EXPECT(r > 0);
        got += (size_t)r;
    }
}

// The importing child, forked before CUDA is touched: the parent's ends of a pipe each
// way and, where asked for, of a Unix socket pair (for descriptors; -1 without).
struct Child {
    pid_t pid;
    int to_child, from_child, sock;
};

// Fork; the child runs `importer(sock, from_parent, to_parent)` on its ends (sock -1
// without `with_socket`) and exits with what it returns.
template <typename Importer>
static Child fork_importer(bool with_socket, Importer importer) {
    int sockets[2] = {-1, -1}, to_child[2], to_parent[2];
    if (with_socket) EXPECT(socketpair(AF_UNIX, SOCK_STREAM, 0, sockets) == 0);
    EXPECT(pipe(to_child) == 0 && pipe(to_parent) == 0);
    fflush(stdout);
    pid_t pid = fork();
    EXPECT(pid >= 0);
    if (pid == 0) {
        if (with_socket) close(sockets[0]);
        close(to_child[1]);
        close(to_parent[0]);
        int rc = importer(sockets[1], to_child[0], to_parent[1]);
        fflush(stdout);
        _exit(rc);
    }
    if (with_socket) close(sockets[1]);
    close(to_child[0]);
    close(to_parent[1]);
    return Child{pid, to_child[1], to_parent[0], sockets[0]};
}

// The child's exit code once it ended (-1 when it did not exit).
static int wait_for_exit(const Child& child) {
    int status = 0;
    EXPECT(waitpid(child.pid, &status, 0) == child.pid);
    return WIFEXITED(status) ? WEXITSTATUS(status) : -1;
}

__global__ void add(int* p, int n, int v) {
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) p[i] += v;
}

// The child says it is done, then waits until the parent has freed what it shared.
static void done_then_wait_for_free(int to_parent, int from_parent) {
    char done = 'D';
    put(to_parent, &done, 1);
    char freed;
    get(from_parent, &freed, 1);
}

// The parent's two sides of that.
static void wait_for_done(const Child& child) {
    char done;
    get(child.from_child, &done, 1);
    EXPECT(done == 'D');
}
static void say_freed(const Child& child) {
    char freed = 'F';
    put(child.to_child, &freed, 1);
}

// The child's side of the exchange over `d` (`n` ints, shared with the parent), on `s`.
static void child_reads_and_writes(int* d, int n, cudaStream_t s, int (*pattern)(int), int marker,
                                   int added) {
    int q = n / 4;
    std::vector<int> h(n);
    CHECK(cudaMemcpyAsync(h.data(), d, (size_t)n * sizeof(int), cudaMemcpyDeviceToHost, s));
    CHECK(cudaStreamSynchronize(s));
    bool first = true;
    for (int i = 0; i < q; i++) first = first && h[i] == pattern(i);
    EXPECT(first);
    printf("child: reads the parent's bytes: yes\n");
    int kernel_wrong = 0;
    for (int i = n / 2; i < n; i++) kernel_wrong += h[i] != pattern(i) + 1000;
    printf("child: sees the parent's kernel, wrong elements: %d\n", kernel_wrong);
    // Its own bytes into the first quarter, and a kernel over the second.
    for (int i = 0; i < q; i++) h[i] = marker + i;
    CHECK(cudaMemcpyAsync(d, h.data(), (size_t)q * sizeof(int), cudaMemcpyHostToDevice, s));
    add<<<(q + 255) / 256, 256, 0, s>>>(d + q, q, added);
    CHECK(cudaGetLastError());
    CHECK(cudaStreamSynchronize(s));
}

// The parent's side, once the child is done.
static void parent_sees_child(const int* d, int n, int (*pattern)(int), int marker, int added) {
    int q = n / 4;
    std::vector<int> h(n);
    CHECK(cudaMemcpy(h.data(), d, (size_t)n * sizeof(int), cudaMemcpyDeviceToHost));
    bool first = true;
    for (int i = 0; i < q; i++) first = first && h[i] == marker + i;
    EXPECT(first);
    printf("parent: sees the child's bytes: yes\n");
    int kernel_wrong = 0;
    for (int i = q; i < 2 * q; i++) kernel_wrong += h[i] != pattern(i) + added;
    printf("parent: sees the child's kernel, wrong elements: %d\n", kernel_wrong);
}
