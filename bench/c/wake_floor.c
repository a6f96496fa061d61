/*
 * wake_floor.c - how late a thread asleep in epoll_wait comes back, by who
 * wakes it and how long it slept. No GPU: this is the machine's floor under
 * every way of telling an event loop that work is over.
 *
 *   cc -O2 -pthread -o wake_floor wake_floor.c && ./wake_floor [--reps N]
 *
 * After sleeping S (50 us .. 10 ms) a thread in epoll_wait is woken
 *   cross   by another thread writing an eventfd (the other thread slept S on
 *           its own timer first; lateness from just before its write);
 *   timer   by a timerfd it armed itself for S (lateness from the expiry);
 *   napping by another thread's eventfd write, while it also naps on a
 *           100 us timerfd (re-armed on every expiry) so it never sleeps long;
 *   poller  by another thread's eventfd write, that thread napping every
 *           100 us until S (as the core's poller asks a young wait);
 *   samecpu the same, the napping thread bound to the CPU the sleeper last
 *           ran on: does a CPU kept awake by the waker wake its sleeper sooner?
 *   bound   the same, the sleeper bound to that CPU too for the shot.
 * The methods take turns, S rotated, N reps each. Prints p50/p99 in us, the
 * sleeper's CPU per wake (getrusage of the thread) for napping, and for the
 * napping wakers how often the sleeper came back on another CPU than it
 * slept on.
 */
#define _GNU_SOURCE
#include <pthread.h>
#include <sched.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/epoll.h>
#include <sys/eventfd.h>
#include <sys/prctl.h>
#include <sys/resource.h>
#include <sys/timerfd.h>
#include <time.h>
#include <unistd.h>

#define NAP_NS 100000

static int64_t now_ns(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (int64_t)ts.tv_sec * 1000000000 + ts.tv_nsec;
}

static void sleep_until(int64_t t)
{
    struct timespec ts = {t / 1000000000, t % 1000000000};
    while (clock_nanosleep(CLOCK_MONOTONIC, TIMER_ABSTIME, &ts, NULL) != 0) {
    }
}

static void arm(int tfd, int64_t at)
{
    struct itimerspec its = {{0, 0}, {at / 1000000000, at % 1000000000}};
    timerfd_settime(tfd, TFD_TIMER_ABSTIME, &its, NULL);
}

struct shot {
    int efd;
    int64_t at;      /* when the waker writes */
    int64_t written; /* just before its write */
    bool naps;       /* the waker naps NAP_NS at a time until at */
};

static void *waker(void *arg)
{
    struct shot *s = arg;
    prctl(PR_SET_TIMERSLACK, 1UL);
    if (s->naps)
        for (int64_t t = now_ns(); t < s->at; t = now_ns())
            sleep_until(t + NAP_NS < s->at ? t + NAP_NS : s->at);
    else
        sleep_until(s->at);
    s->written = now_ns();
    uint64_t one = 1;
    if (write(s->efd, &one, 8) != 8)
        abort();
    return NULL;
}

static int cmp(const void *a, const void *b)
{
    double x = *(const double *)a, y = *(const double *)b;
    return (x > y) - (x < y);
}

static double cpu_us(void)
{
    struct rusage ru;
    getrusage(RUSAGE_THREAD, &ru);
    return ru.ru_utime.tv_sec * 1e6 + ru.ru_utime.tv_usec + ru.ru_stime.tv_sec * 1e6 + ru.ru_stime.tv_usec;
}

enum { CROSS, TIMER, NAPPING, POLLER, SAMECPU, BOUND, NM };

/* One wake of the sleeper; returns its lateness in us. *moved: it woke on
 * another CPU than it slept on. */
static double one(int method, int64_t sleep_ns, int ep, int efd, int tfd, int nap, long *naps, bool *moved)
{
    uint64_t v;
    int64_t start = now_ns(), at = start + sleep_ns;
    pthread_t th;
    struct shot s = {efd, at, 0, method >= POLLER};
    int cpu = sched_getcpu();
    cpu_set_t one_cpu, all;
    CPU_ZERO(&one_cpu);
    CPU_SET(cpu, &one_cpu);
    if (method == BOUND) {
        pthread_getaffinity_np(pthread_self(), sizeof all, &all);
        pthread_setaffinity_np(pthread_self(), sizeof one_cpu, &one_cpu);
    }
    if (method == TIMER) {
        arm(tfd, at);
    } else {
        pthread_attr_t attr;
        pthread_attr_init(&attr);
        if (method == SAMECPU || method == BOUND)
            pthread_attr_setaffinity_np(&attr, sizeof one_cpu, &one_cpu);
        pthread_create(&th, &attr, waker, &s);
        pthread_attr_destroy(&attr);
        if (method == NAPPING)
            arm(nap, start + NAP_NS);
    }
    for (;;) {
        struct epoll_event evs[2];
        int n = epoll_wait(ep, evs, 2, -1);
        int64_t t = now_ns();
        *moved = sched_getcpu() != cpu;
        bool done = false;
        for (int i = 0; i < n; i++) {
            int fd = evs[i].data.fd;
            if (read(fd, &v, 8) != 8)
                continue;
            if (fd == nap) {
                (*naps)++;
                arm(nap, t + NAP_NS);
            } else {
                done = true;
            }
        }
        if (done) {
            if (method == NAPPING)
                arm(nap, 0);
            if (method != TIMER)
                pthread_join(th, NULL);
            if (method == BOUND)
                pthread_setaffinity_np(pthread_self(), sizeof all, &all);
            return (double)(t - (method == TIMER ? at : s.written)) / 1e3;
        }
    }
}

int main(int argc, char **argv)
{
    int reps = 200;
    if (argc == 3 && strcmp(argv[1], "--reps") == 0)
        reps = atoi(argv[2]);
    static const int64_t sleeps[] = {50000, 200000, 1000000, 5000000, 10000000};
    static const char *names[] = {"cross", "timer", "napping", "poller", "samecpu", "bound"};
    enum { NS = 5 };
    prctl(PR_SET_TIMERSLACK, 1UL);
    int ep = epoll_create1(0);
    int efd = eventfd(0, EFD_NONBLOCK);
    int tfd = timerfd_create(CLOCK_MONOTONIC, TFD_NONBLOCK);
    int nap = timerfd_create(CLOCK_MONOTONIC, TFD_NONBLOCK);
    int fds[] = {efd, tfd, nap};
    for (int i = 0; i < 3; i++) {
        struct epoll_event e = {.events = EPOLLIN, .data.fd = fds[i]};
        epoll_ctl(ep, EPOLL_CTL_ADD, fds[i], &e);
    }
    double *lat = calloc((size_t)NS * NM * reps, sizeof(double));
    double napcpu = 0;
    long naps = 0, moved[NM] = {0};
    for (int r = 0; r < reps; r++)
        for (int k = 0; k < NS * NM; k++) {
            int idx = (k + r) % (NS * NM), m = idx % NM, si = idx / NM;
            long before = naps;
            double c0 = cpu_us();
            bool mv = false;
            lat[((size_t)si * NM + m) * reps + r] = one(m, sleeps[si], ep, efd, tfd, nap, &naps, &mv);
            moved[m] += mv;
            if (m == 2 && naps > before)
                napcpu += cpu_us() - c0;
        }
    printf("wake floor, %d reps: lateness p50/p99 us of a thread asleep in epoll_wait\n", reps);
    printf("%-8s", "slept");
    for (int m = 0; m < NM; m++)
        printf("  %-16s", names[m]);
    printf("\n");
    for (int si = 0; si < NS; si++) {
        printf("%5.0fus ", sleeps[si] / 1e3);
        for (int m = 0; m < NM; m++) {
            double *x = lat + ((size_t)si * NM + m) * reps;
            qsort(x, (size_t)reps, sizeof(double), cmp);
            printf("  %7.1f/%-8.1f", x[reps / 2], x[reps * 99 / 100]);
        }
        printf("\n");
    }
    printf("napping: %ld naps of %d us, sleeper CPU %.2f us per nap (wakes included)\n", naps, NAP_NS / 1000,
           naps ? napcpu / naps : 0.0);
    printf("woke on another CPU than it slept on, of %d:", NS * reps);
    for (int m = 0; m < NM; m++)
        printf(" %s %ld", names[m], moved[m]);
    printf("\n");
    return 0;
}
