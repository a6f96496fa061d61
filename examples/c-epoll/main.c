/*
 * main.c - waiting for CUDA streams with cudafd and a plain epoll loop.
 *
 *   cudafd-epoll [event|hostfunc|spin] [--streams N] [--watches K] [--fault]
 *
 * What it does:
 *  1. Loads the CUDA driver through libcudafd (cudafd_driver_load) and opens
 *     the very same library itself to launch work: $CUDAFD_DRIVER if set (for
 *     example libcudafd_sim.so, the simulator), else libcuda.so.1.
 *  2. Retains the primary context of device 0, loads the PTX kernel
 *     cudafd_spin and creates N non-blocking streams.
 *  3. On every stream, K times: launches cudafd_spin for a varied time and
 *     calls cudafd_watch_stream(), which returns a token.
 *  4. Registers the notifier's fd with epoll, edge-triggered, and on every
 *     wakeup drains completions until cudafd_drain() returns 0.
 *  5. Checks that every token completes exactly once, with status 0, and on
 *     each stream in the order it was watched; prints latency figures.
 *  6. With --fault: launches a kernel that stores to address 0 and shows its
 *     completion status, CUDA_ERROR_ILLEGAL_ADDRESS.
 *
 * Exit status: 0 all checks passed, 1 a check failed, 2 setup failed.
 *
 * Facts this program relies on:
 *  - cudafd.h's readiness contract: the fd is readable exactly while
 *    completions are queued, and the drain that empties the queue also clears
 *    the fd, under the producers' lock. So an edge-triggered loop that drains
 *    until 0 after each wakeup never misses a completion: anything queued
 *    after that last empty drain raises a new edge.
 *  - Completions of watches on one stream are queued in watch order (a stream
 *    runs its work in order, and cudafd reports each point when it is passed).
 *  - The CUDA driver's cuGetProcAddress_v2 (CUDA 12.0+) takes an entry
 *    point's base name ("cuCtxPushCurrent") and, given version 12000, returns
 *    the CUDA 12.0 ABI of it (cuCtxPushCurrent_v2). The simulator implements
 *    the same call, so one resolution path serves both. Older drivers only
 *    export the symbols, hence the dlsym fallback with the _v2 names.
 *  - A fault in a kernel is sticky: the whole context is unusable afterwards,
 *    so the fault demo runs last and the program then exits.
 */
#define _GNU_SOURCE
#include <dlfcn.h>
#include <errno.h>
#include <inttypes.h>
#include <poll.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/epoll.h>
#include <time.h>
#include <unistd.h>

#include "cudafd.h"

/* ---- the slice of the CUDA driver API used here ----
 * Types and values are the driver's stable ABI (cuda.h), restated so that the
 * example builds without the CUDA toolkit. */
typedef int CUresult;
typedef int CUdevice;
typedef struct CUctx_st *CUcontext;
typedef struct CUstream_st *CUstream;
typedef struct CUmod_st *CUmodule;
typedef struct CUfunc_st *CUfunction;

#define CUDA_SUCCESS 0
#define CUDA_ERROR_ILLEGAL_ADDRESS 700
#define CU_STREAM_NON_BLOCKING 0x1
#define CUDA_API_VERSION 12000 /* the ABI asked of cuGetProcAddress_v2 */

typedef CUresult (*get_proc_address_t)(const char *symbol, void **pfn, int cuda_version,
                                       uint64_t flags, int *status);

static struct {
    CUresult (*cuInit)(unsigned flags);
    CUresult (*cuDeviceGet)(CUdevice *dev, int ordinal);
    CUresult (*cuDevicePrimaryCtxRetain)(CUcontext *ctx, CUdevice dev);
    CUresult (*cuDevicePrimaryCtxRelease)(CUdevice dev);
    CUresult (*cuCtxPushCurrent)(CUcontext ctx);
    CUresult (*cuCtxPopCurrent)(CUcontext *ctx);
    CUresult (*cuStreamCreate)(CUstream *stream, unsigned flags);
    CUresult (*cuStreamDestroy)(CUstream stream);
    CUresult (*cuModuleLoadData)(CUmodule *module, const void *image);
    CUresult (*cuModuleGetFunction)(CUfunction *fn, CUmodule module, const char *name);
    CUresult (*cuModuleUnload)(CUmodule module);
    CUresult (*cuLaunchKernel)(CUfunction f, unsigned gx, unsigned gy, unsigned gz, unsigned bx,
                               unsigned by, unsigned bz, unsigned shared_mem, CUstream stream,
                               void **params, void **extra);
} cu;

/* cudafd_spin(u64 ns, u32 fault): busy-waits on %globaltimer (nanoseconds)
 * for ns, then stores to address 0 if fault != 0, which the GPU reports as
 * CUDA_ERROR_ILLEGAL_ADDRESS. sm_70 / PTX ISA 7.0: the driver JIT-compiles it
 * for any Volta-or-newer GPU (Jetson Orin included). The text is the
 * project's own (src/cudafd/_kernels.py); the simulator's cuModuleLoadData
 * accepts any image and runs a cudafd_spin with the same semantics. */
static const char SPIN_PTX[] =
    ".version 7.0\n"
    ".target sm_70\n"
    ".address_size 64\n"
    "\n"
    ".visible .entry cudafd_spin(\n"
    "    .param .u64 ns,\n"
    "    .param .u32 fault\n"
    ")\n"
    "{\n"
    "    .reg .pred  %p<3>;\n"
    "    .reg .b32   %r<2>;\n"
    "    .reg .b64   %rd<6>;\n"
    "\n"
    "    ld.param.u64        %rd1, [ns];\n"
    "    ld.param.u32        %r1, [fault];\n"
    "    mov.u64             %rd2, %globaltimer;\n"
    "SPIN:\n"
    "    mov.u64             %rd3, %globaltimer;\n"
    "    sub.u64             %rd4, %rd3, %rd2;\n"
    "    setp.lt.u64         %p1, %rd4, %rd1;\n"
    "    @%p1 bra            SPIN;\n"
    "    setp.eq.u32         %p2, %r1, 0;\n"
    "    @%p2 bra            DONE;\n"
    "    mov.u64             %rd5, 0;\n"
    "    st.volatile.global.u32 [%rd5], %r1;\n"
    "DONE:\n"
    "    ret;\n"
    "}\n";

/* ---- small helpers ---- */

static double now_s(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

static void die_cudafd(const char *what, int rc)
{
    fprintf(stderr, "error: %s: %d: %s\n", what, rc, cudafd_last_error());
    exit(2);
}

/* Every driver call goes through this: the name of a failure comes from the
 * driver itself, via cudafd_cuda_error_name(). */
#define CU_CHECK(call)                                                                             \
    do {                                                                                           \
        CUresult cu_rc_ = (call);                                                                  \
        if (cu_rc_ != CUDA_SUCCESS) {                                                              \
            fprintf(stderr, "error: %s: %s\n", #call, cudafd_cuda_error_name(cu_rc_));             \
            exit(2);                                                                               \
        }                                                                                          \
    } while (0)

/* Resolve one entry point: cuGetProcAddress_v2 with the base name first, then
 * dlsym with the versioned export name, then the plain name. */
static void *resolve(void *lib, get_proc_address_t gpa, const char *name, const char *v2_name)
{
    void *fn = NULL;
    int status = 0;
    if (gpa && gpa(name, &fn, CUDA_API_VERSION, 0, &status) != CUDA_SUCCESS)
        fn = NULL;
    if (!fn && v2_name)
        fn = dlsym(lib, v2_name);
    if (!fn)
        fn = dlsym(lib, name);
    if (!fn) {
        fprintf(stderr, "error: the driver has no %s\n", name);
        exit(2);
    }
    return fn;
}

static void load_driver(void)
{
    /* The core loads the driver first ($CUDAFD_DRIVER or libcuda.so.1, and
     * cuInit); dlopen of the path it used returns that same library. */
    int rc = cudafd_driver_load();
    if (rc != CUDAFD_OK)
        die_cudafd("cudafd_driver_load", rc);
    void *lib = dlopen(cudafd_driver_path(), RTLD_NOW | RTLD_LOCAL);
    if (!lib) {
        fprintf(stderr, "error: dlopen %s: %s\n", cudafd_driver_path(), dlerror());
        exit(2);
    }
    /* POSIX lets dlsym's result be used as a function pointer; storing it
     * through a void * keeps ISO C (-Wpedantic) quiet about the conversion. */
    get_proc_address_t gpa;
    *(void **)&gpa = dlsym(lib, "cuGetProcAddress_v2");
#define RESOLVE(name, v2) *(void **)&cu.name = resolve(lib, gpa, #name, v2)
    RESOLVE(cuInit, NULL);
    RESOLVE(cuDeviceGet, NULL);
    RESOLVE(cuDevicePrimaryCtxRetain, NULL);
    RESOLVE(cuDevicePrimaryCtxRelease, "cuDevicePrimaryCtxRelease_v2");
    RESOLVE(cuCtxPushCurrent, "cuCtxPushCurrent_v2");
    RESOLVE(cuCtxPopCurrent, "cuCtxPopCurrent_v2");
    RESOLVE(cuStreamCreate, NULL);
    RESOLVE(cuStreamDestroy, "cuStreamDestroy_v2");
    RESOLVE(cuModuleLoadData, NULL);
    RESOLVE(cuModuleGetFunction, NULL);
    RESOLVE(cuModuleUnload, NULL);
    RESOLVE(cuLaunchKernel, NULL);
#undef RESOLVE
    /* The handle stays open: cudafd's own threads keep using the library. */
}

/* Enqueue cudafd_spin on `stream` (one thread). kernelParams holds one
 * pointer per kernel parameter, in order; the driver copies the values during
 * the call, so locals are fine. */
static CUresult launch_spin(CUfunction fn, CUstream stream, uint64_t ns, uint32_t fault)
{
    void *params[] = {&ns, &fault};
    return cu.cuLaunchKernel(fn, 1, 1, 1, 1, 1, 1, 0, stream, params, NULL);
}

/* ---- watches and their completions ---- */

struct watch {
    uint64_t token;
    int stream, seq;     /* seq: 0, 1, ... in watch order on its stream */
    double launched;     /* just before the launch of the kernel it follows */
    double expected_end; /* when the GPU should pass this point, from the kernels' own times */
    double done;         /* when the loop drained its completion (0: not yet) */
    int64_t status;
};

struct by_token {
    uint64_t token;
    int index;
};

static int cmp_token(const void *a, const void *b)
{
    uint64_t x = ((const struct by_token *)a)->token, y = ((const struct by_token *)b)->token;
    return (x > y) - (x < y);
}

struct loop_stats {
    int wakeups, empty_wakeups, drains, completions, unknown, duplicates, out_of_order;
};

/*
 * The event loop: wait for the notifier's fd with epoll (edge-triggered) and
 * collect completions until every watch in w[0..count) has one. Returns 0, or
 * -1 on a timeout or an error (the caller's checks then report what is missing).
 */
static int collect(cudafd_notifier *n, int epfd, struct watch *w, int count, int nstreams,
                   struct loop_stats *st)
{
    /* Tokens are opaque 64-bit values: look them up through a sorted index. */
    struct by_token *index = calloc((size_t)count, sizeof *index);
    int *next_seq = calloc((size_t)nstreams, sizeof *next_seq);
    if (!index || !next_seq) {
        fprintf(stderr, "error: out of memory\n");
        exit(2);
    }
    for (int i = 0; i < count; i++)
        index[i] = (struct by_token){w[i].token, i};
    qsort(index, (size_t)count, sizeof *index, cmp_token);

    int rc = 0, remaining = count;
    while (remaining > 0) {
        struct epoll_event ev[4];
        int k = epoll_wait(epfd, ev, 4, 10000);
        if (k < 0 && errno == EINTR)
            continue;
        if (k < 0) {
            perror("epoll_wait");
            rc = -1;
            break;
        }
        if (k == 0) {
            fprintf(stderr, "timeout: %d completion(s) still missing after 10 s\n", remaining);
            rc = -1;
            break;
        }
        st->wakeups++;
        /* Edge-triggered: this wakeup is the only notice for everything queued
         * now. Drain until cudafd_drain() returns 0: the drain that empties the
         * queue also clears the fd, so the next completion raises a new edge.
         * A small batch shows that one edge may take several drains. */
        int got_this_wakeup = 0;
        for (;;) {
            cudafd_completion batch[8];
            int got = cudafd_drain(n, batch, 8);
            st->drains++;
            if (got < 0) {
                fprintf(stderr, "error: cudafd_drain: %d: %s\n", got, cudafd_last_error());
                rc = -1;
                goto out;
            }
            if (got == 0)
                break;
            got_this_wakeup += got;
            double t = now_s();
            for (int i = 0; i < got; i++) {
                st->completions++;
                struct by_token key = {batch[i].token, 0};
                struct by_token *hit = bsearch(&key, index, (size_t)count, sizeof *index, cmp_token);
                if (!hit) {
                    st->unknown++;
                    continue;
                }
                struct watch *x = &w[hit->index];
                if (x->done != 0) {
                    st->duplicates++;
                    continue;
                }
                x->done = t;
                x->status = batch[i].status;
                if (x->seq != next_seq[x->stream])
                    st->out_of_order++;
                next_seq[x->stream] = x->seq + 1;
                remaining--;
            }
        }
        if (got_this_wakeup == 0)
            st->empty_wakeups++; /* harmless: the previous loop already drained it */
    }
out:
    free(index);
    free(next_seq);
    return rc;
}

static int cmp_double(const void *a, const void *b)
{
    double x = *(const double *)a, y = *(const double *)b;
    return (x > y) - (x < y);
}

/* min / p50 / max of v[0..count), in milliseconds (sorts v). */
static void print_spread(const char *label, double *v, int count)
{
    qsort(v, (size_t)count, sizeof *v, cmp_double);
    printf("  %-34s min %8.3f  p50 %8.3f  max %8.3f ms\n", label, v[0] * 1e3, v[count / 2] * 1e3,
           v[count - 1] * 1e3);
}

static int failures;
static void check(bool ok, const char *what)
{
    printf("  [%s] %s\n", ok ? " ok " : "FAIL", what);
    if (!ok)
        failures++;
}

/* ---- main ---- */

static void usage(const char *prog)
{
    fprintf(stderr,
            "usage: %s [event|hostfunc|spin] [--streams N] [--watches K] [--fault]\n"
            "  event     pooled blocking-sync events (default)\n"
            "  hostfunc  cuLaunchHostFunc on a side stream\n"
            "  spin      pooled events, polled by a shared waiter\n"
            "  --streams N  streams to launch on (default 8)\n"
            "  --watches K  kernels and watches per stream (default 4)\n"
            "  --fault      afterwards, launch a faulting kernel and show its status\n"
            "The driver is $CUDAFD_DRIVER if set, else libcuda.so.1.\n",
            prog);
    exit(2);
}

int main(int argc, char **argv)
{
    int mech = CUDAFD_MECH_EVENT, nstreams = 8, per_stream = 4;
    const char *mech_name = "event";
    bool fault_demo = false;
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i];
        if (!strcmp(a, "event") || !strcmp(a, "hostfunc") || !strcmp(a, "spin")) {
            mech_name = a;
            mech = !strcmp(a, "event") ? CUDAFD_MECH_EVENT
                   : !strcmp(a, "hostfunc") ? CUDAFD_MECH_HOSTFUNC
                                            : CUDAFD_MECH_SPIN;
        } else if (!strcmp(a, "--streams") && i + 1 < argc) {
            nstreams = atoi(argv[++i]);
        } else if (!strcmp(a, "--watches") && i + 1 < argc) {
            per_stream = atoi(argv[++i]);
        } else if (!strcmp(a, "--fault")) {
            fault_demo = true;
        } else {
            usage(argv[0]);
        }
    }
    if (nstreams < 2 || nstreams > 1024 || per_stream < 1 || per_stream > 1000)
        usage(argv[0]);

    load_driver();
    int version = 0;
    cudafd_driver_version(&version);
    printf("cudafd %s, driver %s (version %d), mechanism %s\n", cudafd_version(),
           cudafd_driver_path(), version, mech_name);
    int rc = cudafd_mechanism_available(mech);
    if (rc != CUDAFD_OK)
        die_cudafd("mechanism not available", rc);

    /* Primary context of device 0, current on this thread from here on. */
    CUdevice dev;
    CUcontext ctx;
    CU_CHECK(cu.cuInit(0));
    CU_CHECK(cu.cuDeviceGet(&dev, 0));
    CU_CHECK(cu.cuDevicePrimaryCtxRetain(&ctx, dev));
    CU_CHECK(cu.cuCtxPushCurrent(ctx));

    /* The kernel: cuModuleLoadData takes NUL-terminated PTX and JIT-compiles it. */
    CUmodule module;
    CUfunction spin;
    CU_CHECK(cu.cuModuleLoadData(&module, SPIN_PTX));
    CU_CHECK(cu.cuModuleGetFunction(&spin, module, "cudafd_spin"));

    CUstream *streams = calloc((size_t)nstreams, sizeof *streams);
    int total = nstreams * per_stream;
    struct watch *w = calloc((size_t)total, sizeof *w);
    double *busy_until = calloc((size_t)nstreams, sizeof *busy_until);
    double *v = calloc((size_t)total, sizeof *v);
    if (!streams || !w || !busy_until || !v) {
        fprintf(stderr, "error: out of memory\n");
        return 2;
    }
    /* Non-blocking streams do not synchronise with the legacy default stream. */
    for (int i = 0; i < nstreams; i++)
        CU_CHECK(cu.cuStreamCreate(&streams[i], CU_STREAM_NON_BLOCKING));

    /* The notifier, and its fd in an edge-triggered epoll set. */
    cudafd_notifier *n = NULL;
    if ((rc = cudafd_notifier_create(mech, &n)) != CUDAFD_OK)
        die_cudafd("cudafd_notifier_create", rc);
    int fd = cudafd_notifier_fd(n);
    int epfd = epoll_create1(EPOLL_CLOEXEC);
    struct epoll_event reg = {.events = EPOLLIN | EPOLLET, .data.ptr = n};
    if (epfd < 0 || epoll_ctl(epfd, EPOLL_CTL_ADD, fd, &reg) < 0) {
        perror("epoll");
        return 2;
    }

    /* Launch and watch, round by round, so that every stream has work queued
     * at once. Kernel lengths vary from 50 us to 8 ms across streams and rounds. */
    static const uint64_t lengths_us[] = {50, 200, 1000, 3000, 8000, 500, 2000};
    const int nlengths = (int)(sizeof lengths_us / sizeof lengths_us[0]);
    double t0 = now_s();
    for (int r = 0; r < per_stream; r++) {
        for (int s = 0; s < nstreams; s++) {
            struct watch *x = &w[r * nstreams + s];
            uint64_t ns = lengths_us[(s * 3 + r) % nlengths] * 1000;
            x->stream = s;
            x->seq = r;
            x->launched = now_s();
            CU_CHECK(launch_spin(spin, streams[s], ns, 0));
            if ((rc = cudafd_watch_stream(n, (uintptr_t)streams[s], &x->token)) != CUDAFD_OK)
                die_cudafd("cudafd_watch_stream", rc);
            /* A stream runs its kernels one after the other. */
            double start = x->launched > busy_until[s] ? x->launched : busy_until[s];
            x->expected_end = busy_until[s] = start + (double)ns * 1e-9;
        }
    }
    printf("launched %d kernels on %d streams, %d watches pending\n", total, nstreams,
           cudafd_notifier_pending(n));

    struct loop_stats st = {0};
    collect(n, epfd, w, total, nstreams, &st);
    double wall = now_s() - t0;

    int missing = 0, bad_status = 0;
    for (int i = 0; i < total; i++) {
        if (w[i].done == 0)
            missing++;
        else if (w[i].status != 0)
            bad_status++;
    }
    printf("collected %d completions in %.1f ms: %d epoll wakeups (%d found the queue already "
           "empty), %d drain calls\n",
           st.completions, wall * 1e3, st.wakeups, st.empty_wakeups, st.drains);
    check(missing == 0, "every token completed");
    check(st.duplicates == 0 && st.unknown == 0, "no token reported twice, none unknown");
    check(st.out_of_order == 0, "each stream's tokens completed in watch order");
    check(bad_status == 0, "every status is 0 (CUDA_SUCCESS)");
    check(cudafd_notifier_pending(n) == 0, "nothing pending on the notifier");
    /* Readiness contract: with the queue empty the fd must not be readable. */
    struct pollfd pfd = {.fd = fd, .events = POLLIN};
    check(poll(&pfd, 1, 0) == 0, "the fd is quiet once the queue is drained");

    if (missing == 0) {
        printf("latency over %d watches:\n", total);
        for (int i = 0; i < total; i++)
            v[i] = w[i].done - w[i].launched;
        print_spread("launch -> completion drained", v, total);
        /* What the loop saw beyond the kernels' own run time (queued behind
         * earlier kernels on the stream included): launch overhead plus
         * notification latency. */
        for (int i = 0; i < total; i++)
            v[i] = w[i].done - w[i].expected_end;
        print_spread("beyond the kernels' own time", v, total);
    }

    int64_t stats[CUDAFD_STAT_COUNT];
    int nst = cudafd_stats(stats, CUDAFD_STAT_COUNT);
    printf("cudafd counters:");
    for (int i = 7; i < nst; i++) /* the cumulative totals */
        printf(" %s=%" PRId64, cudafd_stat_name(i), stats[i]);
    printf("\n");

    if (fault_demo) {
        /* A bystander kernel of 300 ms on stream 1, then on stream 0 a kernel
         * that runs 20 ms and stores to address 0. The fault is sticky for the
         * whole context: the faulting point completes with
         * CUDA_ERROR_ILLEGAL_ADDRESS, and so does, normally, the bystander
         * that was still running when the context was lost. */
        printf("fault demo: a 300 ms kernel on stream 1, a faulting 20 ms kernel on stream 0\n");
        struct watch f[2] = {{.stream = 1}, {.stream = 0}};
        f[0].launched = now_s();
        CU_CHECK(launch_spin(spin, streams[1], 300000000, 0));
        if ((rc = cudafd_watch_stream(n, (uintptr_t)streams[1], &f[0].token)) != CUDAFD_OK)
            die_cudafd("cudafd_watch_stream", rc);
        f[1].launched = now_s();
        CU_CHECK(launch_spin(spin, streams[0], 20000000, 1));
        if ((rc = cudafd_watch_stream(n, (uintptr_t)streams[0], &f[1].token)) != CUDAFD_OK)
            die_cudafd("cudafd_watch_stream", rc);
        struct loop_stats fst = {0};
        collect(n, epfd, f, 2, nstreams, &fst);
        for (int i = 1; i >= 0; i--) {
            const char *role = i ? "faulting kernel" : "bystander";
            if (f[i].done == 0)
                printf("  stream %d (%s): no completion\n", f[i].stream, role);
            else
                printf("  stream %d (%s): completion after %.1f ms, status %" PRId64 " %s\n",
                       f[i].stream, role, (f[i].done - f[i].launched) * 1e3, f[i].status,
                       cudafd_cuda_error_name((int)f[i].status));
        }
        check(f[1].done != 0 && f[1].status == CUDA_ERROR_ILLEGAL_ADDRESS,
              "the faulting kernel's watch reports CUDA_ERROR_ILLEGAL_ADDRESS");
        check(f[0].done != 0, "the bystander's watch completed too");
    }

    /* Tear down. After a fault the context refuses further work, so the
     * driver calls below may fail then: their results are ignored. */
    close(epfd);
    cudafd_notifier_destroy(n);
    for (int i = 0; i < nstreams; i++)
        cu.cuStreamDestroy(streams[i]);
    cu.cuModuleUnload(module);
    CUcontext popped;
    cu.cuCtxPopCurrent(&popped);
    cu.cuDevicePrimaryCtxRelease(dev);
    free(streams);
    free(w);
    free(busy_until);
    free(v);

    printf("%s\n", failures ? "FAILED" : "all checks passed");
    return failures ? 1 : 0;
}
