/*
 * reaper.c - test-cluster helper: `dgm-reaper PIDFILE CMD [ARGS...]`
 *
 * Starts a new session, makes itself a child subreaper
 * (PR_SET_CHILD_SUBREAPER), forks and execs CMD, writes CMD's pid to PIDFILE
 * (atomically, via PIDFILE.tmp + rename), then reaps every child and orphaned
 * descendant until none is left, and exits.
 *
 * Why: slurmd/slurmctld/munged and the slurmstepd processes they fork end up
 * orphaned; on machines whose pid 1 reaps lazily they linger as zombies that
 * `pgrep -x slurmd` still lists.  Under a reaper every daemon started by
 * cluster.sh is reaped as soon as it exits, and the reaper's own exit tells
 * cluster.sh that nothing it started is left below it.
 *
 * Build: cc -O2 -Wall -Wextra -o dgm-reaper reaper.c
 */
#define _GNU_SOURCE
#include <errno.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/prctl.h>
#include <sys/wait.h>
#include <unistd.h>

int main(int argc, char **argv)
{
    char tmp[4096];
    FILE *f;
    pid_t child;

    if (argc < 3) {
        fprintf(stderr, "usage: %s PIDFILE CMD [ARGS...]\n", argv[0]);
        return 2;
    }
    if (setsid() < 0 && errno != EPERM)
        perror("dgm-reaper: setsid");
    if (prctl(PR_SET_CHILD_SUBREAPER, 1, 0, 0, 0) != 0) {
        perror("dgm-reaper: prctl(PR_SET_CHILD_SUBREAPER)");
        return 1;
    }
    signal(SIGHUP, SIG_IGN);
    signal(SIGINT, SIG_IGN);
    signal(SIGPIPE, SIG_IGN);

    child = fork();
    if (child < 0) {
        perror("dgm-reaper: fork");
        return 1;
    }
    if (child == 0) {
        signal(SIGHUP, SIG_DFL);
        signal(SIGINT, SIG_DFL);
        signal(SIGPIPE, SIG_DFL);
        execvp(argv[2], argv + 2);
        fprintf(stderr, "dgm-reaper: exec %s: %s\n", argv[2], strerror(errno));
        _exit(127);
    }

    snprintf(tmp, sizeof tmp, "%s.tmp", argv[1]);
    f = fopen(tmp, "w");
    if (!f || fprintf(f, "%ld\n", (long)child) < 0 || fclose(f) != 0 || rename(tmp, argv[1]) != 0)
        perror("dgm-reaper: writing pid file");

    for (;;) {
        if (wait(NULL) < 0) {
            if (errno == EINTR)
                continue;
            break; /* ECHILD: nothing left */
        }
    }
    return 0;
}
