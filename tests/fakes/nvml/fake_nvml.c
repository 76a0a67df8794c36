/*
 * fake_nvml.c - a TEST-ONLY stand-in for NVIDIA's libnvidia-ml.so.1.
 *
 * It implements a small part of the real NVML C ABI (return type int, opaque
 * nvmlDevice_t pointers, struct layouts as in nvml.h / nvml-wrapper-sys) so
 * that code which dlopen()s "libnvidia-ml.so.1" can be exercised on machines
 * without GPUs.  It is never shipped.
 *
 * Build (tests/cluster/cluster.sh does this on `up`):
 *   cc -shared -fPIC -O2 -Wall -Wextra -o DIR/libnvidia-ml.so.1 fake_nvml.c \
 *      -DFAKE_NVML_CONF='"DIR/fake-nvml.conf"'
 *
 * CONTROL FILE
 *   Path: the environment variable FAKE_NVML_CONF if it is set and non-empty,
 *   otherwise the path compiled in with -DFAKE_NVML_CONF (slurmstepd does not
 *   pass the job's environment to plugins, so the compiled-in path is what
 *   counts inside a Slurm cluster).  The file is re-read on every
 *   nvmlInit_v2 / nvmlInitWithFlags / nvmlInit call.  A missing file means
 *   all defaults.
 *
 *   One `key=value` per line; blank lines and lines starting with '#' are
 *   ignored.  Every key may also be written as `key.HOST=value`, which applies
 *   only when gethostname() equals HOST (n1, n2, ... inside the test cluster,
 *   since each slurmd runs in its own UTS namespace).  A host-specific line
 *   always wins over a generic one, whatever the order; otherwise the last
 *   line wins.
 *
 *     count=N    number of GPUs (default 4).  cluster.sh writes one
 *                `count.nI=K` line per node, K being that node's Gres count.
 *     report=N   report N devices instead of `count` (to simulate NVML
 *                seeing fewer / more GPUs than Slurm configured).
 *     fail=WHAT  make one call fail; WHAT is a comma-separated list of
 *                  init   nvmlInit* returns NVML_ERROR_DRIVER_NOT_LOADED (9)
 *                  count  nvmlDeviceGetCount* returns NVML_ERROR_UNKNOWN (999)
 *                  uuid   nvmlDeviceGetUUID returns NVML_ERROR_UNKNOWN (999)
 *                  handle nvmlDeviceGetHandleBy* returns NVML_ERROR_UNKNOWN
 *                  none   (clears a generic fail= line for one host)
 *                Several fail= lines for the same scope replace each other.
 *     uuids=STYLE  odd UUIDs: `comma` makes device 0's `GPU-fake-HOST-0,100`,
 *                `duplicate` gives every device `GPU-fake-HOST-dup`.
 *     affinity=M0,M1,...  nvmlDeviceGetCpuAffinity: device i's CPUs as a
 *                hex mask (0x2: CPU 1), lowest 64 CPUs only; a device past
 *                the list (or no affinity= line) reports no CPUs.
 *                `fail=affinity` makes the call return NVML_ERROR_UNKNOWN.
 *     fence=DIR  devices as a process inside a device cgroup sees them, as
 *                real NVML does under Slurm's ConstrainDevices: device i is
 *                listed only if opening DIR/nvidiaI is not refused (EPERM,
 *                EACCES or ENOENT; a granted fake gives ENXIO, no driver),
 *                and the listed ones are numbered 0.. in order, each keeping
 *                its UUID, bus id and minor number.  Unset: every device.
 *
 *   Built with -DFAKE_NVML_NO_SHUTDOWN, the library lacks nvmlShutdown, on
 *   which nvml-wrapper panics when it drops its handle.
 *     hang=S     make every nvmlInit* sleep S seconds (after logging its
 *                `init` line, before answering), as real NVML blocks when a
 *                GPU has fallen off the bus.  The sleep is interruptible
 *                (SIGKILL ends it); `hang=0` (the default) does not sleep.
 *
 * LOG FILE
 *   `fake-nvml.log` in the directory of the control file.  Every nvmlInit*
 *   call, successful or not, appends one line `init HOSTNAME PID\n` with a
 *   single O_APPEND write(), so tests can count initialisations per step.
 *
 * DEVICES
 *   index i: UUID `GPU-fake-HOSTNAME-i`, name `Fake NVIDIA GPU`, PCI bus id
 *   `00000000:XX:00.0` with XX = i+1 in hex, minor number i, 80 GiB of memory
 *   of which 1 MiB is used.  nvmlDevice_t handles are (void *)(i + 1).
 *
 * SLURM'S gpu/nvml (gres.conf AutoDetect=nvml, tests/cluster/autodetect.sh)
 *   also calls what follows; each answers as real NVML does for a GPU that
 *   is MIG-capable with MIG disabled, has no NVLink and runs no process:
 *     MIG mode disabled (current and pending), at most 0 MIG devices, no MIG
 *     device at any index (NOT_FOUND); instance ids and attributes are for
 *     MIG devices only (NOT_SUPPORTED); NVLink state and remote PCI info
 *     NOT_SUPPORTED; no running compute or graphics processes; no process
 *     utilization samples (NOT_FOUND).
 *     Clocks: one memory clock (FAKE_MEM_CLOCK) with three graphics clocks;
 *     the current and applications clocks read as the defaults; setting a
 *     supported pair (24.11) or locking within the supported range (26.05)
 *     succeeds but is not remembered, anything else is INVALID_ARGUMENT;
 *     resets succeed.
 *   Slurm fatal()s on a GPU with no CPUs, so AutoDetect needs affinity=.
 */
#define _GNU_SOURCE
#include <ctype.h>
#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#ifndef FAKE_NVML_CONF
#define FAKE_NVML_CONF "/tmp/desi-gpu-map-cluster/nvml/fake-nvml.conf"
#endif

#define EXPORT __attribute__((visibility("default")))

/* ---- NVML ABI -------------------------------------------------------- */

typedef int nvmlReturn_t;
typedef struct nvmlDevice_st *nvmlDevice_t;

#define NVML_SUCCESS 0
#define NVML_ERROR_UNINITIALIZED 1
#define NVML_ERROR_INVALID_ARGUMENT 2
#define NVML_ERROR_NOT_SUPPORTED 3
#define NVML_ERROR_NOT_FOUND 6
#define NVML_ERROR_INSUFFICIENT_SIZE 7
#define NVML_ERROR_DRIVER_NOT_LOADED 9
#define NVML_ERROR_ARGUMENT_VERSION_MISMATCH 25
#define NVML_ERROR_UNKNOWN 999

typedef struct nvmlPciInfo_st {
    char busIdLegacy[16];
    unsigned int domain;
    unsigned int bus;
    unsigned int device;
    unsigned int pciDeviceId;
    unsigned int pciSubSystemId;
    char busId[32];
} nvmlPciInfo_t;

typedef struct nvmlMemory_st {
    unsigned long long total;
    unsigned long long free;
    unsigned long long used;
} nvmlMemory_t;

typedef struct nvmlMemory_v2_st {
    unsigned int version;
    unsigned long long total;
    unsigned long long reserved;
    unsigned long long free;
    unsigned long long used;
} nvmlMemory_v2_t;

#define NVML_STRUCT_VERSION(s, v) ((unsigned int)(sizeof(s) | ((v) << 24U)))
#define nvmlMemory_v2 NVML_STRUCT_VERSION(nvmlMemory_v2_t, 2)

#define FAKE_MEM_TOTAL (80ULL << 30)
#define FAKE_MEM_USED (1ULL << 20)
#define FAKE_MEM_RESERVED 0ULL
#define FAKE_DRIVER_VERSION "999.99.fake"
#define FAKE_NVML_VERSION "12.999.99.fake"
#define FAKE_NAME "Fake NVIDIA GPU"
#define FAKE_PCI_DEVICE_ID 0x233010deU /* device 0x2330 (H100), vendor 0x10de */
#define FAKE_PCI_SUBSYS_ID 0x16c110deU
#define FAKE_MEM_CLOCK 2619U /* MHz, the only memory clock */
#define FAKE_GFX_CLOCK 1755U /* MHz, the default graphics applications clock */

/* Supported graphics clocks at FAKE_MEM_CLOCK, highest first as in NVML. */
static const unsigned int gfx_clocks[] = {1980U, FAKE_GFX_CLOCK, 1410U};
#define GFX_CLOCKS (sizeof gfx_clocks / sizeof gfx_clocks[0])

/* nvmlClockType_t */
#define NVML_CLOCK_GRAPHICS 0
#define NVML_CLOCK_SM 1
#define NVML_CLOCK_MEM 2
#define NVML_CLOCK_VIDEO 3

#define NVML_DEVICE_MIG_DISABLE 0U

/* Structures only ever filled by MIG devices or running processes, which
 * the fake never has: their layout does not matter here. */
typedef struct nvmlDeviceAttributes_st nvmlDeviceAttributes_t;
typedef struct nvmlProcessInfo_st nvmlProcessInfo_t;
typedef struct nvmlProcessUtilizationSample_st nvmlProcessUtilizationSample_t;
typedef int nvmlEnableState_t;
typedef int nvmlClockType_t;

/* ---- state ----------------------------------------------------------- */

enum { FAIL_INIT = 1, FAIL_COUNT = 2, FAIL_UUID = 4, FAIL_HANDLE = 8, FAIL_AFFINITY = 16 };

static pthread_mutex_t lock = PTHREAD_MUTEX_INITIALIZER;
static int init_refcount;
static unsigned int dev_count; /* the devices there are (count= or report=) */
static unsigned int fail_mask;
static char uuid_style[128];  /* uuids=: "", "comma" or "duplicate" */
static char affinity[128];    /* affinity=: per-device hex masks */
static char fence[200];       /* fence=: where to try the device nodes */
#define MAX_FAKE_GPUS 64
static unsigned int listed[MAX_FAKE_GPUS]; /* the devices listed, by index */
static unsigned int listed_count;
static unsigned int hang_secs; /* how long nvmlInit* sleeps */
static char host[256];

struct setting {
    int prio; /* 0 = unset, 1 = generic, 2 = host-specific */
    char value[128];
};

static const char *conf_path(void)
{
    const char *env = getenv("FAKE_NVML_CONF");
    return (env && *env) ? env : FAKE_NVML_CONF;
}

static void get_host(void)
{
    if (gethostname(host, sizeof host - 1) != 0)
        strcpy(host, "unknown");
    host[sizeof host - 1] = '\0';
}

static char *trim(char *s)
{
    char *e;
    while (isspace((unsigned char)*s))
        s++;
    e = s + strlen(s);
    while (e > s && isspace((unsigned char)e[-1]))
        *--e = '\0';
    return s;
}

static void set(struct setting *st, int prio, const char *value)
{
    if (prio < st->prio)
        return;
    st->prio = prio;
    snprintf(st->value, sizeof st->value, "%s", value);
}

static unsigned int parse_fail(const char *v)
{
    unsigned int mask = 0;
    char buf[128], *tok, *save = NULL;
    snprintf(buf, sizeof buf, "%s", v);
    for (tok = strtok_r(buf, ",", &save); tok; tok = strtok_r(NULL, ",", &save)) {
        tok = trim(tok);
        if (!strcmp(tok, "init"))
            mask |= FAIL_INIT;
        else if (!strcmp(tok, "count"))
            mask |= FAIL_COUNT;
        else if (!strcmp(tok, "uuid"))
            mask |= FAIL_UUID;
        else if (!strcmp(tok, "handle"))
            mask |= FAIL_HANDLE;
        else if (!strcmp(tok, "affinity"))
            mask |= FAIL_AFFINITY;
    }
    return mask;
}

/* Device i, as a process here may open it: with no fence=, every device. */
static int may_open(unsigned int i)
{
    char path[300];
    int fd;
    if (!*fence)
        return 1;
    snprintf(path, sizeof path, "%s/nvidia%u", fence, i);
    fd = open(path, O_RDWR | O_NONBLOCK | O_CLOEXEC);
    if (fd >= 0) {
        close(fd);
        return 1;
    }
    return errno != EPERM && errno != EACCES && errno != ENOENT;
}

static void list_devices(void)
{
    unsigned int i;
    listed_count = 0;
    for (i = 0; i < dev_count; i++)
        if (may_open(i))
            listed[listed_count++] = i;
}

static void read_conf(void)
{
    struct setting count = {0, "4"}, report = {0, ""}, fail = {0, ""}, uuids = {0, ""},
                   hang = {0, "0"}, aff = {0, ""}, fen = {0, ""};
    char line[512];
    FILE *f = fopen(conf_path(), "re");

    if (f) {
        while (fgets(line, sizeof line, f)) {
            char *l = trim(line), *eq, *key, *val, *dot;
            int prio = 1;
            if (!*l || *l == '#' || !(eq = strchr(l, '=')))
                continue;
            *eq = '\0';
            key = trim(l);
            val = trim(eq + 1);
            if ((dot = strchr(key, '.'))) {
                *dot = '\0';
                if (strcmp(dot + 1, host) != 0)
                    continue;
                prio = 2;
            }
            if (!strcmp(key, "count"))
                set(&count, prio, val);
            else if (!strcmp(key, "report"))
                set(&report, prio, val);
            else if (!strcmp(key, "fail"))
                set(&fail, prio, val);
            else if (!strcmp(key, "uuids"))
                set(&uuids, prio, val);
            else if (!strcmp(key, "hang"))
                set(&hang, prio, val);
            else if (!strcmp(key, "affinity"))
                set(&aff, prio, val);
            else if (!strcmp(key, "fence"))
                set(&fen, prio, val);
        }
        fclose(f);
    }
    dev_count = (unsigned int)strtoul(report.prio ? report.value : count.value, NULL, 10);
    fail_mask = parse_fail(fail.value);
    snprintf(uuid_style, sizeof uuid_style, "%s", uuids.value);
    hang_secs = (unsigned int)strtoul(hang.value, NULL, 10);
    snprintf(affinity, sizeof affinity, "%s", aff.value);
    snprintf(fence, sizeof fence, "%s", fen.value);
    if (dev_count > MAX_FAKE_GPUS)
        dev_count = MAX_FAKE_GPUS;
    list_devices();
}

/* Sleeps `secs` seconds in full, resuming after signals that are caught. */
static void hang_for(unsigned int secs)
{
    struct timespec left = {(time_t)secs, 0};
    while (nanosleep(&left, &left) != 0 && errno == EINTR)
        ;
}

static void log_init(void)
{
    char path[4096], line[512];
    const char *conf = conf_path();
    const char *slash = strrchr(conf, '/');
    int fd, n;

    if (slash)
        snprintf(path, sizeof path, "%.*s/fake-nvml.log", (int)(slash - conf), conf);
    else
        snprintf(path, sizeof path, "fake-nvml.log");
    n = snprintf(line, sizeof line, "init %s %ld\n", host, (long)getpid());
    fd = open(path, O_WRONLY | O_APPEND | O_CREAT | O_CLOEXEC, 0666);
    if (fd < 0)
        return;
    if (write(fd, line, (size_t)n) < 0) {
        /* nothing sensible to do in a fake */
    }
    close(fd);
}

static nvmlReturn_t do_init(void)
{
    nvmlReturn_t ret = NVML_SUCCESS;
    unsigned int hang;
    pthread_mutex_lock(&lock);
    get_host();
    read_conf();
    log_init();
    hang = hang_secs;
    pthread_mutex_unlock(&lock);
    if (hang)
        hang_for(hang);
    pthread_mutex_lock(&lock);
    if (fail_mask & FAIL_INIT)
        ret = NVML_ERROR_DRIVER_NOT_LOADED;
    else
        init_refcount++;
    pthread_mutex_unlock(&lock);
    return ret;
}

static int ready(void)
{
    return init_refcount > 0;
}

/* handle -> the device's own number (its minor), or -1 */
static long dev_index(nvmlDevice_t dev)
{
    unsigned long v = (unsigned long)(void *)dev;
    unsigned int j;
    for (j = 0; j < listed_count; j++)
        if (listed[j] + 1UL == v)
            return (long)(v - 1);
    return -1;
}

static nvmlReturn_t copy_str(char *dst, unsigned int len, const char *src)
{
    if (!dst)
        return NVML_ERROR_INVALID_ARGUMENT;
    if (strlen(src) + 1 > len)
        return NVML_ERROR_INSUFFICIENT_SIZE;
    memcpy(dst, src, strlen(src) + 1);
    return NVML_SUCCESS;
}

#define CHECK_DEV(dev, idx)                          \
    long idx;                                        \
    if (!ready())                                    \
        return NVML_ERROR_UNINITIALIZED;             \
    if ((idx = dev_index(dev)) < 0)                  \
        return NVML_ERROR_INVALID_ARGUMENT;

/* ---- API ------------------------------------------------------------- */

EXPORT nvmlReturn_t nvmlInit_v2(void) { return do_init(); }
EXPORT nvmlReturn_t nvmlInit(void) { return do_init(); }
EXPORT nvmlReturn_t nvmlInitWithFlags(unsigned int flags)
{
    (void)flags;
    return do_init();
}

#ifndef FAKE_NVML_NO_SHUTDOWN
EXPORT nvmlReturn_t nvmlShutdown(void)
{
    nvmlReturn_t ret = NVML_SUCCESS;
    pthread_mutex_lock(&lock);
    if (init_refcount > 0)
        init_refcount--;
    else
        ret = NVML_ERROR_UNINITIALIZED;
    pthread_mutex_unlock(&lock);
    return ret;
}
#endif

EXPORT const char *nvmlErrorString(nvmlReturn_t r)
{
    switch (r) {
    case NVML_SUCCESS: return "Success";
    case NVML_ERROR_UNINITIALIZED: return "Uninitialized";
    case NVML_ERROR_INVALID_ARGUMENT: return "Invalid Argument";
    case NVML_ERROR_NOT_SUPPORTED: return "Not Supported";
    case NVML_ERROR_NOT_FOUND: return "Not Found";
    case NVML_ERROR_INSUFFICIENT_SIZE: return "Insufficient Size";
    case NVML_ERROR_DRIVER_NOT_LOADED: return "Driver Not Loaded";
    case NVML_ERROR_ARGUMENT_VERSION_MISMATCH: return "Argument Version Mismatch";
    case NVML_ERROR_UNKNOWN: return "Unknown Error";
    default: return "Unknown Error (fake nvml)";
    }
}

EXPORT nvmlReturn_t nvmlSystemGetDriverVersion(char *version, unsigned int length)
{
    if (!ready())
        return NVML_ERROR_UNINITIALIZED;
    return copy_str(version, length, FAKE_DRIVER_VERSION);
}

EXPORT nvmlReturn_t nvmlSystemGetNVMLVersion(char *version, unsigned int length)
{
    return copy_str(version, length, FAKE_NVML_VERSION);
}

EXPORT nvmlReturn_t nvmlDeviceGetCount_v2(unsigned int *count)
{
    if (!ready())
        return NVML_ERROR_UNINITIALIZED;
    if (!count)
        return NVML_ERROR_INVALID_ARGUMENT;
    if (fail_mask & FAIL_COUNT)
        return NVML_ERROR_UNKNOWN;
    *count = listed_count;
    return NVML_SUCCESS;
}

EXPORT nvmlReturn_t nvmlDeviceGetCount(unsigned int *count)
{
    return nvmlDeviceGetCount_v2(count);
}

EXPORT nvmlReturn_t nvmlDeviceGetHandleByIndex_v2(unsigned int index, nvmlDevice_t *device)
{
    if (!ready())
        return NVML_ERROR_UNINITIALIZED;
    if (!device || index >= listed_count)
        return NVML_ERROR_INVALID_ARGUMENT;
    if (fail_mask & FAIL_HANDLE)
        return NVML_ERROR_UNKNOWN;
    *device = (nvmlDevice_t)(void *)(unsigned long)(listed[index] + 1);
    return NVML_SUCCESS;
}

EXPORT nvmlReturn_t nvmlDeviceGetHandleByIndex(unsigned int index, nvmlDevice_t *device)
{
    return nvmlDeviceGetHandleByIndex_v2(index, device);
}

static void fake_uuid(unsigned long idx, char *buf, size_t len)
{
    if (!strcmp(uuid_style, "duplicate"))
        snprintf(buf, len, "GPU-fake-%s-dup", host);
    else if (!strcmp(uuid_style, "comma") && idx == 0)
        snprintf(buf, len, "GPU-fake-%s-0,100", host);
    else
        snprintf(buf, len, "GPU-fake-%s-%lu", host, idx);
}

EXPORT nvmlReturn_t nvmlDeviceGetHandleByUUID(const char *uuid, nvmlDevice_t *device)
{
    char buf[300];
    unsigned int j, i;
    if (!ready())
        return NVML_ERROR_UNINITIALIZED;
    if (!uuid || !device)
        return NVML_ERROR_INVALID_ARGUMENT;
    if (fail_mask & FAIL_HANDLE)
        return NVML_ERROR_UNKNOWN;
    for (j = 0; j < listed_count; j++) {
        i = listed[j];
        fake_uuid(i, buf, sizeof buf);
        if (!strcmp(buf, uuid)) {
            *device = (nvmlDevice_t)(void *)(unsigned long)(i + 1);
            return NVML_SUCCESS;
        }
    }
    return NVML_ERROR_NOT_FOUND;
}

EXPORT nvmlReturn_t nvmlDeviceGetUUID(nvmlDevice_t device, char *uuid, unsigned int length)
{
    char buf[300];
    CHECK_DEV(device, idx);
    if (fail_mask & FAIL_UUID)
        return NVML_ERROR_UNKNOWN;
    fake_uuid((unsigned long)idx, buf, sizeof buf);
    return copy_str(uuid, length, buf);
}

EXPORT nvmlReturn_t nvmlDeviceGetIndex(nvmlDevice_t device, unsigned int *index)
{
    unsigned int j;
    CHECK_DEV(device, idx);
    if (!index)
        return NVML_ERROR_INVALID_ARGUMENT;
    for (j = 0; j < listed_count && listed[j] != (unsigned int)idx; j++)
        ;
    *index = j;
    return NVML_SUCCESS;
}

EXPORT nvmlReturn_t nvmlDeviceGetMinorNumber(nvmlDevice_t device, unsigned int *minor)
{
    CHECK_DEV(device, idx);
    if (!minor)
        return NVML_ERROR_INVALID_ARGUMENT;
    *minor = (unsigned int)idx;
    return NVML_SUCCESS;
}

EXPORT nvmlReturn_t nvmlDeviceGetName(nvmlDevice_t device, char *name, unsigned int length)
{
    CHECK_DEV(device, idx);
    (void)idx;
    return copy_str(name, length, FAKE_NAME);
}

EXPORT nvmlReturn_t nvmlDeviceGetPciInfo_v3(nvmlDevice_t device, nvmlPciInfo_t *pci)
{
    CHECK_DEV(device, idx);
    if (!pci)
        return NVML_ERROR_INVALID_ARGUMENT;
    memset(pci, 0, sizeof *pci);
    pci->domain = 0;
    pci->bus = (unsigned int)idx + 1;
    pci->device = 0;
    pci->pciDeviceId = FAKE_PCI_DEVICE_ID;
    pci->pciSubSystemId = FAKE_PCI_SUBSYS_ID;
    snprintf(pci->busIdLegacy, sizeof pci->busIdLegacy, "0000:%02X:00.0", pci->bus & 0xffU);
    snprintf(pci->busId, sizeof pci->busId, "00000000:%02X:00.0", pci->bus & 0xffU);
    return NVML_SUCCESS;
}

EXPORT nvmlReturn_t nvmlDeviceGetMemoryInfo(nvmlDevice_t device, nvmlMemory_t *mem)
{
    CHECK_DEV(device, idx);
    (void)idx;
    if (!mem)
        return NVML_ERROR_INVALID_ARGUMENT;
    mem->total = FAKE_MEM_TOTAL;
    mem->used = FAKE_MEM_USED;
    mem->free = FAKE_MEM_TOTAL - FAKE_MEM_USED;
    return NVML_SUCCESS;
}

EXPORT nvmlReturn_t nvmlDeviceGetMemoryInfo_v2(nvmlDevice_t device, nvmlMemory_v2_t *mem)
{
    CHECK_DEV(device, idx);
    (void)idx;
    if (!mem)
        return NVML_ERROR_INVALID_ARGUMENT;
    if (mem->version != nvmlMemory_v2)
        return NVML_ERROR_ARGUMENT_VERSION_MISMATCH;
    mem->total = FAKE_MEM_TOTAL;
    mem->reserved = FAKE_MEM_RESERVED;
    mem->used = FAKE_MEM_USED;
    mem->free = FAKE_MEM_TOTAL - FAKE_MEM_RESERVED - FAKE_MEM_USED;
    return NVML_SUCCESS;
}

/* Device idx's entry of affinity=, or 0 when there is none. */
static unsigned long affinity_of(long idx)
{
    char buf[128], *tok, *save = NULL;
    long i = 0;
    snprintf(buf, sizeof buf, "%s", affinity);
    for (tok = strtok_r(buf, ",", &save); tok; tok = strtok_r(NULL, ",", &save), i++)
        if (i == idx)
            return strtoul(trim(tok), NULL, 16);
    return 0;
}

EXPORT nvmlReturn_t nvmlDeviceGetCpuAffinity(nvmlDevice_t device, unsigned int cpuSetSize,
                                             unsigned long *cpuSet)
{
    CHECK_DEV(device, idx);
    if (!cpuSet || cpuSetSize == 0)
        return NVML_ERROR_INVALID_ARGUMENT;
    if (fail_mask & FAIL_AFFINITY)
        return NVML_ERROR_UNKNOWN;
    memset(cpuSet, 0, cpuSetSize * sizeof *cpuSet);
    cpuSet[0] = affinity_of(idx);
    return NVML_SUCCESS;
}

/* ---- what Slurm's gpu/nvml also calls: no MIG, no NVLink, no process --- */

EXPORT nvmlReturn_t nvmlDeviceGetMigMode(nvmlDevice_t device, unsigned int *currentMode,
                                         unsigned int *pendingMode)
{
    CHECK_DEV(device, idx);
    (void)idx;
    if (!currentMode || !pendingMode)
        return NVML_ERROR_INVALID_ARGUMENT;
    *currentMode = NVML_DEVICE_MIG_DISABLE;
    *pendingMode = NVML_DEVICE_MIG_DISABLE;
    return NVML_SUCCESS;
}

EXPORT nvmlReturn_t nvmlDeviceGetMaxMigDeviceCount(nvmlDevice_t device, unsigned int *count)
{
    CHECK_DEV(device, idx);
    (void)idx;
    if (!count)
        return NVML_ERROR_INVALID_ARGUMENT;
    *count = 0; /* NVML's answer when MIG is disabled */
    return NVML_SUCCESS;
}

EXPORT nvmlReturn_t nvmlDeviceGetMigDeviceHandleByIndex(nvmlDevice_t device, unsigned int index,
                                                        nvmlDevice_t *migDevice)
{
    CHECK_DEV(device, idx);
    (void)idx;
    (void)index;
    if (!migDevice)
        return NVML_ERROR_INVALID_ARGUMENT;
    return NVML_ERROR_NOT_FOUND;
}

/* Instance ids and attributes exist for MIG device handles only. */
EXPORT nvmlReturn_t nvmlDeviceGetGpuInstanceId(nvmlDevice_t device, unsigned int *id)
{
    CHECK_DEV(device, idx);
    (void)idx;
    return id ? NVML_ERROR_NOT_SUPPORTED : NVML_ERROR_INVALID_ARGUMENT;
}

EXPORT nvmlReturn_t nvmlDeviceGetComputeInstanceId(nvmlDevice_t device, unsigned int *id)
{
    CHECK_DEV(device, idx);
    (void)idx;
    return id ? NVML_ERROR_NOT_SUPPORTED : NVML_ERROR_INVALID_ARGUMENT;
}

EXPORT nvmlReturn_t nvmlDeviceGetAttributes_v2(nvmlDevice_t device,
                                               nvmlDeviceAttributes_t *attributes)
{
    CHECK_DEV(device, idx);
    (void)idx;
    return attributes ? NVML_ERROR_NOT_SUPPORTED : NVML_ERROR_INVALID_ARGUMENT;
}

EXPORT nvmlReturn_t nvmlDeviceGetNvLinkState(nvmlDevice_t device, unsigned int link,
                                             nvmlEnableState_t *isActive)
{
    CHECK_DEV(device, idx);
    (void)idx;
    (void)link;
    return isActive ? NVML_ERROR_NOT_SUPPORTED : NVML_ERROR_INVALID_ARGUMENT;
}

EXPORT nvmlReturn_t nvmlDeviceGetNvLinkRemotePciInfo_v2(nvmlDevice_t device, unsigned int link,
                                                        nvmlPciInfo_t *pci)
{
    CHECK_DEV(device, idx);
    (void)idx;
    (void)link;
    return pci ? NVML_ERROR_NOT_SUPPORTED : NVML_ERROR_INVALID_ARGUMENT;
}

/* No process runs on a fake GPU: zero entries, whatever the buffer. */
static nvmlReturn_t no_processes(nvmlDevice_t device, unsigned int *infoCount)
{
    CHECK_DEV(device, idx);
    (void)idx;
    if (!infoCount)
        return NVML_ERROR_INVALID_ARGUMENT;
    *infoCount = 0;
    return NVML_SUCCESS;
}

EXPORT nvmlReturn_t nvmlDeviceGetComputeRunningProcesses_v3(nvmlDevice_t device,
                                                            unsigned int *infoCount,
                                                            nvmlProcessInfo_t *infos)
{
    (void)infos;
    return no_processes(device, infoCount);
}

EXPORT nvmlReturn_t nvmlDeviceGetGraphicsRunningProcesses_v3(nvmlDevice_t device,
                                                             unsigned int *infoCount,
                                                             nvmlProcessInfo_t *infos)
{
    (void)infos;
    return no_processes(device, infoCount);
}

EXPORT nvmlReturn_t nvmlDeviceGetProcessUtilization(nvmlDevice_t device,
                                                    nvmlProcessUtilizationSample_t *utilization,
                                                    unsigned int *processSamplesCount,
                                                    unsigned long long lastSeenTimeStamp)
{
    CHECK_DEV(device, idx);
    (void)idx;
    (void)utilization;
    (void)lastSeenTimeStamp;
    if (!processSamplesCount)
        return NVML_ERROR_INVALID_ARGUMENT;
    *processSamplesCount = 0;
    return NVML_ERROR_NOT_FOUND; /* NVML's answer when there are no samples */
}

/* ---- clocks ---------------------------------------------------------- */

/* Copies n clocks to out, NVML's way: *count is the room on entry and the
 * number of clocks on return; too little room is INSUFFICIENT_SIZE. */
static nvmlReturn_t copy_clocks(const unsigned int *clocks, unsigned int n, unsigned int *count,
                                unsigned int *out)
{
    unsigned int room;
    if (!count)
        return NVML_ERROR_INVALID_ARGUMENT;
    room = *count;
    *count = n;
    if (room < n)
        return NVML_ERROR_INSUFFICIENT_SIZE;
    if (!out)
        return NVML_ERROR_INVALID_ARGUMENT;
    memcpy(out, clocks, n * sizeof *clocks);
    return NVML_SUCCESS;
}

EXPORT nvmlReturn_t nvmlDeviceGetSupportedMemoryClocks(nvmlDevice_t device, unsigned int *count,
                                                       unsigned int *clocksMHz)
{
    static const unsigned int mem_clocks[] = {FAKE_MEM_CLOCK};
    CHECK_DEV(device, idx);
    (void)idx;
    return copy_clocks(mem_clocks, 1, count, clocksMHz);
}

EXPORT nvmlReturn_t nvmlDeviceGetSupportedGraphicsClocks(nvmlDevice_t device,
                                                         unsigned int memoryClockMHz,
                                                         unsigned int *count,
                                                         unsigned int *clocksMHz)
{
    CHECK_DEV(device, idx);
    (void)idx;
    if (memoryClockMHz != FAKE_MEM_CLOCK)
        return NVML_ERROR_NOT_FOUND;
    return copy_clocks(gfx_clocks, GFX_CLOCKS, count, clocksMHz);
}

/* The clock of clockType the fake always runs at: its defaults. */
static nvmlReturn_t clock_of(nvmlDevice_t device, nvmlClockType_t clockType,
                             unsigned int *clockMHz)
{
    CHECK_DEV(device, idx);
    (void)idx;
    if (!clockMHz)
        return NVML_ERROR_INVALID_ARGUMENT;
    switch (clockType) {
    case NVML_CLOCK_GRAPHICS:
    case NVML_CLOCK_SM: *clockMHz = FAKE_GFX_CLOCK; return NVML_SUCCESS;
    case NVML_CLOCK_MEM: *clockMHz = FAKE_MEM_CLOCK; return NVML_SUCCESS;
    case NVML_CLOCK_VIDEO: return NVML_ERROR_NOT_SUPPORTED;
    default: return NVML_ERROR_INVALID_ARGUMENT;
    }
}

/* Slurm 24.11 reads applications clocks, 26.05 the current clocks. */
EXPORT nvmlReturn_t nvmlDeviceGetApplicationsClock(nvmlDevice_t device, nvmlClockType_t clockType,
                                                   unsigned int *clockMHz)
{
    return clock_of(device, clockType, clockMHz);
}

EXPORT nvmlReturn_t nvmlDeviceGetClockInfo(nvmlDevice_t device, nvmlClockType_t clockType,
                                           unsigned int *clockMHz)
{
    return clock_of(device, clockType, clockMHz);
}

EXPORT nvmlReturn_t nvmlDeviceSetApplicationsClocks(nvmlDevice_t device, unsigned int memClockMHz,
                                                    unsigned int graphicsClockMHz)
{
    unsigned int i;
    CHECK_DEV(device, idx);
    (void)idx;
    if (memClockMHz == FAKE_MEM_CLOCK)
        for (i = 0; i < GFX_CLOCKS; i++)
            if (gfx_clocks[i] == graphicsClockMHz)
                return NVML_SUCCESS; /* accepted, not remembered */
    return NVML_ERROR_INVALID_ARGUMENT;
}

EXPORT nvmlReturn_t nvmlDeviceResetApplicationsClocks(nvmlDevice_t device)
{
    CHECK_DEV(device, idx);
    (void)idx;
    return NVML_SUCCESS;
}

/* Slurm 26.05 locks clocks instead of setting applications clocks.  A lock
 * within the supported range succeeds, not remembered. */
static nvmlReturn_t lock_clocks(nvmlDevice_t device, unsigned int lo, unsigned int hi,
                                unsigned int min, unsigned int max)
{
    CHECK_DEV(device, idx);
    (void)idx;
    if (min > max || min < lo || max > hi)
        return NVML_ERROR_INVALID_ARGUMENT;
    return NVML_SUCCESS;
}

EXPORT nvmlReturn_t nvmlDeviceSetGpuLockedClocks(nvmlDevice_t device, unsigned int minGpuClockMHz,
                                                 unsigned int maxGpuClockMHz)
{
    return lock_clocks(device, gfx_clocks[GFX_CLOCKS - 1], gfx_clocks[0], minGpuClockMHz,
                       maxGpuClockMHz);
}

EXPORT nvmlReturn_t nvmlDeviceSetMemoryLockedClocks(nvmlDevice_t device,
                                                    unsigned int minMemClockMHz,
                                                    unsigned int maxMemClockMHz)
{
    return lock_clocks(device, FAKE_MEM_CLOCK, FAKE_MEM_CLOCK, minMemClockMHz, maxMemClockMHz);
}

EXPORT nvmlReturn_t nvmlDeviceResetGpuLockedClocks(nvmlDevice_t device)
{
    return nvmlDeviceResetApplicationsClocks(device);
}

EXPORT nvmlReturn_t nvmlDeviceResetMemoryLockedClocks(nvmlDevice_t device)
{
    return nvmlDeviceResetApplicationsClocks(device);
}
