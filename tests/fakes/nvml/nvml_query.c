/*
 * nvml_query.c - tiny test helper: dlopen()s an NVML library (default
 * "libnvidia-ml.so.1", or argv[1]) and prints what it reports, one line per
 * GPU:
 *     driver <version>
 *     count <n>
 *     gpu <index> <uuid> <pci bus id> <total MiB> <used MiB> <name...>
 * Exits 0 on success, 1 if an NVML call fails (the error is printed on
 * stderr as `error <call> <code> <string>`), 2 if the library cannot be
 * loaded.  Used by tests/cluster/cluster.sh self-test and handy for checking
 * fake_nvml.c by hand:
 *     FAKE_NVML_CONF=/some/fake-nvml.conf ./nvml_query /path/libnvidia-ml.so.1
 *
 * Build: cc -O2 -Wall -Wextra -o nvml_query nvml_query.c -ldl
 */
#include <dlfcn.h>
#include <stdio.h>
#include <string.h>

typedef void *dev_t_;
typedef struct {
    char busIdLegacy[16];
    unsigned int domain, bus, device, pciDeviceId, pciSubSystemId;
    char busId[32];
} pci_t;
typedef struct {
    unsigned int version;
    unsigned long long total, reserved, free, used;
} mem2_t;

static void *lib;
static const char *(*err_str)(int);

static void *sym(const char *name)
{
    void *p = dlsym(lib, name);
    if (!p)
        fprintf(stderr, "missing symbol %s\n", name);
    return p;
}

#define CALL(name, args)                                                   \
    do {                                                                   \
        int rc_ = name##_p args;                                           \
        if (rc_ != 0) {                                                    \
            fprintf(stderr, "error %s %d %s\n", #name, rc_, err_str(rc_)); \
            return 1;                                                      \
        }                                                                  \
    } while (0)

int main(int argc, char **argv)
{
    const char *path = argc > 1 ? argv[1] : "libnvidia-ml.so.1";
    int (*nvmlInit_v2_p)(void);
    int (*nvmlShutdown_p)(void);
    int (*nvmlSystemGetDriverVersion_p)(char *, unsigned int);
    int (*nvmlDeviceGetCount_v2_p)(unsigned int *);
    int (*nvmlDeviceGetHandleByIndex_v2_p)(unsigned int, dev_t_ *);
    int (*nvmlDeviceGetUUID_p)(dev_t_, char *, unsigned int);
    int (*nvmlDeviceGetIndex_p)(dev_t_, unsigned int *);
    int (*nvmlDeviceGetName_p)(dev_t_, char *, unsigned int);
    int (*nvmlDeviceGetPciInfo_v3_p)(dev_t_, pci_t *);
    int (*nvmlDeviceGetMemoryInfo_v2_p)(dev_t_, mem2_t *);
    char buf[96], name[96], uuid[96];
    unsigned int n, i, idx;

    lib = dlopen(path, RTLD_NOW | RTLD_LOCAL);
    if (!lib) {
        fprintf(stderr, "dlopen: %s\n", dlerror());
        return 2;
    }
    err_str = (const char *(*)(int))sym("nvmlErrorString");
    *(void **)&nvmlInit_v2_p = sym("nvmlInit_v2");
    *(void **)&nvmlShutdown_p = sym("nvmlShutdown");
    *(void **)&nvmlSystemGetDriverVersion_p = sym("nvmlSystemGetDriverVersion");
    *(void **)&nvmlDeviceGetCount_v2_p = sym("nvmlDeviceGetCount_v2");
    *(void **)&nvmlDeviceGetHandleByIndex_v2_p = sym("nvmlDeviceGetHandleByIndex_v2");
    *(void **)&nvmlDeviceGetUUID_p = sym("nvmlDeviceGetUUID");
    *(void **)&nvmlDeviceGetIndex_p = sym("nvmlDeviceGetIndex");
    *(void **)&nvmlDeviceGetName_p = sym("nvmlDeviceGetName");
    *(void **)&nvmlDeviceGetPciInfo_v3_p = sym("nvmlDeviceGetPciInfo_v3");
    *(void **)&nvmlDeviceGetMemoryInfo_v2_p = sym("nvmlDeviceGetMemoryInfo_v2");
    if (!err_str || !nvmlInit_v2_p || !nvmlShutdown_p || !nvmlSystemGetDriverVersion_p ||
        !nvmlDeviceGetCount_v2_p || !nvmlDeviceGetHandleByIndex_v2_p || !nvmlDeviceGetUUID_p ||
        !nvmlDeviceGetIndex_p || !nvmlDeviceGetName_p || !nvmlDeviceGetPciInfo_v3_p ||
        !nvmlDeviceGetMemoryInfo_v2_p)
        return 2;

    CALL(nvmlInit_v2, ());
    CALL(nvmlSystemGetDriverVersion, (buf, sizeof buf));
    printf("driver %s\n", buf);
    CALL(nvmlDeviceGetCount_v2, (&n));
    printf("count %u\n", n);
    for (i = 0; i < n; i++) {
        dev_t_ d;
        pci_t pci;
        mem2_t mem;
        CALL(nvmlDeviceGetHandleByIndex_v2, (i, &d));
        CALL(nvmlDeviceGetIndex, (d, &idx));
        CALL(nvmlDeviceGetUUID, (d, uuid, sizeof uuid));
        CALL(nvmlDeviceGetName, (d, name, sizeof name));
        CALL(nvmlDeviceGetPciInfo_v3, (d, &pci));
        memset(&mem, 0, sizeof mem);
        mem.version = (unsigned int)(sizeof mem | (2U << 24));
        CALL(nvmlDeviceGetMemoryInfo_v2, (d, &mem));
        printf("gpu %u %s %s %llu %llu %s\n", idx, uuid, pci.busId, mem.total >> 20,
               mem.used >> 20, name);
    }
    CALL(nvmlShutdown, ());
    return 0;
}
