/*
 * prolog_cpu.c - built as a program named slurmstepd (benches/prolog_cpu.sh),
 * so that the task prolog it starts finds a slurmstepd as its parent, as in
 * a task. Usage: slurmstepd ROUNDS COMMAND...: runs each COMMAND (words
 * split at spaces, no shell) ROUNDS times, interleaved, as its child with
 * SLURM_TASK_PID set to itself and standard output to a pipe it drains;
 * prints per COMMAND the median wall and CPU time (wait4's rusage, user and
 * system) and the mean minor faults.
 */
#define _GNU_SOURCE
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

static int by_value(const void *a, const void *b)
{
    double x = *(const double *)a, y = *(const double *)b;
    return (x > y) - (x < y);
}

int main(int argc, char **argv)
{
    if (argc < 3)
        return 2;
    int rounds = atoi(argv[1]), n = argc - 2;
    if (rounds < 1)
        return 2;
    char pid[32];
    snprintf(pid, sizeof pid, "%d", (int)getpid());
    setenv("SLURM_TASK_PID", pid, 1);
    double *wall = calloc((size_t)rounds * n, sizeof *wall);
    double *cpu = calloc((size_t)rounds * n, sizeof *cpu);
    double *faults = calloc((size_t)n, sizeof *faults);
    if (!wall || !cpu || !faults)
        return 1;
    for (int r = 0; r < rounds; r++) {
        for (int j = 0; j < n; j++) {
            int out[2];
            struct timespec t0, t1;
            if (pipe(out) != 0)
                return 1;
            clock_gettime(CLOCK_MONOTONIC, &t0);
            pid_t child = fork();
            if (child == 0) {
                char *words[32], *line = strdup(argv[2 + j]);
                int w = 0;
                for (char *t = strtok(line, " "); t && w < 31; t = strtok(NULL, " "))
                    words[w++] = t;
                words[w] = NULL;
                dup2(out[1], 1);
                close(out[0]);
                close(out[1]);
                execv(words[0], words);
                _exit(127);
            }
            close(out[1]);
            char buf[4096];
            while (read(out[0], buf, sizeof buf) > 0)
                ;
            close(out[0]);
            int status;
            struct rusage ru;
            wait4(child, &status, 0, &ru);
            clock_gettime(CLOCK_MONOTONIC, &t1);
            wall[j * rounds + r] = (t1.tv_sec - t0.tv_sec) * 1e6 + (t1.tv_nsec - t0.tv_nsec) / 1e3;
            cpu[j * rounds + r] = (ru.ru_utime.tv_sec + ru.ru_stime.tv_sec) * 1e6 +
                                  ru.ru_utime.tv_usec + ru.ru_stime.tv_usec;
            faults[j] += ru.ru_minflt;
        }
    }
    printf("%8s %8s %8s  %s\n", "wall us", "cpu us", "faults", "command");
    for (int j = 0; j < n; j++) {
        qsort(wall + j * rounds, rounds, sizeof *wall, by_value);
        qsort(cpu + j * rounds, rounds, sizeof *cpu, by_value);
        printf("%8.0f %8.0f %8.1f  %s\n", wall[j * rounds + rounds / 2],
               cpu[j * rounds + rounds / 2], faults[j] / rounds, argv[2 + j]);
    }
    return 0;
}
