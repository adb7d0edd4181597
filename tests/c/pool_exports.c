/* pool_exports: a pool exported many times (each descriptor closed by the program, as
   it owns them) and imported from the last: the guest keeps one descriptor per pool,
   not one per export, and lets it go with the pool. Prints the process's open
   descriptors at each point, and the codes. */
#include <dirent.h>
#include <stdio.h>
#include <string.h>
#include <unistd.h>

typedef void* cudaMemPool_t;
struct props {
    int alloc_type, handle_types, location_type, location_id;
    void* win32;
    size_t max_size;
    unsigned short usage;
    unsigned char reserved[54];
};
int cudaMemPoolCreate(cudaMemPool_t*, const struct props*);
int cudaMemPoolDestroy(cudaMemPool_t);
int cudaMemPoolExportToShareableHandle(void*, cudaMemPool_t, int, unsigned long long);
int cudaMemPoolImportFromShareableHandle(cudaMemPool_t*, void*, int, unsigned long long);
int cudaGetDeviceCount(int*);

static int open_fds(void) {
    int n = 0;
    DIR* d = opendir("/proc/self/fd");
    struct dirent* e;
    while (d && (e = readdir(d))) n += e->d_name[0] != '.';
    if (d) closedir(d);
    return n;
}

int main(void) {
    int count = 0;
    cudaGetDeviceCount(&count);
    struct props p;
    memset(&p, 0, sizeof p);
    p.alloc_type = 1;   /* pinned */
    p.handle_types = 1; /* POSIX file descriptor */
    p.location_type = 1; /* device */
    cudaMemPool_t pool = 0, imported = 0;
    int made = cudaMemPoolCreate(&pool, &p);
    int before = open_fds();
    int failed = 0, fd = -1;
    for (int i = 0; i < 300; i++) {
        if (fd >= 0) close(fd);
        failed += cudaMemPoolExportToShareableHandle(&fd, pool, 1, 0) != 0;
    }
    int during = open_fds();
    int import = cudaMemPoolImportFromShareableHandle(&imported, (void*)(long)fd, 1, 0);
    close(fd);
    int destroyed = cudaMemPoolDestroy(imported) | cudaMemPoolDestroy(pool);
    int after = open_fds();
    printf("made %d; 300 exports, failed %d, descriptors held beyond the program's: %d; "
           "import from the last %d; destroyed %d; descriptors left after: %d\n",
           made, failed, during - before - 1, import, destroyed, after - before);
    return 0;
}
