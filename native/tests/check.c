/* check.c - the C tests' checks and helpers (check.h). */
#include <poll.h>
#include <string.h>
#include <time.h>

#include "check.h"

int passed, failed;

const char *check_error(bool failed_now)
{
    static __thread char seen[512]; /* the message as this thread's previous check left it */
    const char *now = cudafd_last_error();
    bool fresh = strcmp(now, seen) != 0;
    snprintf(seen, sizeof seen, "%s", now);
    if (!failed_now)
        return NULL;
    return fresh ? now : "no error set since the previous check";
}

double now_s(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + ts.tv_nsec * 1e-9;
}

int collect(cudafd_notifier *n, cudafd_completion *got, int want, double timeout)
{
    int have = 0;
    double deadline = now_s() + timeout;
    while (have < want && now_s() < deadline) {
        struct pollfd p = {.fd = cudafd_notifier_fd(n), .events = POLLIN};
        poll(&p, 1, 50);
        int k = cudafd_drain(n, got + have, want - have);
        if (k < 0)
            break;
        have += k;
    }
    return have;
}
