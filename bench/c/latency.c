/*
 * latency.c - the floor in C: launch + notification round trips and the
 * stream bubble, through libcudafd's C API and through plain driver loops.
 *
 *   cudafd-bench-c [--rounds N] [--block B] [--warmup W] [--kernels K]
 *                  [--batch B] [--repeats R] [--ptx FILE]
 *
 * Prints one JSON object on stdout (progress and errors on stderr). The
 * driver is $CUDAFD_DRIVER if set (the simulator, libcudafd_sim.so, on a
 * machine without a GPU), else libcuda.so.1; libcudafd loads it and this
 * program opens the very same library.
 *
 * Round trip: enqueue an empty cudafd_spin kernel (0 ns), then learn on the
 * host that it finished, N times per method; the methods alternate in blocks
 * of B rounds so a drift of the machine hits them alike.
 *   query_spin         cuEventRecord + spin on cuEventQuery, same thread
 *   sync_spin          cuEventSynchronize on a spinning event, same thread
 *   sync_blocking      cuEventSynchronize on a blocking-sync event, same thread
 *   waiter_blocking    a waiter thread (woken by a semaphore) blocks in
 *                      cuEventSynchronize, writes an eventfd; epoll here
 *   waiter_spin        a waiter thread spinning on cuEventQuery writes an eventfd
 *   hostfunc_eventfd   cuLaunchHostFunc of a C function writing an eventfd
 *   cudafd_event|spin|hostfunc  cudafd_watch_stream, epoll on the notifier
 *                      fd, cudafd_drain
 *
 * Bubble: K kernels of 5 us back to back on one stream with a notification
 * point after each, against none; GPU time from cuEventElapsedTime (host
 * time between the start and end events' completions where the driver has
 * no cuEventElapsedTime, as the simulator). Each batch of B kernels waits
 * behind a gate kernel so the GPU runs it back to back. Points: none,
 * record (cuEventRecord), hostfunc_empty (cuLaunchHostFunc of a function
 * that does nothing), cudafd_event|spin|hostfunc (cudafd_watch_stream).
 *
 * Never hangs: every wait gives up after 5 s and marks its method failed.
 * Exit status: 0 done (failed methods are listed under "errors"), 2 setup failed.
 */
#define _GNU_SOURCE
#include <errno.h>
#include <pthread.h>
#include <semaphore.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/epoll.h>
#include <sys/eventfd.h>
#include <unistd.h>

#include "common.h"

#ifndef DEFAULT_PTX
#define DEFAULT_PTX "../../src/cudafd/cudafd_spin.ptx"
#endif

#define TIMEOUT_S 5.0

const char bench_prog[] = "cudafd-bench-c";

/* ---- shared state ---- */

static CUevent ev_spin, ev_block, ev_start, ev_end;
static int epfd, efd; /* efd: the plain eventfd of the baselines, in epfd */
static cudafd_notifier *notifiers[3];
static const int mech_ids[3] = {CUDAFD_MECH_EVENT, CUDAFD_MECH_SPIN, CUDAFD_MECH_HOSTFUNC};

static int read_efd(void)
{
    uint64_t v;
    if (wait_fd(epfd, TIMEOUT_S))
        return -1;
    return read(efd, &v, sizeof v) == sizeof v ? 0 : -1;
}

static void write_efd(void *unused)
{
    (void)unused;
    uint64_t one = 1;
    if (write(efd, &one, sizeof one) != sizeof one)
        abort();
}

static void nothing(void *unused) { (void)unused; }

static int spin_query(CUevent ev)
{
    double deadline = now_s() + TIMEOUT_S;
    for (unsigned i = 0;; i++) {
        CUresult rc = cu.cuEventQuery(ev);
        if (rc == 0)
            return 0;
        if (rc != CUDA_ERROR_NOT_READY || ((i & 1023) == 0 && now_s() > deadline))
            return -1;
    }
}

/* Wait for the notifier's fd and drain until `token` came back (others are dropped). */
static int await_token(cudafd_notifier *n, int ep, uint64_t token, int64_t *status)
{
    for (;;) {
        cudafd_completion c[16];
        int got = cudafd_drain(n, c, 16);
        if (got < 0)
            return -1;
        for (int i = 0; i < got; i++)
            if (c[i].token == token) {
                *status = c[i].status;
                return 0;
            }
        if (got == 0 && wait_fd(ep, TIMEOUT_S))
            return -1;
    }
}

/* ---- waiter threads of the baselines ---- */

static struct {
    pthread_t thread;
    sem_t go;
    atomic_int seq, stop, spinning;
    int seq_at_start; /* set before the thread starts: a round posted meanwhile is not missed */
} waiter;

static void *waiter_main(void *unused)
{
    (void)unused;
    int seen = waiter.seq_at_start;
    for (;;) {
        if (atomic_load(&waiter.spinning)) {
            while (atomic_load(&waiter.seq) == seen && !atomic_load(&waiter.stop))
                ;
        } else {
            sem_wait(&waiter.go);
        }
        if (atomic_load(&waiter.stop))
            return NULL;
        seen = atomic_load(&waiter.seq);
        if (atomic_load(&waiter.spinning))
            spin_query(ev_spin);
        else
            cu.cuEventSynchronize(ev_block);
        write_efd(NULL);
    }
}

static void waiter_start(bool spinning)
{
    atomic_store(&waiter.stop, 0);
    atomic_store(&waiter.spinning, spinning);
    sem_init(&waiter.go, 0, 0);
    waiter.seq_at_start = atomic_load(&waiter.seq);
    pthread_create(&waiter.thread, NULL, waiter_main, NULL);
}

static void waiter_stop(void)
{
    atomic_store(&waiter.stop, 1);
    sem_post(&waiter.go);
    pthread_join(waiter.thread, NULL);
    sem_destroy(&waiter.go);
}

/* ---- the round trips ---- */

enum { QUERY_SPIN, SYNC_SPIN, SYNC_BLOCKING, WAITER_BLOCKING, WAITER_SPIN, HOSTFUNC_EFD,
       CFD_EVENT, CFD_SPIN, CFD_HOSTFUNC, NMETHODS };
static const char *method_key[NMETHODS] = {
    "query_spin", "sync_spin", "sync_blocking", "waiter_blocking", "waiter_spin",
    "hostfunc_eventfd", "cudafd_event", "cudafd_spin", "cudafd_hostfunc"};
static const char *method_label[NMETHODS] = {
    "spin on cuEventQuery, same thread",
    "cuEventSynchronize (spinning event), same thread",
    "cuEventSynchronize (blocking-sync event), same thread",
    "blocking waiter thread -> eventfd -> epoll",
    "spinning waiter thread -> eventfd -> epoll",
    "host function -> eventfd -> epoll",
    "cudafd event (watch, epoll, drain)",
    "cudafd spin (watch, epoll, drain)",
    "cudafd hostfunc (watch, epoll, drain)"};
static int cfd_ep[3];

static int one_round(int m)
{
    if (launch(stream, 0))
        return -1;
    switch (m) {
    case QUERY_SPIN:
        return cu.cuEventRecord(ev_spin, stream) ? -1 : spin_query(ev_spin);
    case SYNC_SPIN:
        return cu.cuEventRecord(ev_spin, stream) || cu.cuEventSynchronize(ev_spin) ? -1 : 0;
    case SYNC_BLOCKING:
        return cu.cuEventRecord(ev_block, stream) || cu.cuEventSynchronize(ev_block) ? -1 : 0;
    case WAITER_BLOCKING:
        if (cu.cuEventRecord(ev_block, stream))
            return -1;
        atomic_fetch_add(&waiter.seq, 1);
        sem_post(&waiter.go);
        return read_efd();
    case WAITER_SPIN:
        if (cu.cuEventRecord(ev_spin, stream))
            return -1;
        atomic_fetch_add(&waiter.seq, 1);
        return read_efd();
    case HOSTFUNC_EFD:
        if (!cu.cuLaunchHostFunc || cu.cuLaunchHostFunc(stream, write_efd, NULL))
            return -1;
        return read_efd();
    default: {
        int i = m - CFD_EVENT;
        uint64_t token;
        int64_t status = 0;
        if (cudafd_watch_stream(notifiers[i], (uintptr_t)stream, &token) != CUDAFD_OK)
            return -1;
        return await_token(notifiers[i], cfd_ep[i], token, &status) || status ? -1 : 0;
    }
    }
}

static void latency(int rounds, int block, int warmup)
{
    double *samples[NMETHODS];
    int count[NMETHODS] = {0};
    bool failed[NMETHODS] = {false};
    failed[HOSTFUNC_EFD] = !cu.cuLaunchHostFunc;
    for (int m = 0; m < NMETHODS; m++)
        samples[m] = calloc((size_t)rounds + (size_t)block, sizeof(double));
    int passes = (rounds + block - 1) / block;
    for (int p = -1; p < passes; p++) { /* pass -1: warm-up, not recorded */
        for (int k = 0; k < NMETHODS; k++) {
            int m = (k + (p < 0 ? 0 : p)) % NMETHODS;
            if (failed[m])
                continue;
            if (m == WAITER_BLOCKING || m == WAITER_SPIN)
                waiter_start(m == WAITER_SPIN);
            int n = p < 0 ? warmup : block;
            for (int r = 0; r < n && !failed[m]; r++) {
                double t0 = now_s();
                if (one_round(m)) {
                    failed[m] = true;
                    fprintf(stderr, "cudafd-bench-c: %s failed\n", method_key[m]);
                } else if (p >= 0) {
                    samples[m][count[m]++] = (now_s() - t0) * 1e6;
                }
            }
            if (m == WAITER_BLOCKING || m == WAITER_SPIN)
                waiter_stop();
        }
    }
    printf("\"latency\": {");
    const char *sep = "";
    for (int m = 0; m < NMETHODS; m++) {
        if (failed[m] || count[m] == 0)
            continue;
        double *x = samples[m];
        int n = count[m];
        qsort(x, (size_t)n, sizeof *x, cmp_double);
        double sum = 0;
        for (int i = 0; i < n; i++)
            sum += x[i];
        printf("%s\n  \"%s\": {\"label\": \"%s\", \"n\": %d, \"mean\": %.2f, \"min\": %.2f, "
               "\"p50\": %.2f, \"p90\": %.2f, \"p99\": %.2f, \"max\": %.2f}",
               sep, method_key[m], method_label[m], n, sum / n, x[0], pct(x, n, 0.5),
               pct(x, n, 0.9), pct(x, n, 0.99), x[n - 1]);
        sep = ",";
    }
    printf("},\n\"latency_errors\": {");
    sep = "";
    for (int m = 0; m < NMETHODS; m++)
        if (failed[m]) {
            printf("%s\"%s\": \"%s\"", sep, method_key[m],
                   m == HOSTFUNC_EFD && !cu.cuLaunchHostFunc ? "the driver has no cuLaunchHostFunc"
                                                             : "a round failed or timed out");
            sep = ", ";
        }
    printf("},\n");
    for (int m = 0; m < NMETHODS; m++)
        free(samples[m]);
}

/* ---- the bubble ---- */

enum { B_NONE, B_RECORD, B_HOSTFUNC, B_CFD_EVENT, B_CFD_SPIN, B_CFD_HOSTFUNC, NVARIANTS };
static const char *variant_key[NVARIANTS] = {"none",         "record",      "hostfunc_empty",
                                             "cudafd_event", "cudafd_spin", "cudafd_hostfunc"};

/* One gated batch of n kernels (+ points); returns GPU seconds, or -1. */
static double bubble_batch(int v, int n, int batch, uint64_t kernel_ns, double *gate_s)
{
    uint64_t *tokens = NULL;
    if (v >= B_CFD_EVENT && !(tokens = calloc((size_t)n, sizeof *tokens)))
        return -1;
    if (launch(stream, (uint64_t)(*gate_s * 1e9)) || cu.cuEventRecord(ev_start, stream))
        goto fail;
    double t0 = now_s();
    for (int i = 0; i < n; i++) {
        if (launch(stream, kernel_ns))
            goto fail;
        if (v == B_RECORD && cu.cuEventRecord(ev_spin, stream))
            goto fail;
        if (v == B_HOSTFUNC && cu.cuLaunchHostFunc(stream, nothing, NULL))
            goto fail;
        if (v >= B_CFD_EVENT &&
            cudafd_watch_stream(notifiers[v - B_CFD_EVENT], (uintptr_t)stream, &tokens[i]))
            goto fail;
    }
    if (cu.cuEventRecord(ev_end, stream))
        goto fail;
    double enqueue = now_s() - t0;
    double next = 3 * enqueue * (n < batch ? (double)batch / n : 1.0);
    *gate_s = next < 0.002 ? 0.002 : next > 1.0 ? 1.0 : next;
    double seconds;
    float ms = 0;
    if (cu.cuEventElapsedTime) {
        if (cu.cuEventSynchronize(ev_end) || cu.cuEventElapsedTime(&ms, ev_start, ev_end))
            goto fail;
        seconds = ms * 1e-3;
    } else {
        if (cu.cuEventSynchronize(ev_start))
            goto fail;
        double h0 = now_s();
        if (cu.cuEventSynchronize(ev_end))
            goto fail;
        seconds = now_s() - h0;
    }
    for (int i = 0; tokens && i < n; i++) { /* in order on one stream: the last one is enough */
        int64_t status = 0;
        if (i == n - 1 && (await_token(notifiers[v - B_CFD_EVENT], cfd_ep[v - B_CFD_EVENT],
                                       tokens[i], &status) || status))
            goto fail;
    }
    free(tokens);
    return seconds;
fail:
    free(tokens);
    return -1;
}

#define BUBBLE_BUDGET_S 4.0

static void bubble(int kernels, int batch, int repeats)
{
    double best[NVARIANTS][16] = {{0}};
    bool failed[NVARIANTS] = {false}, over_budget[NVARIANTS] = {false};
    failed[B_HOSTFUNC] = !cu.cuLaunchHostFunc;
    double gate_s[NVARIANTS]; /* per variant: their enqueue times differ */
    for (int v = 0; v < NVARIANTS; v++)
        gate_s[v] = 0.02;
    if (repeats > 16)
        repeats = 16;
    for (int v = 0; v < NVARIANTS; v++) /* warm-up */
        if (!failed[v] && bubble_batch(v, batch < 50 ? batch : 50, batch, 5000, &gate_s[v]) < 0)
            failed[v] = true;
    /* Each variant has a time budget: where enqueueing blocks behind the gate
     * (host functions can, once the driver's queue is full), the gate grows
     * with the enqueue time and a run could take many minutes. */
    double spent[NVARIANTS] = {0};
    for (int r = 0; r < repeats; r++)
        for (int v = 0; v < NVARIANTS; v++) {
            double total = 0, t_variant = now_s();
            if (!failed[v] && spent[v] > BUBBLE_BUDGET_S)
                failed[v] = over_budget[v] = true;
            for (int done = 0; !failed[v] && done < kernels; done += batch) {
                int n = kernels - done < batch ? kernels - done : batch;
                double s = bubble_batch(v, n, batch, 5000, &gate_s[v]);
                if (s < 0)
                    failed[v] = true;
                total += s;
            }
            best[v][r] = total;
            spent[v] += now_s() - t_variant;
        }
    double med[NVARIANTS];
    for (int v = 0; v < NVARIANTS; v++) {
        qsort(best[v], (size_t)repeats, sizeof(double), cmp_double);
        med[v] = pct(best[v], repeats, 0.5);
    }
    printf("\"bubble\": {\"kernels\": %d, \"kernel_us\": 5, \"batch\": %d, \"repeats\": %d, "
           "\"timing\": \"%s\", \"variants\": {",
           kernels, batch, repeats, cu.cuEventElapsedTime ? "gpu" : "host");
    const char *sep = "";
    for (int v = 0; v < NVARIANTS; v++) {
        if (failed[v] || failed[B_NONE])
            continue;
        printf("%s\n  \"%s\": {\"gpu_ms\": %.3f, \"us_per_kernel\": %.3f, \"us_per_point\": %.3f}",
               sep, variant_key[v], med[v] * 1e3, med[v] / kernels * 1e6,
               (med[v] - med[B_NONE]) / kernels * 1e6);
        sep = ",";
    }
    printf("},\n  \"errors\": {");
    sep = "";
    for (int v = 0; v < NVARIANTS; v++)
        if (failed[v]) {
            if (v == B_HOSTFUNC && !cu.cuLaunchHostFunc)
                printf("%s\"%s\": \"the driver has no cuLaunchHostFunc\"", sep, variant_key[v]);
            else if (over_budget[v])
                printf("%s\"%s\": \"over its time budget (%.0f s for all its batches)\"", sep, variant_key[v],
                       BUBBLE_BUDGET_S);
            else
                printf("%s\"%s\": \"a batch failed or timed out\"", sep, variant_key[v]);
            sep = ", ";
        }
    printf("}}\n");
}

/* ---- main ---- */

int main(int argc, char **argv)
{
    int rounds = arg_int(argc, argv, "--rounds", 3000);
    int block = arg_int(argc, argv, "--block", 100);
    int warmup = arg_int(argc, argv, "--warmup", 50);
    int kernels = arg_int(argc, argv, "--kernels", 2000);
    int batch = arg_int(argc, argv, "--batch", 200);
    int repeats = arg_int(argc, argv, "--repeats", 3);
    if (rounds < 1 || block < 1 || warmup < 0 || kernels < 1 || batch < 1 || repeats < 1)
        die("usage", "counts must be positive");
    char *ptx = read_file(arg_str(argc, argv, "--ptx", DEFAULT_PTX));

    load_driver();
    int version = 0;
    bench_setup(ptx);
    SETUP(cu.cuEventCreate(&ev_spin, EV_SPIN));
    SETUP(cu.cuEventCreate(&ev_block, EV_BLOCKING));
    SETUP(cu.cuEventCreate(&ev_start, EV_TIMING));
    SETUP(cu.cuEventCreate(&ev_end, EV_TIMING));
    cudafd_driver_version(&version);
    if ((efd = eventfd(0, EFD_CLOEXEC)) < 0 || (epfd = epoll_create1(EPOLL_CLOEXEC)) < 0)
        die("eventfd/epoll", strerror(errno));
    add_to_epoll(epfd, efd);
    for (int i = 0; i < 3; i++) {
        if (cudafd_notifier_create(mech_ids[i], &notifiers[i]) != CUDAFD_OK)
            die("cudafd_notifier_create", cudafd_last_error());
        if ((cfd_ep[i] = epoll_create1(EPOLL_CLOEXEC)) < 0)
            die("epoll_create1", strerror(errno));
        add_to_epoll(cfd_ep[i], cudafd_notifier_fd(notifiers[i]));
    }

    fprintf(stderr, "    c: round trips (%d rounds per method)\n", rounds);
    printf("{\"device\": \"%s\", \"driver\": \"%s\", \"driver_version\": %d, \"cudafd\": \"%s\", "
           "\"rounds\": %d, \"block\": %d, \"unit\": \"us\",\n",
           bench_device_name, cudafd_driver_path(), version, cudafd_version(), rounds, block);
    latency(rounds, block, warmup);
    fprintf(stderr, "    c: bubble (%d kernels of 5 us)\n", kernels);
    bubble(kernels, batch, repeats);
    printf("}\n");
    fflush(stdout);

    cu.cuCtxSynchronize();
    for (int i = 0; i < 3; i++) {
        cudafd_notifier_destroy(notifiers[i]);
        close(cfd_ep[i]);
    }
    close(epfd);
    close(efd);
    cu.cuEventDestroy(ev_spin);
    cu.cuEventDestroy(ev_block);
    cu.cuEventDestroy(ev_start);
    cu.cuEventDestroy(ev_end);
    bench_teardown();
    free(ptx);
    return 0;
}
