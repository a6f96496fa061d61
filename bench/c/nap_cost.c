/*
 * nap_cost.c - what one timed sleep and wake of a thread costs in CPU, by the
 * way it sleeps and how long. No GPU: this is the price of every ask a
 * poller makes between two sleeps.
 *
 *   cc -O2 -o nap_cost nap_cost.c && ./nap_cost [NAPS]
 *
 * A thread naps NAPS times (default 400, four rounds) for each length
 * (10 us .. 400 us), each way in turn:
 *   timerfd+poll    arm a timerfd, poll(2) on it, read it (the core's poller)
 *   nanosleep/1us   clock_nanosleep to an absolute time, 1 us timer slack
 *   nanosleep/50us  the same with the default 50 us slack (a Python thread's)
 *   ppoll/1us       ppoll(2) with a timeout on an idle eventfd, 1 us slack
 * Prints the thread's CPU per nap (CLOCK_THREAD_CPUTIME_ID, the wake and the
 * calls included) and the nap's actual period, in us.
 */
#define _GNU_SOURCE
#include <poll.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <sys/eventfd.h>
#include <sys/prctl.h>
#include <sys/timerfd.h>
#include <time.h>
#include <unistd.h>

enum { TFD, NANO1, NANO50, PPOLL1, NWAYS };
static const char *names[NWAYS] = {"timerfd+poll", "nanosleep/1us", "nanosleep/50us", "ppoll/1us"};
static const int64_t naps_ns[] = {10000, 20000, 50000, 100000, 200000, 400000};
#define NLEN (sizeof naps_ns / sizeof naps_ns[0])
#define ROUNDS 4

static int64_t clock_ns(clockid_t c)
{
    struct timespec ts;
    clock_gettime(c, &ts);
    return (int64_t)ts.tv_sec * 1000000000 + ts.tv_nsec;
}

static struct timespec ts_of(int64_t t)
{
    struct timespec ts = {(time_t)(t / 1000000000), (long)(t % 1000000000)};
    return ts;
}

static void nap(int way, int64_t ns, int tfd, int efd)
{
    int64_t at = clock_ns(CLOCK_MONOTONIC) + ns;
    if (way == TFD) {
        struct itimerspec its = {{0, 0}, ts_of(at)};
        timerfd_settime(tfd, TFD_TIMER_ABSTIME, &its, NULL);
        struct pollfd p = {.fd = tfd, .events = POLLIN};
        poll(&p, 1, -1);
        uint64_t ticks;
        if (read(tfd, &ticks, sizeof ticks) < 0)
            abort();
    } else if (way == PPOLL1) {
        struct timespec timeout = ts_of(ns);
        struct pollfd p = {.fd = efd, .events = POLLIN};
        ppoll(&p, 1, &timeout, NULL);
    } else {
        struct timespec t = ts_of(at);
        while (clock_nanosleep(CLOCK_MONOTONIC, TIMER_ABSTIME, &t, NULL) != 0) {
        }
    }
}

int main(int argc, char **argv)
{
    int n = argc > 1 ? atoi(argv[1]) : 400;
    if (n < 1)
        n = 400;
    int tfd = timerfd_create(CLOCK_MONOTONIC, TFD_NONBLOCK), efd = eventfd(0, EFD_NONBLOCK);
    if (tfd < 0 || efd < 0)
        return 1;
    static double cpu[NLEN][NWAYS], period[NLEN][NWAYS];
    for (int r = 0; r < ROUNDS; r++)
        for (size_t li = 0; li < NLEN; li++)
            for (int w = 0; w < NWAYS; w++) {
                prctl(PR_SET_TIMERSLACK, w == NANO50 ? 50000UL : 1UL);
                int64_t c0 = clock_ns(CLOCK_THREAD_CPUTIME_ID), t0 = clock_ns(CLOCK_MONOTONIC);
                for (int i = 0; i < n; i++)
                    nap(w, naps_ns[li], tfd, efd);
                cpu[li][w] += (double)(clock_ns(CLOCK_THREAD_CPUTIME_ID) - c0) / n / 1e3 / ROUNDS;
                period[li][w] += (double)(clock_ns(CLOCK_MONOTONIC) - t0) / n / 1e3 / ROUNDS;
            }
    printf("nap cost: CPU us per nap (thread CPU clock) / actual period us, %d naps x %d rounds\n%-8s", n, ROUNDS,
           "nap");
    for (int w = 0; w < NWAYS; w++)
        printf(" %20s", names[w]);
    printf("\n");
    for (size_t li = 0; li < NLEN; li++) {
        printf("%5ldus ", (long)(naps_ns[li] / 1000));
        for (int w = 0; w < NWAYS; w++)
            printf("  %8.2f / %-8.1f", cpu[li][w], period[li][w]);
        printf("\n");
    }
    return 0;
}
