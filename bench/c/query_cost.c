/*
 * query_cost.c - what the poller pays to ask N waits in one round: a
 * cuEventQuery per wait, against reading a host-mapped word per wait that
 * cuStreamWriteValue32 writes after the work (stream memory operations).
 *
 *   make query && ./cudafd-query-cost [--streams 64] [--rounds 2000] [--contend 1]
 *
 * Each of N streams runs a long cudafd_spin kernel, then an event record
 * (no timing) and, where the driver has stream memory operations, a
 * cuStreamWriteValue32 of 1 into its own host-mapped word. While the kernels
 * run, the thread times ROUNDS rounds of N asks of each kind (all not
 * ready), and rounds of N event records (one more event per stream); after
 * they end, the asks again. Prints ns per ask (p50 and p99 over rounds) and
 * the thread's CPU per ask (CLOCK_THREAD_CPUTIME_ID).
 *
 * --order N: instead, N times on one stream, a kernel of --order-us us, an
 * event record and a write of the round's number to a word (--write-first 1:
 * the write, then the record); the thread spins on both and prints which the
 * host saw first and by how much, and how often the stream itself was not
 * idle yet (cuStreamQuery) just after the last of them was seen.
 *
 * --hold R: instead, whether an operation after a kernel holds the hardware
 * queue it shares with other streams: R rounds of (a --hold-us us kernel,
 * then the operation) on each of the N streams, all enqueued at once, timed
 * to cuCtxSynchronize, for no operation, an event record (plain, blocking-sync,
 * timing), a write to a host-mapped word with and without its memory barrier
 * (CU_STREAM_WRITE_VALUE_NO_MEMORY_BARRIER; a driver that refuses the flag is
 * named and the row skipped), an empty host function and an empty kernel,
 * in turn, three times. Prints each one's wall time (median) and how many
 * kernels ran at once on average (N x R x kernel / wall): N where nothing
 * holds a queue, about the number of hardware queues
 * (CUDA_DEVICE_MAX_CONNECTIONS, 8 by default) where each stream's operation
 * waits for its kernel before the queue goes on.
 *
 * --contend 1: meanwhile a second thread does what an event loop awaiting
 * kernels on N other streams does: on each of them whose last event has
 * passed (cuEventQuery), it launches a 20 us kernel and records an event, in
 * turn, without pause, so the asks share the driver with launches as a
 * poller's do.
 */
#define _GNU_SOURCE
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <time.h>

#include "common.h"

const char bench_prog[] = "cudafd-query-cost";

#define HOSTALLOC_DEVICEMAP 0x02

static double thread_cpu_s(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_THREAD_CPUTIME_ID, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

static int nstreams, rounds;
static CUstream *streams;
static CUevent *events;
static volatile uint32_t *words;
static CUdeviceptr words_dev;

enum { ASK_QUERY, ASK_STREAM, ASK_WORD, RECORD };

/* The launching thread of --contend: its own streams and events. */
static CUstream *lstreams;
static CUevent *levents;
static volatile int stop_launching;
static long launched;

static void *launcher_main(void *arg)
{
    SETUP(cu.cuCtxSetCurrent((CUcontext)arg));
    while (!stop_launching) {
        for (int i = 0; i < nstreams; i++) {
            if (cu.cuEventQuery(levents[i]) == CUDA_ERROR_NOT_READY)
                continue;
            SETUP(launch(lstreams[i], 20000));
            SETUP(cu.cuEventRecord(levents[i], lstreams[i]));
            launched++;
        }
    }
    return NULL;
}
static CUevent *spare;

/* ROUNDS rounds of one ask per stream; ns per ask p50/p99 and CPU ns per ask. */
static void time_rounds(const char *name, int how, CUresult want)
{
    double *per = malloc(sizeof *per * (size_t)rounds);
    if (!per)
        die("malloc", "out of memory");
    long odd = 0;
    double c0 = thread_cpu_s(), w0 = now_s();
    for (int r = 0; r < rounds; r++) {
        double t0 = now_s();
        for (int i = 0; i < nstreams; i++) {
            if (how == ASK_QUERY)
                odd += cu.cuEventQuery(events[i]) != want;
            else if (how == ASK_STREAM)
                odd += cu.cuStreamQuery(streams[i]) != want;
            else if (how == RECORD)
                odd += cu.cuEventRecord(spare[i], streams[i]) != 0;
            else
                odd += (words[i] != 0) != (want == 0);
        }
        per[r] = (now_s() - t0) * 1e9 / nstreams;
    }
    double wall = now_s() - w0, cpu = thread_cpu_s() - c0;
    qsort(per, (size_t)rounds, sizeof *per, cmp_double);
    printf("%-28s %8.1f %8.1f %10.1f  %ld unexpected answers\n", name, pct(per, rounds, 0.5),
           pct(per, rounds, 0.99), cpu * 1e9 / ((double)rounds * nstreams), odd);
    (void)wall;
    free(per);
}

/* --order: which of a record and a write the host sees first. */
static void order(int n, double kernel_us, int write_first)
{
    int word_first = 0, event_first = 0, same = 0, busy = 0;
    double *gap = malloc(sizeof *gap * (size_t)n);
    if (!gap)
        die("malloc", "out of memory");
    for (int i = 0; i < n; i++) {
        uint32_t want = (uint32_t)i + 1;
        SETUP(launch(streams[0], (uint64_t)(kernel_us * 1e3)));
        if (write_first)
            SETUP(cu.cuStreamWriteValue32(streams[0], words_dev, want, 0));
        SETUP(cu.cuEventRecord(events[0], streams[0]));
        if (!write_first)
            SETUP(cu.cuStreamWriteValue32(streams[0], words_dev, want, 0));
        double t_ev = 0, t_word = 0;
        while (!t_ev || !t_word) {
            if (!t_word && words[0] == want)
                t_word = now_s();
            if (!t_ev && cu.cuEventQuery(events[0]) == 0)
                t_ev = now_s();
        }
        busy += cu.cuStreamQuery(streams[0]) != 0;
        if (t_word < t_ev)
            word_first++;
        else if (t_ev < t_word)
            event_first++;
        else
            same++;
        gap[i] = (t_word - t_ev) * 1e6;
    }
    qsort(gap, (size_t)n, sizeof *gap, cmp_double);
    printf("order: %d rounds of a %.0f us kernel, %s: the word seen first %d times, the event %d, "
           "at once %d; word minus event, us: p1 %.2f p50 %.2f p99 %.2f; the stream not idle just after both %d times\n",
           n, kernel_us, write_first ? "a write, a record" : "a record, a write", word_first, event_first, same,
           pct(gap, n, 0.01), pct(gap, n, 0.5), pct(gap, n, 0.99), busy);
    free(gap);
}

/* --hold: does an operation after each kernel make streams that share a
 * hardware queue run in turn? */
static void host_nothing(void *arg)
{
    (void)arg;
}

static void hold(int n, double kernel_us)
{
    enum { NONE, RECORD_PLAIN, RECORD_BLOCKING, RECORD_TIMING, WRITE, WRITE_NO_BARRIER, HOST_FN, KERNEL, NKINDS };
    static const char *const names[NKINDS] = {"kernel alone",        "+ record",        "+ record, blocking sync",
                                              "+ record, timing",    "+ write",         "+ write, no barrier",
                                              "+ host function",     "+ empty kernel"};
    CUevent *timed = calloc((size_t)nstreams, sizeof *timed), *blocking = calloc((size_t)nstreams, sizeof *blocking);
    if (!timed || !blocking)
        die("calloc", "out of memory");
    for (int i = 0; i < nstreams; i++) {
        SETUP(cu.cuEventCreate(&timed[i], EV_TIMING));
        SETUP(cu.cuEventCreate(&blocking[i], EV_BLOCKING));
    }
    CUresult refused[NKINDS] = {0};
    refused[WRITE_NO_BARRIER] = cu.cuStreamWriteValue32(streams[0], words_dev, 0, 1);
    if (!cu.cuLaunchHostFunc)
        die("--hold", "the driver lacks cuLaunchHostFunc");
    double wall[NKINDS][3];
    for (int rep = 0; rep < 3; rep++) {
        for (int k = 0; k < NKINDS; k++) {
            if (refused[k])
                continue;
            double t0 = now_s();
            for (int r = 0; r < n; r++) {
                for (int i = 0; i < nstreams; i++) {
                    SETUP(launch(streams[i], (uint64_t)(kernel_us * 1e3)));
                    CUdeviceptr at = words_dev + 4 * (CUdeviceptr)i;
                    if (k == RECORD_PLAIN)
                        SETUP(cu.cuEventRecord(spare[i], streams[i]));
                    else if (k == RECORD_BLOCKING)
                        SETUP(cu.cuEventRecord(blocking[i], streams[i]));
                    else if (k == RECORD_TIMING)
                        SETUP(cu.cuEventRecord(timed[i], streams[i]));
                    else if (k == WRITE)
                        SETUP(cu.cuStreamWriteValue32(streams[i], at, (uint32_t)r, 0));
                    else if (k == WRITE_NO_BARRIER)
                        SETUP(cu.cuStreamWriteValue32(streams[i], at, (uint32_t)r, 1));
                    else if (k == HOST_FN)
                        SETUP(cu.cuLaunchHostFunc(streams[i], host_nothing, NULL));
                    else if (k == KERNEL)
                        SETUP(launch(streams[i], 0));
                }
            }
            SETUP(cu.cuCtxSynchronize());
            wall[k][rep] = now_s() - t0;
        }
    }
    printf("hold: %d streams, %d rounds of a %.0f us kernel and an operation each, all enqueued at once\n", nstreams,
           n, kernel_us);
    printf("%-22s %10s %16s\n", "after each kernel", "wall ms", "kernels at once");
    for (int k = 0; k < NKINDS; k++) {
        if (refused[k]) {
            printf("%-22s refused by the driver: %s\n", names[k], cudafd_cuda_error_name(refused[k]));
            continue;
        }
        qsort(wall[k], 3, sizeof wall[k][0], cmp_double);
        double ideal = (double)nstreams * n * kernel_us * 1e-6;
        printf("%-22s %10.2f %16.1f\n", names[k], wall[k][1] * 1e3, ideal / wall[k][1]);
    }
    free(timed);
    free(blocking);
}

int main(int argc, char **argv)
{
    nstreams = arg_int(argc, argv, "--streams", 64);
    rounds = arg_int(argc, argv, "--rounds", 2000);
    double kernel_s = arg_double(argc, argv, "--kernel-s", 1.0);
    int contend = arg_int(argc, argv, "--contend", 0);
    if (nstreams < 1 || nstreams > 4096 || rounds < 1 || !(kernel_s > 0 && kernel_s <= 10))
        die("usage", "1 <= --streams <= 4096, --rounds >= 1, 0 < --kernel-s <= 10");
    char *ptx = read_file(arg_str(argc, argv, "--ptx", DEFAULT_PTX));
    load_driver();
    bench_setup(ptx);
    streams = calloc((size_t)nstreams, sizeof *streams);
    events = calloc((size_t)nstreams, sizeof *events);
    spare = calloc((size_t)nstreams, sizeof *spare);
    if (!streams || !events || !spare)
        die("calloc", "out of memory");
    bool memops = cu.cuStreamWriteValue32 && cu.cuMemHostAlloc && cu.cuMemHostGetDevicePointer;
    if (memops) {
        void *p = NULL;
        SETUP(cu.cuMemHostAlloc(&p, sizeof(uint32_t) * (size_t)nstreams, HOSTALLOC_DEVICEMAP));
        SETUP(cu.cuMemHostGetDevicePointer(&words_dev, p, 0));
        words = p;
        for (int i = 0; i < nstreams; i++)
            words[i] = 0;
    }
    for (int i = 0; i < nstreams; i++) {
        SETUP(cu.cuStreamCreate(&streams[i], 1));
        SETUP(cu.cuEventCreate(&events[i], EV_SPIN));
        SETUP(cu.cuEventCreate(&spare[i], EV_SPIN));
    }
    pthread_t launcher;
    CUcontext ctx = NULL;
    if (contend) { /* its streams before the long kernels: a stream creation may wait for the queued work */
        SETUP(cu.cuDevicePrimaryCtxRetain(&ctx, bench_dev));
        lstreams = calloc((size_t)nstreams, sizeof *lstreams);
        levents = calloc((size_t)nstreams, sizeof *levents);
        if (!lstreams || !levents)
            die("calloc", "out of memory");
        for (int i = 0; i < nstreams; i++) {
            SETUP(cu.cuStreamCreate(&lstreams[i], 1));
            SETUP(cu.cuEventCreate(&levents[i], EV_SPIN));
        }
    }
    if (!cu.cuStreamQuery)
        die("the driver lacks", "cuStreamQuery");
    for (int i = 0; i < nstreams; i++) {
        SETUP(launch(streams[i], (uint64_t)(kernel_s * 1e9)));
        SETUP(cu.cuEventRecord(events[i], streams[i]));
        if (memops)
            SETUP(cu.cuStreamWriteValue32(streams[i], words_dev + 4 * (CUdeviceptr)i, 1, 0));
    }
    int order_n = arg_int(argc, argv, "--order", 0);
    if (order_n > 0) {
        if (!memops)
            die("--order", "the driver has no stream memory operations");
        SETUP(cu.cuCtxSynchronize());
        order(order_n, arg_double(argc, argv, "--order-us", 200), arg_int(argc, argv, "--write-first", 0));
        return 0;
    }
    int hold_n = arg_int(argc, argv, "--hold", 0);
    if (hold_n > 0) {
        if (!memops)
            die("--hold", "the driver has no stream memory operations");
        SETUP(cu.cuCtxSynchronize());
        hold(hold_n, arg_double(argc, argv, "--hold-us", 500));
        return 0;
    }
    if (contend && pthread_create(&launcher, NULL, launcher_main, ctx))
        die("pthread_create", "failed");
    printf("%s on %s: %d streams, %d rounds%s; ns per ask\n", bench_prog, bench_device_name, nstreams,
           rounds, contend ? ", beside a thread launching on as many streams of its own" : "");
    printf("%-28s %8s %8s %10s\n", "ask", "p50", "p99", "cpu/ask");
    double t0 = now_s();
    time_rounds("cuEventQuery, running", ASK_QUERY, CUDA_ERROR_NOT_READY);
    if (memops)
        time_rounds("word read, running", ASK_WORD, CUDA_ERROR_NOT_READY);
    else
        printf("%-28s (the driver has no stream memory operations)\n", "word read, running");
    time_rounds("cuStreamQuery, running", ASK_STREAM, CUDA_ERROR_NOT_READY);
    time_rounds("cuEventRecord, running", RECORD, CUDA_ERROR_NOT_READY);
    time_rounds("cuEventQuery, running (2)", ASK_QUERY, CUDA_ERROR_NOT_READY);
    if (now_s() - t0 > kernel_s)
        printf("(the asks outlasted the kernels: raise --kernel-s)\n");
    if (contend) {
        stop_launching = 1;
        pthread_join(launcher, NULL);
        printf("the launching thread: %.0f launches and records per second\n", launched / (now_s() - t0));
    }
    SETUP(cu.cuCtxSynchronize());
    time_rounds("cuEventQuery, finished", ASK_QUERY, 0);
    time_rounds("cuStreamQuery, finished", ASK_STREAM, 0);
    if (memops)
        time_rounds("word read, finished", ASK_WORD, 0);
    for (int i = 0; i < nstreams; i++) {
        cu.cuEventDestroy(events[i]);
        cu.cuEventDestroy(spare[i]);
        cu.cuStreamDestroy(streams[i]);
    }
    if (memops)
        cu.cuMemFreeHost((void *)words);
    if (contend) {
        for (int i = 0; i < nstreams; i++) {
            cu.cuEventDestroy(levents[i]);
            cu.cuStreamDestroy(lstreams[i]);
        }
        free(lstreams);
        free(levents);
        cu.cuDevicePrimaryCtxRelease(bench_dev);
    }
    free(streams);
    free(events);
    free(spare);
    free(ptx);
    bench_teardown();
    return 0;
}
