/*
 * clock_step.c - the watchdog's timed waits keep time by CLOCK_MONOTONIC, so
 * a step of the wall clock neither ends one early nor stretches it into a
 * hang; in a child made by fork() too, whose conditions fork.c makes anew.
 *
 * The test includes hostfunc.c (the watchdog), links the rest of the core
 * and defines clock_gettime itself: its wall clock reads an hour behind the
 * kernel's (a clock stepped back). A
 * timed wait whose deadline came from that clock would be an hour in the
 * past for the kernel and return at once.
 */
#include "../core/hostfunc.c"

#include <sys/syscall.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "check.h"

#define STEP_S 3600

int clock_gettime(clockid_t id, struct timespec *ts)
{
    int rc = (int)syscall(SYS_clock_gettime, id, ts);
    if (rc == 0 && id == CLOCK_REALTIME)
        ts->tv_sec -= STEP_S;
    return rc;
}

/* Seconds a 50 ms watchdog wait lasted, nobody signalling. */
static double timed_wait(void)
{
    pthread_mutex_lock(&g.mu);
    double t0 = now_s();
    watchdog_wait_ns(50 * 1000 * 1000);
    double took = now_s() - t0;
    pthread_mutex_unlock(&g.mu);
    return took;
}

int main(void)
{
    struct timespec wall, kernel;
    clock_gettime(CLOCK_REALTIME, &wall);
    syscall(SYS_clock_gettime, CLOCK_REALTIME, &kernel);
    CHECK(kernel.tv_sec - wall.tv_sec >= STEP_S - 1, "the wall clock is not stepped: %ld s", (long)(kernel.tv_sec - wall.tv_sec));

    double took = timed_wait();
    CHECK(took >= 0.045, "a 50 ms wait returned after %.1f ms", took * 1e3);

    pid_t pid = fork();
    if (pid == 0) {
        double t = timed_wait();
        _exit(t >= 0.045 ? 0 : 1);
    }
    int status = 0;
    CHECK(pid > 0 && waitpid(pid, &status, 0) == pid, "fork");
    CHECK(WIFEXITED(status) && WEXITSTATUS(status) == 0, "a 50 ms wait in a forked child returned early");

    printf("clock_step: %d passed, %d failed\n", passed, failed);
    return failed != 0;
}
