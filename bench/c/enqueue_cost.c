/*
 * enqueue_cost.c - which ingredient of a notification point makes the host
 * pay milliseconds to enqueue it while the GPU is busy.
 *
 *   cudafd-enqueue-cost [--points P] [--gate-s G] [--kernel-ns K] [--repeats R]
 *                       [--warmup W] [--ptx FILE] [--variants a,b,c]
 *
 * Why: on the H200 the stream-bubble benchmark is host-bound. With 200
 * (5 us kernel + point) pairs enqueued on one stream behind a long gate
 * kernel, every cudafd mechanism costs the host 3-4.5 ms per point, so the
 * GPU runs dry; a plain cuEventRecord costs about 1 us. The variants add the
 * suspects one at a time: many distinct events, the blocking-sync flag,
 * another thread inside the driver (blocked in cuEventSynchronize, or
 * spinning on a query, each of which may flush the push buffer into a GPU
 * submission of its own), host functions; and stream memory operations as a
 * point that needs no event at all.
 *
 * Per variant, W unrecorded warm-up rounds (default 1) then R rounds: a gate
 * kernel of G s (fixed: enqueueing must fit inside it for the GPU to run the
 * pairs back to back), a timing start event, P pairs (a cudafd_spin kernel of
 * K ns + the point), each pair timed on the host, the end event; then wait
 * for the end event (10 s at most) and take the GPU time start -> end with
 * cuEventElapsedTime (where the driver lacks it, as the simulator does, the
 * host time between the two events' completions as first seen after the
 * enqueue: approximate). Helper threads start before the gate, act once the
 * first point is enqueued, and are stopped and joined after each round.
 *   none               no point
 *   record_same        re-record one DISABLE_TIMING event
 *   record_plain       a distinct DISABLE_TIMING event per point (pre-created)
 *   record_blocking    a distinct BLOCKING_SYNC|DISABLE_TIMING event per point
 *   blocking_waiter    record_blocking + a thread blocked in cuEventSynchronize
 *                      on each point's event in turn
 *   query_spin         record_plain + a thread spinning cuEventQuery on the
 *                      oldest point not yet done (32 pauses between queries)
 *   query_paced        the same, 50 us asleep between queries
 *   stream_query_spin  no point; a thread spinning cuStreamQuery on the stream
 *   writevalue         cuStreamWriteValue32 of index+1 into a host-mapped word
 *                      (checked to read P at the end)
 *   writevalue_reader  writevalue + a thread spinning on that word (no driver call)
 *   hostfunc_empty     cuLaunchHostFunc of an empty function
 *   cudafd_event|spin|hostfunc  cudafd_watch_stream; every token drained after
 *
 * Prints one JSON object on stdout (env, parameters, per variant the fields
 * below or "error") and a table on stderr as it goes:
 *   host_us_per_point   p50/p99/max over every recorded pair
 *   host_ms_per_batch   median; gate launch to end record
 *   gate_covered        every round's enqueue took under 0.8 G
 *   gpu_us_per_kernel   median GPU time start -> end / P
 *   us_added_per_point  the same minus none's
 *   pairs_over_1ms, slowest_pair_index (per round): a stall always at the
 *                       same pair points at a driver queue that filled up
 *   helper_driver_calls_per_batch  (variants with a helper calling the driver)
 * A variant whose driver entry points are missing says "unavailable: why".
 * Never hangs: a round whose end event or tokens do not come within 10 s
 * fails its variant; a GPU left busy or a helper stuck in the driver skips
 * the variants after it. Exit status: 0 done (failed variants carry
 * "error"), 2 setup failed.
 */
#define _GNU_SOURCE
#include <errno.h>
#include <pthread.h>
#include <stdarg.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/epoll.h>
#include <time.h>
#include <unistd.h>

#include "common.h"

#ifndef DEFAULT_PTX
#define DEFAULT_PTX "../../src/cudafd/cudafd_spin.ptx"
#endif

#ifndef TIMEOUT_S
#define TIMEOUT_S 10.0 /* seconds; -DTIMEOUT_S=0.5 to exercise the give-up paths */
#endif
#define ATTR_STREAM_MEM_OPS_V1 92 /* CU_DEVICE_ATTRIBUTE_CAN_USE_STREAM_MEM_OPS(_V1) */
#define HOSTALLOC_DEVICEMAP 0x2   /* CU_MEMHOSTALLOC_DEVICEMAP */

const char bench_prog[] = "cudafd-enqueue-cost";

/* ---- the variants ---- */

enum point { PT_NONE, PT_SAME, PT_EACH, PT_WRITE, PT_HOSTFN, PT_CUDAFD };
enum helper { H_NONE, H_SYNC, H_QUERY_SPIN, H_QUERY_PACED, H_STREAM_QUERY, H_WORD };

static const struct variant {
    const char *key;
    enum point point;
    unsigned ev_flags; /* PT_SAME, PT_EACH */
    enum helper helper;
    int mech; /* PT_CUDAFD */
} variants[] = {
    {"none", PT_NONE, 0, H_NONE, 0},
    {"record_same", PT_SAME, EV_SPIN, H_NONE, 0},
    {"record_plain", PT_EACH, EV_SPIN, H_NONE, 0},
    {"record_blocking", PT_EACH, EV_BLOCKING, H_NONE, 0},
    {"blocking_waiter", PT_EACH, EV_BLOCKING, H_SYNC, 0},
    {"query_spin", PT_EACH, EV_SPIN, H_QUERY_SPIN, 0},
    {"query_paced", PT_EACH, EV_SPIN, H_QUERY_PACED, 0},
    {"stream_query_spin", PT_NONE, 0, H_STREAM_QUERY, 0},
    {"writevalue", PT_WRITE, 0, H_NONE, 0},
    {"writevalue_reader", PT_WRITE, 0, H_WORD, 0},
    {"hostfunc_empty", PT_HOSTFN, 0, H_NONE, 0},
    {"cudafd_event", PT_CUDAFD, 0, H_NONE, CUDAFD_MECH_EVENT},
    {"cudafd_spin", PT_CUDAFD, 0, H_NONE, CUDAFD_MECH_SPIN},
    {"cudafd_hostfunc", PT_CUDAFD, 0, H_NONE, CUDAFD_MECH_HOSTFUNC},
};
#define NVARIANTS ((int)(sizeof variants / sizeof variants[0]))

/* One variant's resources and results. */
struct run {
    const struct variant *v;
    CUevent *events; /* PT_SAME: 1, PT_EACH: one per point */
    int nevents;
    cudafd_notifier *notifier;
    int ep; /* epoll on the notifier's fd */
    int watched; /* tokens handed out this round */
    double *pair_us; /* every recorded pair */
    int npairs;
    double *batch_ms, *gpu_us, *calls; /* per recorded round */
    int *slowest;                      /* per recorded round: its slowest pair */
    int rounds;
    int over_1ms; /* pairs that took over 1 ms, all rounds */
    bool covered;
    char error[320];
};

static int points, repeats, warmup;
static double gate_s;
static uint64_t kernel_ns;
static CUevent ev_start, ev_end;
static uint32_t *word;      /* host-mapped, for PT_WRITE */
static CUdeviceptr word_dev;
static char word_why[160];  /* why there is no word */
static char broken[200];    /* set: the GPU or a helper is stuck; skip what follows */

static void fail(struct run *r, const char *fmt, ...)
{
    if (r->error[0])
        return; /* the first failure is the one to report */
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(r->error, sizeof r->error, fmt, ap);
    va_end(ap);
}

static void nap_us(long us)
{
    struct timespec t = {0, us * 1000};
    clock_nanosleep(CLOCK_MONOTONIC, 0, &t, NULL);
}

static void relax(void)
{
    for (int k = 0; k < 32; k++)
        cpu_relax();
}

static void nothing(void *unused) { (void)unused; }

/* ---- the helper thread of one round ---- */

static struct {
    pthread_t thread;
    enum helper kind;
    CUevent *events; /* H_SYNC, H_QUERY_*: the points' events */
    int n;
    atomic_int recorded; /* points enqueued so far this round */
    atomic_bool stop;
    atomic_int rc;    /* the first unexpected CUresult the helper met */
    atomic_long calls; /* driver calls it made */
} helper;

static CUresult helper_call(CUresult rc)
{
    atomic_fetch_add_explicit(&helper.calls, 1, memory_order_relaxed);
    if (rc && rc != CUDA_ERROR_NOT_READY)
        atomic_store(&helper.rc, rc);
    return rc;
}

static void *helper_main(void *unused)
{
    (void)unused;
    enum helper kind = helper.kind;
    int i = 0; /* the oldest point not seen done */
    while (!atomic_load(&helper.stop) && !atomic_load(&helper.rc)) {
        if (kind == H_WORD) { /* memory reads only, from the start */
            if (__atomic_load_n(word, __ATOMIC_ACQUIRE) >= (uint32_t)helper.n)
                break;
            relax();
            continue;
        }
        int recorded = atomic_load_explicit(&helper.recorded, memory_order_acquire);
        if (kind == H_STREAM_QUERY) {
            if (recorded > 0)
                helper_call(cu.cuStreamQuery(stream));
            relax();
            continue;
        }
        if (i == helper.n)
            break;
        if (recorded <= i) { /* the main thread has not enqueued it yet */
            if (kind == H_QUERY_SPIN)
                relax();
            else
                nap_us(50);
            continue;
        }
        CUresult rc = helper_call(kind == H_SYNC ? cu.cuEventSynchronize(helper.events[i])
                                                 : cu.cuEventQuery(helper.events[i]));
        if (rc == 0)
            i++;
        else if (kind == H_QUERY_SPIN)
            relax();
        else if (kind == H_QUERY_PACED)
            nap_us(50);
    }
    return NULL;
}

static int helper_start(struct run *r)
{
    helper.kind = r->v->helper;
    helper.events = r->events;
    helper.n = points;
    atomic_store(&helper.recorded, 0);
    atomic_store(&helper.stop, false);
    atomic_store(&helper.rc, 0);
    atomic_store(&helper.calls, 0);
    int e = pthread_create(&helper.thread, NULL, helper_main, NULL);
    if (e)
        fail(r, "failed: pthread_create: %s", strerror(e));
    return e ? -1 : 0;
}

/* Stop and join the helper; one still in the driver after TIMEOUT_S is left
 * running and marks the run broken (its events are then never destroyed). */
static void helper_stop(struct run *r)
{
    atomic_store(&helper.stop, true);
    struct timespec until;
    clock_gettime(CLOCK_REALTIME, &until);
    long long ns = until.tv_nsec + (long long)(TIMEOUT_S * 1e9);
    until.tv_sec += (time_t)(ns / 1000000000);
    until.tv_nsec = (long)(ns % 1000000000);
    if (pthread_timedjoin_np(helper.thread, NULL, &until)) {
        fail(r, "failed: the helper thread did not stop within %g s", TIMEOUT_S);
        snprintf(broken, sizeof broken, "%s left a helper thread stuck in the driver", r->v->key);
        pthread_detach(helper.thread);
    } else if (atomic_load(&helper.rc)) {
        fail(r, "failed: the helper's driver call returned %s",
             cudafd_cuda_error_name(atomic_load(&helper.rc)));
    }
}

/* ---- one round ---- */

/* Poll `ev` until it completes: 0, or -1 (error or TIMEOUT_S) with r->error set. */
static int wait_event(struct run *r, CUevent ev, const char *which)
{
    double deadline = now_s() + TIMEOUT_S;
    for (;;) {
        CUresult rc = cu.cuEventQuery(ev);
        if (rc == 0)
            return 0;
        if (rc != CUDA_ERROR_NOT_READY) {
            fail(r, "failed: cuEventQuery(%s event): %s", which, cudafd_cuda_error_name(rc));
            return -1;
        }
        if (now_s() > deadline) {
            fail(r, "failed: the %s event did not complete within %g s", which, TIMEOUT_S);
            snprintf(broken, sizeof broken, "%s left the GPU busy", r->v->key);
            return -1;
        }
        nap_us(20);
    }
}

/* Collect every token handed out this round (TIMEOUT_S at most). */
static void drain_tokens(struct run *r)
{
    double deadline = now_s() + TIMEOUT_S;
    int got = 0;
    while (got < r->watched) {
        cudafd_completion c[64];
        int k = cudafd_drain(r->notifier, c, 64);
        if (k < 0) {
            fail(r, "failed: cudafd_drain: %s", cudafd_last_error());
            return;
        }
        for (int j = 0; j < k; j++)
            if (c[j].status)
                fail(r, "failed: a token completed with %s",
                     cudafd_cuda_error_name((int)c[j].status));
        got += k;
        double left = deadline - now_s();
        if (k == 0 && (left <= 0 || wait_fd(r->ep, left))) {
            fail(r, "failed: %d of %d tokens came within %g s", got, r->watched, TIMEOUT_S);
            return;
        }
    }
}

/* Enqueue the round's point `i`: 0, or -1 with r->error set. */
static int add_point(struct run *r, int i)
{
    CUresult rc = 0;
    const char *call = "";
    switch (r->v->point) {
    case PT_NONE:
        return 0;
    case PT_SAME:
    case PT_EACH:
        call = "cuEventRecord";
        rc = cu.cuEventRecord(r->events[r->v->point == PT_SAME ? 0 : i], stream);
        break;
    case PT_WRITE:
        call = "cuStreamWriteValue32";
        rc = cu.cuStreamWriteValue32(stream, word_dev, (uint32_t)i + 1, 0);
        break;
    case PT_HOSTFN:
        call = "cuLaunchHostFunc";
        rc = cu.cuLaunchHostFunc(stream, nothing, NULL);
        break;
    case PT_CUDAFD: {
        uint64_t token;
        if (cudafd_watch_stream(r->notifier, (uintptr_t)stream, &token) != CUDAFD_OK) {
            fail(r, "failed: cudafd_watch_stream (point %d): %s", i, cudafd_last_error());
            return -1;
        }
        r->watched++;
        return 0;
    }
    }
    if (rc == 0)
        return 0;
    if (r->v->point == PT_WRITE && cu.cuDeviceGetAttribute) {
        int v1 = -1;
        cu.cuDeviceGetAttribute(&v1, ATTR_STREAM_MEM_OPS_V1, bench_dev);
        fail(r, "failed: %s (point %d): %s (attribute %d, stream mem ops v1: %d)", call, i,
             cudafd_cuda_error_name(rc), ATTR_STREAM_MEM_OPS_V1, v1);
    } else {
        fail(r, "failed: %s (point %d): %s", call, i, cudafd_cuda_error_name(rc));
    }
    return -1;
}

/* One round; `record`: keep its figures. 0, or -1 with r->error set. */
static int round_once(struct run *r, bool record)
{
    r->watched = 0;
    if (word)
        __atomic_store_n(word, 0, __ATOMIC_RELEASE);
    if (r->v->helper != H_NONE && helper_start(r))
        return -1;
    double *pairs = record ? r->pair_us + r->npairs : NULL;
    double t_all = now_s();
    CUresult rc = launch(stream, (uint64_t)(gate_s * 1e9));
    if (rc == 0)
        rc = cu.cuEventRecord(ev_start, stream);
    if (rc)
        fail(r, "failed: gate/start: %s", cudafd_cuda_error_name(rc));
    for (int i = 0; i < points && !r->error[0]; i++) {
        double t0 = now_s();
        rc = launch(stream, kernel_ns);
        if (rc) {
            fail(r, "failed: cuLaunchKernel (point %d): %s", i, cudafd_cuda_error_name(rc));
            break;
        }
        if (add_point(r, i))
            break;
        double t1 = now_s();
        atomic_store_explicit(&helper.recorded, i + 1, memory_order_release);
        if (pairs)
            pairs[i] = (t1 - t0) * 1e6;
    }
    /* Even after a failure: the end event, so that the stream is idle after. */
    rc = cu.cuEventRecord(ev_end, stream);
    double enqueue = now_s() - t_all;
    if (rc) {
        fail(r, "failed: cuEventRecord(end): %s", cudafd_cuda_error_name(rc));
        snprintf(broken, sizeof broken, "%s could not mark the end of its round", r->v->key);
    }
    double gpu = -1, t_start = 0;
    bool ok = rc == 0;
    if (ok && !cu.cuEventElapsedTime && (ok = wait_event(r, ev_start, "start") == 0))
        t_start = now_s();
    if (ok && wait_event(r, ev_end, "end") == 0) {
        float ms = 0;
        if (!cu.cuEventElapsedTime)
            gpu = now_s() - t_start;
        else if ((rc = cu.cuEventElapsedTime(&ms, ev_start, ev_end)))
            fail(r, "failed: cuEventElapsedTime: %s", cudafd_cuda_error_name(rc));
        else
            gpu = ms * 1e-3;
    }
    if (r->v->helper != H_NONE)
        helper_stop(r);
    if (r->notifier && !broken[0])
        drain_tokens(r);
    if (word && r->v->point == PT_WRITE && !r->error[0] &&
        __atomic_load_n(word, __ATOMIC_ACQUIRE) != (uint32_t)points)
        fail(r, "failed: the host word reads %u after the round, not %d",
             __atomic_load_n(word, __ATOMIC_ACQUIRE), points);
    if (r->error[0])
        return -1;
    if (record) {
        int slow = 0;
        for (int i = 0; i < points; i++) {
            slow = pairs[i] > pairs[slow] ? i : slow;
            r->over_1ms += pairs[i] > 1e3;
        }
        r->slowest[r->rounds] = slow;
        r->npairs += points;
        r->batch_ms[r->rounds] = enqueue * 1e3;
        r->gpu_us[r->rounds] = gpu * 1e6 / points;
        r->calls[r->rounds] = (double)atomic_load(&helper.calls);
        r->rounds++;
        r->covered &= enqueue < 0.8 * gate_s;
    }
    return 0;
}

/* ---- one variant ---- */

/* Why `v` cannot run with this driver, or NULL. */
static const char *unavailable(const struct variant *v)
{
    static char why[200];
    if (v->point == PT_WRITE && !cu.cuStreamWriteValue32)
        return "the driver has no cuStreamWriteValue32";
    if (v->point == PT_WRITE && !word)
        return word_why;
    if (v->point == PT_HOSTFN && !cu.cuLaunchHostFunc)
        return "the driver has no cuLaunchHostFunc";
    if (v->helper == H_STREAM_QUERY && !cu.cuStreamQuery)
        return "the driver has no cuStreamQuery";
    if (v->point == PT_CUDAFD && cudafd_mechanism_available(v->mech) != CUDAFD_OK) {
        snprintf(why, sizeof why, "cudafd: %s", cudafd_last_error());
        return why;
    }
    return NULL;
}

/* Create what the variant needs: 0, or -1 with r->error set. */
static int prepare(struct run *r)
{
    const struct variant *v = r->v;
    int n = v->point == PT_SAME ? 1 : v->point == PT_EACH ? points : 0;
    if (n && !(r->events = calloc((size_t)n, sizeof *r->events))) {
        fail(r, "failed: out of memory");
        return -1;
    }
    for (; r->nevents < n; r->nevents++) {
        CUresult rc = cu.cuEventCreate(&r->events[r->nevents], v->ev_flags);
        if (rc) {
            fail(r, "failed: cuEventCreate: %s", cudafd_cuda_error_name(rc));
            return -1;
        }
    }
    if (v->point == PT_CUDAFD) {
        if (cudafd_notifier_create(v->mech, &r->notifier) != CUDAFD_OK) {
            fail(r, "failed: cudafd_notifier_create: %s", cudafd_last_error());
            return -1;
        }
        if ((r->ep = epoll_create1(EPOLL_CLOEXEC)) < 0) {
            fail(r, "failed: epoll_create1: %s", strerror(errno));
            return -1;
        }
        add_to_epoll(r->ep, cudafd_notifier_fd(r->notifier));
    }
    return 0;
}

static void release(struct run *r)
{
    if (broken[0] && r->v->helper != H_NONE)
        return; /* a stuck helper may still use the events */
    for (int i = 0; i < r->nevents; i++)
        cu.cuEventDestroy(r->events[i]);
    free(r->events);
    if (r->notifier)
        cudafd_notifier_destroy(r->notifier);
    if (r->ep > 0)
        close(r->ep);
}

static double median(double *x, int n)
{
    qsort(x, (size_t)n, sizeof *x, cmp_double);
    return pct(x, n, 0.5);
}

static void run_variant(struct run *r)
{
    const struct variant *v = r->v;
    const char *why = broken[0] ? broken : unavailable(v);
    if (why) {
        snprintf(r->error, sizeof r->error, "%s: %s", broken[0] ? "skipped" : "unavailable", why);
        return;
    }
    r->pair_us = calloc((size_t)points * (size_t)repeats, sizeof(double));
    r->batch_ms = calloc((size_t)repeats, sizeof(double));
    r->gpu_us = calloc((size_t)repeats, sizeof(double));
    r->calls = calloc((size_t)repeats, sizeof(double));
    r->slowest = calloc((size_t)repeats, sizeof(int));
    r->covered = true;
    if (!r->pair_us || !r->batch_ms || !r->gpu_us || !r->calls || !r->slowest)
        fail(r, "failed: out of memory");
    if (!r->error[0] && prepare(r) == 0)
        for (int k = 0; k < warmup + repeats && round_once(r, k >= warmup) == 0; k++)
            ;
    release(r);
    if (r->error[0])
        return;
    qsort(r->pair_us, (size_t)r->npairs, sizeof(double), cmp_double);
}

/* ---- output ---- */

/* `s` as a JSON string (quotes and backslashes escaped, controls dropped). */
static void json_str(const char *s)
{
    putchar('"');
    for (; *s; s++)
        if (*s == '"' || *s == '\\')
            printf("\\%c", *s);
        else if ((unsigned char)*s >= 0x20)
            putchar(*s);
    putchar('"');
}

static void show(const struct run *r, const struct run *base)
{
    if (r->error[0]) {
        fprintf(stderr, "%-18s %s\n", r->v->key, r->error);
        return;
    }
    const double *x = r->pair_us;
    int n = r->npairs;
    fprintf(stderr, "%-18s %9.2f %9.2f %10.1f %9.2f %7s %9.3f", r->v->key, pct(x, n, 0.5),
            pct(x, n, 0.99), x[n - 1], median(r->batch_ms, r->rounds), r->covered ? "yes" : "NO",
            median(r->gpu_us, r->rounds));
    if (base && !base->error[0])
        fprintf(stderr, " %9.3f", median(r->gpu_us, r->rounds) - median(base->gpu_us, base->rounds));
    else
        fprintf(stderr, " %9s", "-");
    fprintf(stderr, " %6d  ", r->over_1ms);
    for (int j = 0; j < r->rounds; j++)
        fprintf(stderr, "%s%d", j ? "," : "", r->slowest[j]);
    fprintf(stderr, "\n");
}

static void print_json(struct run *runs, int nruns, const char *ptx_path, const struct run *base)
{
    int attr = -1;
    if (cu.cuDeviceGetAttribute && cu.cuDeviceGetAttribute(&attr, ATTR_STREAM_MEM_OPS_V1, bench_dev))
        attr = -1;
    int version = 0;
    cudafd_driver_version(&version);
    printf("{\"env\": {\"driver\": ");
    json_str(cudafd_driver_path());
    printf(", \"driver_version\": %d, \"device\": ", version);
    json_str(bench_device_name);
    printf(", \"cudafd\": \"%s\", \"gpu_timing\": \"%s\", \"stream_mem_ops_v1_attribute\": %d},\n",
           cudafd_version(), cu.cuEventElapsedTime ? "cuEventElapsedTime" : "host (approximate)",
           attr);
    printf("\"parameters\": {\"points\": %d, \"gate_s\": %g, \"kernel_ns\": %llu, \"repeats\": %d, "
           "\"warmup\": %d, \"timeout_s\": %g, \"ptx\": ",
           points, gate_s, (unsigned long long)kernel_ns, repeats, warmup, TIMEOUT_S);
    json_str(ptx_path);
    printf("},\n\"variants\": {");
    for (int k = 0; k < nruns; k++) {
        struct run *r = &runs[k];
        printf("%s\n  \"%s\": {", k ? "," : "", r->v->key);
        if (r->error[0]) {
            printf("\"error\": ");
            json_str(r->error);
            printf("}");
            continue;
        }
        const double *x = r->pair_us;
        int n = r->npairs;
        double gpu = median(r->gpu_us, r->rounds);
        printf("\"host_us_per_point\": {\"p50\": %.3f, \"p99\": %.3f, \"max\": %.1f}, "
               "\"host_ms_per_batch\": %.3f, \"gate_covered\": %s, \"gpu_us_per_kernel\": %.3f, "
               "\"us_added_per_point\": ",
               pct(x, n, 0.5), pct(x, n, 0.99), x[n - 1], median(r->batch_ms, r->rounds),
               r->covered ? "true" : "false", gpu);
        if (base && !base->error[0])
            printf("%.3f", gpu - median(base->gpu_us, base->rounds));
        else
            printf("null");
        printf(", \"pairs_over_1ms\": %d, \"slowest_pair_index\": [", r->over_1ms);
        for (int j = 0; j < r->rounds; j++)
            printf("%s%d", j ? ", " : "", r->slowest[j]);
        printf("]");
        if (r->v->helper != H_NONE && r->v->helper != H_WORD)
            printf(", \"helper_driver_calls_per_batch\": %.0f", median(r->calls, r->rounds));
        printf("}");
    }
    printf("}}\n");
    fflush(stdout);
}

/* ---- main ---- */

/* Mark the variants named in the comma-separated `list` (NULL: all); dies on an unknown name. */
static void select_variants(const char *list, bool *on)
{
    for (int k = 0; k < NVARIANTS; k++)
        on[k] = list == NULL;
    for (const char *s = list; s && *s;) {
        size_t len = strcspn(s, ",");
        int k = 0;
        while (k < NVARIANTS && (strlen(variants[k].key) != len || strncmp(variants[k].key, s, len)))
            k++;
        if (k == NVARIANTS) {
            fprintf(stderr, "%s: unknown variant '%.*s'; known:", bench_prog, (int)len, s);
            for (k = 0; k < NVARIANTS; k++)
                fprintf(stderr, " %s", variants[k].key);
            fprintf(stderr, "\n");
            exit(2);
        }
        on[k] = true;
        s += len + (s[len] == ',');
    }
}

/* The host-mapped word of the writevalue variants, or why not in word_why. */
static void map_word(void)
{
    if (!cu.cuMemHostAlloc || !cu.cuMemHostGetDevicePointer || !cu.cuMemFreeHost) {
        snprintf(word_why, sizeof word_why, "the driver has no cuMemHostAlloc, "
                                            "cuMemHostGetDevicePointer or cuMemFreeHost");
        return;
    }
    void *p = NULL;
    CUresult rc = cu.cuMemHostAlloc(&p, sizeof *word, HOSTALLOC_DEVICEMAP);
    if (rc == 0 && (rc = cu.cuMemHostGetDevicePointer(&word_dev, p, 0)))
        cu.cuMemFreeHost(p);
    if (rc) {
        snprintf(word_why, sizeof word_why, "mapped host memory: %s", cudafd_cuda_error_name(rc));
        return;
    }
    word = p;
}

int main(int argc, char **argv)
{
    points = arg_int(argc, argv, "--points", 200);
    gate_s = arg_double(argc, argv, "--gate-s", 0.25);
    double kns = arg_double(argc, argv, "--kernel-ns", 5000);
    repeats = arg_int(argc, argv, "--repeats", 3);
    warmup = arg_int(argc, argv, "--warmup", 1);
    if (points < 1 || repeats < 1 || warmup < 0 || !(gate_s > 0 && gate_s <= 5) || !(kns >= 0))
        die("usage", "--points, --repeats >= 1, --warmup >= 0, 0 < --gate-s <= 5, --kernel-ns >= 0");
    kernel_ns = (uint64_t)kns;
    bool on[NVARIANTS];
    select_variants(arg_str(argc, argv, "--variants", NULL), on);
    const char *ptx_path = arg_str(argc, argv, "--ptx", DEFAULT_PTX);
    char *ptx = read_file(ptx_path);

    load_driver();
    bench_setup(ptx);
    SETUP(cu.cuEventCreate(&ev_start, EV_TIMING));
    SETUP(cu.cuEventCreate(&ev_end, EV_TIMING));
    map_word();

    struct run runs[NVARIANTS];
    int nruns = 0;
    const struct run *base = NULL;
    fprintf(stderr, "%s on %s: %d points of %llu ns behind a %g s gate, %d rounds (+%d warm-up)\n",
            bench_prog, bench_device_name, points, (unsigned long long)kernel_ns, gate_s, repeats,
            warmup);
    fprintf(stderr, "%-18s %9s %9s %10s %9s %7s %9s %9s %6s  %s\n", "variant", "p50 us", "p99 us",
            "max us", "batch ms", "covered", "gpu us/k", "added us", ">1 ms", "slowest pair");
    for (int k = 0; k < NVARIANTS; k++) {
        if (!on[k])
            continue;
        struct run *r = &runs[nruns++];
        memset(r, 0, sizeof *r);
        r->v = &variants[k];
        run_variant(r);
        if (r->v->point == PT_NONE && r->v->helper == H_NONE)
            base = r;
        show(r, base);
    }
    print_json(runs, nruns, ptx_path, base);

    for (int k = 0; k < nruns; k++) {
        free(runs[k].pair_us);
        free(runs[k].batch_ms);
        free(runs[k].gpu_us);
        free(runs[k].calls);
        free(runs[k].slowest);
    }
    free(ptx);
    if (broken[0]) /* something may still use the driver: leave it as it is */
        return 0;
    cu.cuCtxSynchronize();
    if (word)
        cu.cuMemFreeHost(word);
    cu.cuEventDestroy(ev_start);
    cu.cuEventDestroy(ev_end);
    bench_teardown();
    return 0;
}
