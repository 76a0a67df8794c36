/*
 * floor.c - the floor for the plugin's task_init: a SPANK plugin whose
 * task_init does only the essential writes, the GPU variable
 * (CUDA_VISIBLE_DEVICES = local task id % 4) and the flag
 * (DESI_GPU_MAPPED=1); with the plugstack argument `all`, also the five
 * the plugin adds to a contiguous step's task (CUDA_DEVICE_ORDER,
 * DESI_GPU_MAP_METHOD, DESI_GPU_MAP_NODE_GPUS, DESI_GPU_MAP_GPUS and
 * DESI_GPU_MAP_STEP), so the same seven writes as the plugin's. It logs
 * its own wall and thread CPU time as the plugin does (benches/hooks.sh).
 * Build: cc -shared -fPIC -O2 -o floor.so floor.c   (Slurm's headers)
 */
#include <slurm/spank.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>
#include <time.h>

SPANK_PLUGIN(desi_gpu_map_floor, 1);

static double us(clockid_t clock)
{
    struct timespec t;
    clock_gettime(clock, &t);
    return t.tv_sec * 1e6 + t.tv_nsec / 1e3;
}

int slurm_spank_task_init(spank_t sp, int ac, char **av)
{
    double wall = us(CLOCK_MONOTONIC), cpu = us(CLOCK_THREAD_CPUTIME_ID);
    int all = ac > 0 && strcmp(av[0], "all") == 0;
    uint32_t local_id;
    char gpu[16];
    if (spank_get_item(sp, S_TASK_ID, &local_id) != ESPANK_SUCCESS)
        return 0;
    snprintf(gpu, sizeof gpu, "%u", local_id % 4);
    spank_setenv(sp, "CUDA_VISIBLE_DEVICES", gpu, 1);
    if (all) {
        uint32_t job, step;
        char id[32];
        spank_setenv(sp, "CUDA_DEVICE_ORDER", "PCI_BUS_ID", 1);
        spank_setenv(sp, "DESI_GPU_MAP_METHOD", "contiguous", 1);
        spank_setenv(sp, "DESI_GPU_MAP_NODE_GPUS", "4", 1);
        spank_setenv(sp, "DESI_GPU_MAP_GPUS", gpu, 1);
        if (spank_get_item(sp, S_JOB_ID, &job) == ESPANK_SUCCESS
            && spank_get_item(sp, S_JOB_STEPID, &step) == ESPANK_SUCCESS) {
            snprintf(id, sizeof id, "%u.%u", job, step);
            spank_setenv(sp, "DESI_GPU_MAP_STEP", id, 1);
        }
    }
    spank_setenv(sp, "DESI_GPU_MAPPED", "1", 1);
    wall = us(CLOCK_MONOTONIC) - wall;
    cpu = us(CLOCK_THREAD_CPUTIME_ID) - cpu;
    slurm_debug("desi-gpu-map-floor: task_init took %.0f us (%s), thread cpu %.0f us",
                wall, all ? "floor-all" : "floor", cpu);
    return 0;
}
