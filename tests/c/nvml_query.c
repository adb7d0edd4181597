/* nvml_query: what a monitoring tool asks NVML, through the guest's libnvidia-ml.so.1
   (or the real one: the program is the same natively). Prints one line per fact, in
   a form tests/tests and tests/gpu/run-nvml.sh compare. With an argument N it first
   allocates N MiB through the CUDA runtime, so its own process and memory show. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

typedef void* nvmlDevice_t;
typedef struct { unsigned long long total, free, used; } nvmlMemory_t;
typedef struct { unsigned int gpu, memory; } nvmlUtilization_t;
typedef struct { unsigned int pid; unsigned long long usedGpuMemory; unsigned int gi, ci; } nvmlProcessInfo_t;
typedef struct {
    char busIdLegacy[16];
    unsigned int domain, bus, device, pciDeviceId, pciSubSystemId;
    char busId[32];
} nvmlPciInfo_t;

int nvmlInit_v2(void);
int nvmlShutdown(void);
const char* nvmlErrorString(int);
int nvmlSystemGetDriverVersion(char*, unsigned int);
int nvmlSystemGetCudaDriverVersion_v2(int*);
int nvmlDeviceGetCount_v2(unsigned int*);
int nvmlDeviceGetHandleByIndex_v2(unsigned int, nvmlDevice_t*);
int nvmlDeviceGetHandleByUUID(const char*, nvmlDevice_t*);
int nvmlDeviceGetHandleByPciBusId_v2(const char*, nvmlDevice_t*);
int nvmlDeviceGetIndex(nvmlDevice_t, unsigned int*);
int nvmlDeviceGetName(nvmlDevice_t, char*, unsigned int);
int nvmlDeviceGetUUID(nvmlDevice_t, char*, unsigned int);
int nvmlDeviceGetPciInfo_v3(nvmlDevice_t, nvmlPciInfo_t*);
int nvmlDeviceGetCudaComputeCapability(nvmlDevice_t, int*, int*);
int nvmlDeviceGetMemoryInfo(nvmlDevice_t, nvmlMemory_t*);
int nvmlDeviceGetUtilizationRates(nvmlDevice_t, nvmlUtilization_t*);
int nvmlDeviceGetTemperature(nvmlDevice_t, int, unsigned int*);
int nvmlDeviceGetPowerUsage(nvmlDevice_t, unsigned int*);
int nvmlDeviceGetComputeRunningProcesses_v3(nvmlDevice_t, unsigned int*, nvmlProcessInfo_t*);
int nvmlDeviceSetPowerManagementLimit(nvmlDevice_t, unsigned int);
int cudaMalloc(void**, size_t);
int cudaFree(void*);

#define MiB (1024ull * 1024ull)

int main(int argc, char** argv) {
    unsigned long long want = argc > 1 ? strtoull(argv[1], 0, 10) * MiB : 0;
    void* mem = 0;
    if (want && cudaMalloc(&mem, want) != 0) { printf("FAIL cudaMalloc\n"); return 1; }
    int r = nvmlInit_v2();
    if (r) { printf("FAIL nvmlInit_v2: %s\n", nvmlErrorString(r)); return 1; }
    char text[96];
    int cuda = 0;
    nvmlSystemGetCudaDriverVersion_v2(&cuda);
    r = nvmlSystemGetDriverVersion(text, sizeof text);
    printf("driver: %s (%d) cuda %d\n", r ? "-" : "present", r, cuda);
    unsigned int count = 0;
    nvmlDeviceGetCount_v2(&count);
    printf("devices: %u\n", count);
    for (unsigned int i = 0; i < count; i++) {
        nvmlDevice_t d, again;
        unsigned int index = 99;
        nvmlDeviceGetHandleByIndex_v2(i, &d);
        nvmlDeviceGetIndex(d, &index);
        char name[96], uuid[96];
        nvmlDeviceGetName(d, name, sizeof name);
        nvmlDeviceGetUUID(d, uuid, sizeof uuid);
        int by_uuid = nvmlDeviceGetHandleByUUID(uuid, &again) == 0 && again == d;
        nvmlPciInfo_t pci;
        memset(&pci, 0, sizeof pci);
        nvmlDeviceGetPciInfo_v3(d, &pci);
        int by_pci = nvmlDeviceGetHandleByPciBusId_v2(pci.busId, &again) == 0 && again == d;
        int ma = 0, mi = 0;
        nvmlDeviceGetCudaComputeCapability(d, &ma, &mi);
        printf("device %u: index %u name %s uuid %s bus %s cc %d.%d found by uuid %d by bus %d\n",
               i, index, name, uuid, pci.busId, ma, mi, by_uuid, by_pci);
        nvmlMemory_t m;
        nvmlDeviceGetMemoryInfo(d, &m);
        printf("device %u: memory total %llu MiB used %llu MiB free+used<=total %d\n", i,
               m.total / MiB, m.used / MiB, m.free + m.used <= m.total);
        nvmlUtilization_t u;
        unsigned int temp = 0, power = 0;
        int ru = nvmlDeviceGetUtilizationRates(d, &u);
        int rt = nvmlDeviceGetTemperature(d, 0, &temp);
        int rp = nvmlDeviceGetPowerUsage(d, &power);
        printf("device %u: readings utilization %s temperature %s power %s\n", i,
               ru ? nvmlErrorString(ru) : "ok", rt ? nvmlErrorString(rt) : "ok",
               rp ? nvmlErrorString(rp) : "ok");
        nvmlProcessInfo_t procs[64];
        unsigned int n = 0;
        int rc = nvmlDeviceGetComputeRunningProcesses_v3(d, &n, procs);
        unsigned int room = n;
        int listed = 0;
        unsigned long long mine = 0;
        if (rc == 7 || rc == 0) {
            if (room > 64) room = 64;
            n = room;
            rc = nvmlDeviceGetComputeRunningProcesses_v3(d, &n, procs);
            for (unsigned int k = 0; k < n && k < 64; k++)
                if (procs[k].pid == (unsigned int)getpid()) { listed = 1; mine = procs[k].usedGpuMemory; }
        }
        printf("device %u: processes %s; this one listed %d with at least %llu MiB %d\n", i,
               rc ? nvmlErrorString(rc) : "ok", listed, want / MiB, listed && mine >= want);
        printf("device %u: set power limit: %s\n", i, nvmlErrorString(nvmlDeviceSetPowerManagementLimit(d, 100000)));
    }
    printf("shutdown: %s\n", nvmlErrorString(nvmlShutdown()));
    if (mem) cudaFree(mem);
    return 0;
}
