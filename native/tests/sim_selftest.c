/*
 * sim_selftest.c - asserts the simulator's semantics (sim/cudafd_sim.h).
 *
 * Built and run by `make -C native check` (also under SAN=address and
 * SAN=thread). Driver entry points are resolved through cuGetProcAddress_v2,
 * as the core resolves them; the cudafdsim_* extras are linked directly.
 * Timing checks only bound one side tightly (a sync never returns before its
 * kernel's end) and leave wide margins on the other, so a loaded machine or
 * a sanitizer does not make them flaky. Exits nonzero on any failure.
 */
#include <pthread.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "sim/cudafd_sim.h"

CUresult cuGetProcAddress_v2(const char *symbol, void **pfn, int cudaVersion, uint64_t flags,
                             CUdriverProcAddressQueryResult *status);

/* ---- harness ---- */

static atomic_int passed, failed;

#define CHECK(cond)                                                                    \
    do {                                                                               \
        if (cond) {                                                                    \
            atomic_fetch_add(&passed, 1);                                              \
        } else {                                                                       \
            atomic_fetch_add(&failed, 1);                                              \
            fprintf(stderr, "%s:%d: CHECK failed: %s\n", __FILE__, __LINE__, #cond);   \
        }                                                                              \
    } while (0)

#define CHECK_RC(expr, want)                                                           \
    do {                                                                               \
        CUresult rc_ = (expr);                                                         \
        if (rc_ == (want)) {                                                           \
            atomic_fetch_add(&passed, 1);                                              \
        } else {                                                                       \
            atomic_fetch_add(&failed, 1);                                              \
            fprintf(stderr, "%s:%d: %s returned %d, expected %s (%d)\n", __FILE__,     \
                    __LINE__, #expr, rc_, #want, (int)(want));                         \
        }                                                                              \
    } while (0)

#define OK(expr) CHECK_RC(expr, CUDA_SUCCESS)

#define ILLEGAL CUDA_ERROR_ILLEGAL_ADDRESS
#define MS(x) ((uint64_t)(x) * 1000000u)

static double now_ms(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return ts.tv_sec * 1e3 + ts.tv_nsec / 1e6;
}

static double thread_cpu_ms(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_THREAD_CPUTIME_ID, &ts);
    return ts.tv_sec * 1e3 + ts.tv_nsec / 1e6;
}

static void sleep_ms(int ms)
{
    struct timespec ts = {ms / 1000, (long)(ms % 1000) * 1000000};
    nanosleep(&ts, NULL);
}

/* ---- entry points, resolved by name ---- */

static struct {
#define FIELD(name, params) CUresult(*name) params;
    CUDAFD_DRIVER_ENTRY_POINTS(FIELD)
#undef FIELD
    CUresult (*cuGetProcAddress)(const char *, void **, int, uint64_t);
    CUresult (*cuDeviceGetName)(char *, int, CUdevice);
    CUresult (*cuDeviceGetAttribute)(int *, int, CUdevice);
    CUresult (*cuDevicePrimaryCtxRetain)(CUcontext *, CUdevice);
    CUresult (*cuDevicePrimaryCtxRelease)(CUdevice);
    CUresult (*cuCtxCreate)(CUcontext *, unsigned int, CUdevice);
    CUresult (*cuCtxDestroy)(CUcontext);
    CUresult (*cuCtxSynchronize)(void);
    CUresult (*cuStreamSynchronize)(CUstream);
    CUresult (*cuStreamGetId)(CUstream, unsigned long long *);
    CUresult (*cuModuleLoadData)(CUmodule *, const void *);
    CUresult (*cuModuleGetFunction)(CUfunction *, CUmodule, const char *);
    CUresult (*cuModuleUnload)(CUmodule);
    CUresult (*cuLaunchKernel)(CUfunction, unsigned, unsigned, unsigned, unsigned, unsigned,
                               unsigned, unsigned, CUstream, void **, void **);
} D;

static void resolve(const char *name, void **slot)
{
    CUdriverProcAddressQueryResult status = -1;
    *slot = NULL;
    CUresult rc = cuGetProcAddress_v2(name, slot, CUDAFD_CUDA_API_VERSION, 0, &status);
    if (rc != CUDA_SUCCESS || !*slot || status != 0) {
        fprintf(stderr, "cannot resolve %s: %d\n", name, rc);
        exit(2);
    }
}

static void resolve_all(void)
{
#define RESOLVE(name, params) resolve(#name, (void **)&D.name);
    CUDAFD_DRIVER_ENTRY_POINTS(RESOLVE)
    RESOLVE(cuDeviceGetName, ())
    RESOLVE(cuDeviceGetAttribute, ())
    RESOLVE(cuDevicePrimaryCtxRetain, ())
    RESOLVE(cuDevicePrimaryCtxRelease, ())
    RESOLVE(cuCtxCreate, ())
    RESOLVE(cuCtxDestroy, ())
    RESOLVE(cuCtxSynchronize, ())
    RESOLVE(cuStreamSynchronize, ())
    RESOLVE(cuStreamGetId, ())
    RESOLVE(cuModuleLoadData, ())
    RESOLVE(cuModuleGetFunction, ())
    RESOLVE(cuModuleUnload, ())
    RESOLVE(cuLaunchKernel, ())
#undef RESOLVE
}

/* ---- helpers ---- */

/* A new context on `dev`, pushed on the calling thread. */
static CUcontext push_new_ctx(CUdevice dev)
{
    CUcontext c = NULL;
    OK(cudafdsim_ctx_create(dev, &c));
    OK(D.cuCtxPushCurrent(c));
    return c;
}

static void destroy_ctx(CUcontext c)
{
    OK(cudafdsim_ctx_destroy(c)); /* pops it if on top */
}

static CUstream new_stream(void)
{
    CUstream s = NULL;
    OK(D.cuStreamCreate(&s, CU_STREAM_NON_BLOCKING));
    return s;
}

static CUevent new_event(void)
{
    CUevent e = NULL;
    OK(D.cuEventCreate(&e, CU_EVENT_BLOCKING_SYNC | CU_EVENT_DISABLE_TIMING));
    return e;
}

/* A thread that blocks in one synchronisation call and reports how it went. */
enum sync_kind { SYNC_EVENT, SYNC_STREAM, SYNC_CTX };
struct syncer {
    pthread_t thread;
    enum sync_kind kind;
    CUevent event;
    CUstream stream;
    CUcontext ctx;
    CUresult rc;
    double wall_ms, cpu_ms, end_ms;
};

static void *syncer_main(void *arg)
{
    struct syncer *w = arg;
    double t0 = now_ms(), c0 = thread_cpu_ms();
    if (w->ctx)
        D.cuCtxPushCurrent(w->ctx);
    switch (w->kind) {
    case SYNC_EVENT: w->rc = D.cuEventSynchronize(w->event); break;
    case SYNC_STREAM: w->rc = D.cuStreamSynchronize(w->stream); break;
    case SYNC_CTX: w->rc = D.cuCtxSynchronize(); break;
    }
    w->end_ms = now_ms();
    w->wall_ms = w->end_ms - t0;
    w->cpu_ms = thread_cpu_ms() - c0;
    if (w->ctx)
        D.cuCtxPopCurrent(NULL);
    return NULL;
}

static void syncer_start(struct syncer *w)
{
    if (pthread_create(&w->thread, NULL, syncer_main, w) != 0) {
        perror("pthread_create");
        exit(2);
    }
}

/* Host functions: where and when they ran. */
static atomic_int hostfn_calls; /* every host function below counts here */
static atomic_int hostfn_seq;

struct hostrec {
    atomic_int ran;
    int seq;
    pthread_t thread;
    char name[16];
    int sleep_ms;
};

static void hostfn_record(void *arg)
{
    struct hostrec *h = arg;
    if (h->sleep_ms)
        sleep_ms(h->sleep_ms);
    h->thread = pthread_self();
    pthread_getname_np(pthread_self(), h->name, sizeof h->name);
    h->seq = atomic_fetch_add(&hostfn_seq, 1);
    int64_t st[CUDAFDSIM_STAT_COUNT];
    cudafdsim_stats(st, CUDAFDSIM_STAT_COUNT); /* calling the simulator from here is fine */
    atomic_fetch_add(&hostfn_calls, 1);
    atomic_store(&h->ran, 1);
}

static int64_t stat_of(int i)
{
    int64_t st[CUDAFDSIM_STAT_COUNT] = {0};
    cudafdsim_stats(st, CUDAFDSIM_STAT_COUNT);
    return st[i];
}

/* ---- tests ---- */

static void test_before_init(void)
{
    int n;
    CUstream s;
    CHECK_RC(D.cuDeviceGetCount(&n), CUDA_ERROR_NOT_INITIALIZED);
    CHECK_RC(D.cuStreamCreate(&s, 0), CUDA_ERROR_NOT_INITIALIZED);
    CHECK_RC(D.cuEventQuery((CUevent)0x1234), CUDA_ERROR_NOT_INITIALIZED);
    CHECK_RC(D.cuInit(1), CUDA_ERROR_INVALID_VALUE);
    OK(D.cuInit(0));
    OK(D.cuInit(0)); /* idempotent */
}

static void test_proc_address(void)
{
    void *fn = (void *)&fn;
    CUdriverProcAddressQueryResult status = -1;
    CHECK_RC(cuGetProcAddress_v2("cuNoSuchEntryPoint", &fn, 12000, 0, &status),
             CUDA_ERROR_NOT_FOUND);
    CHECK(fn == NULL);
    CHECK(status == 1);
    fn = (void *)&fn;
    CHECK_RC(cuGetProcAddress_v2("cudafdsim_launch", &fn, 12000, 0, NULL), CUDA_ERROR_NOT_FOUND);
    CHECK(fn == NULL);
    CHECK_RC(cuGetProcAddress_v2(NULL, &fn, 12000, 0, NULL), CUDA_ERROR_INVALID_VALUE);

    /* status may be NULL; the version is ignored */
    OK(cuGetProcAddress_v2("cuEventQuery", &fn, 13000, 0, NULL));
    CHECK(fn == (void *)D.cuEventQuery);
    OK(cuGetProcAddress_v2("cuEventQuery", &fn, 11040, 0, &status));
    CHECK(fn == (void *)D.cuEventQuery && status == 0);

    /* "cuGetProcAddress" gives the 5-argument form from CUDA 12.0 on, the 4-argument one before */
    OK(cuGetProcAddress_v2("cuGetProcAddress", (void **)&D.cuGetProcAddress, 11080, 0, NULL));
    CHECK(D.cuGetProcAddress != NULL && (void *)D.cuGetProcAddress != (void *)cuGetProcAddress_v2);
    OK(D.cuGetProcAddress("cuStreamWaitEvent", &fn, 12000, 0));
    CHECK(fn == (void *)D.cuStreamWaitEvent);
    CHECK_RC(D.cuGetProcAddress("cuNope", &fn, 12000, 0), CUDA_ERROR_NOT_FOUND);
    OK(cuGetProcAddress_v2("cuGetProcAddress", &fn, 12000, 0, NULL));
    CHECK(fn == (void *)cuGetProcAddress_v2);

    /* the _v2 names libcuda exports are the same functions */
    static const struct { const char *alias; void **base; } aliases[] = {
        {"cuCtxDestroy_v2", (void **)&D.cuCtxDestroy},
        {"cuCtxPushCurrent_v2", (void **)&D.cuCtxPushCurrent},
        {"cuCtxPopCurrent_v2", (void **)&D.cuCtxPopCurrent},
        {"cuEventDestroy_v2", (void **)&D.cuEventDestroy},
        {"cuStreamDestroy_v2", (void **)&D.cuStreamDestroy},
        {"cuDevicePrimaryCtxRelease_v2", (void **)&D.cuDevicePrimaryCtxRelease},
    };
    for (size_t i = 0; i < sizeof aliases / sizeof aliases[0]; i++) {
        fn = NULL;
        OK(cuGetProcAddress_v2(aliases[i].alias, &fn, 12000, 0, &status));
        CHECK(fn != NULL && fn == *aliases[i].base);
    }
}

static void test_errors(void)
{
    static const struct { CUresult code; const char *name; } codes[] = {
        {CUDA_SUCCESS, "CUDA_SUCCESS"},
        {CUDA_ERROR_INVALID_VALUE, "CUDA_ERROR_INVALID_VALUE"},
        {CUDA_ERROR_OUT_OF_MEMORY, "CUDA_ERROR_OUT_OF_MEMORY"},
        {CUDA_ERROR_NOT_INITIALIZED, "CUDA_ERROR_NOT_INITIALIZED"},
        {CUDA_ERROR_DEINITIALIZED, "CUDA_ERROR_DEINITIALIZED"},
        {CUDA_ERROR_NO_DEVICE, "CUDA_ERROR_NO_DEVICE"},
        {CUDA_ERROR_INVALID_DEVICE, "CUDA_ERROR_INVALID_DEVICE"},
        {CUDA_ERROR_INVALID_IMAGE, "CUDA_ERROR_INVALID_IMAGE"},
        {CUDA_ERROR_INVALID_CONTEXT, "CUDA_ERROR_INVALID_CONTEXT"},
        {CUDA_ERROR_INVALID_HANDLE, "CUDA_ERROR_INVALID_HANDLE"},
        {CUDA_ERROR_NOT_FOUND, "CUDA_ERROR_NOT_FOUND"},
        {CUDA_ERROR_NOT_READY, "CUDA_ERROR_NOT_READY"},
        {CUDA_ERROR_ILLEGAL_ADDRESS, "CUDA_ERROR_ILLEGAL_ADDRESS"},
        {CUDA_ERROR_LAUNCH_TIMEOUT, "CUDA_ERROR_LAUNCH_TIMEOUT"},
        {CUDA_ERROR_CONTEXT_IS_DESTROYED, "CUDA_ERROR_CONTEXT_IS_DESTROYED"},
        {CUDA_ERROR_ASSERT, "CUDA_ERROR_ASSERT"},
        {CUDA_ERROR_ILLEGAL_INSTRUCTION, "CUDA_ERROR_ILLEGAL_INSTRUCTION"},
        {CUDA_ERROR_MISALIGNED_ADDRESS, "CUDA_ERROR_MISALIGNED_ADDRESS"},
        {CUDA_ERROR_INVALID_PC, "CUDA_ERROR_INVALID_PC"},
        {CUDA_ERROR_LAUNCH_FAILED, "CUDA_ERROR_LAUNCH_FAILED"},
        {CUDA_ERROR_NOT_SUPPORTED, "CUDA_ERROR_NOT_SUPPORTED"},
        {CUDA_ERROR_UNKNOWN, "CUDA_ERROR_UNKNOWN"},
    };
    for (size_t i = 0; i < sizeof codes / sizeof codes[0]; i++) {
        const char *name = NULL, *text = NULL;
        OK(D.cuGetErrorName(codes[i].code, &name));
        CHECK(name && strcmp(name, codes[i].name) == 0);
        OK(D.cuGetErrorString(codes[i].code, &text));
        CHECK(text && *text);
    }
    const char *text = NULL;
    OK(D.cuGetErrorString(ILLEGAL, &text));
    CHECK(text && strcmp(text, "an illegal memory access was encountered") == 0);
    const char *name = "x";
    CHECK_RC(D.cuGetErrorName(12345, &name), CUDA_ERROR_INVALID_VALUE);
    CHECK(name == NULL);
    CHECK_RC(D.cuGetErrorString(-1, &text), CUDA_ERROR_INVALID_VALUE);
    int version = 0;
    OK(D.cuDriverGetVersion(&version));
    CHECK(version == 13000);
}

static void test_devices(void)
{
    int n = 0, v = -1;
    CUdevice d = -1;
    char name[64];
    OK(D.cuDeviceGetCount(&n));
    CHECK(n == 3); /* main sets CUDAFD_SIM_DEVICES=3 */
    OK(D.cuDeviceGet(&d, 2));
    CHECK(d == 2);
    CHECK_RC(D.cuDeviceGet(&d, 3), CUDA_ERROR_INVALID_DEVICE);
    CHECK_RC(D.cuDeviceGet(&d, -1), CUDA_ERROR_INVALID_DEVICE);
    OK(D.cuDeviceGetName(name, sizeof name, 2));
    CHECK(strcmp(name, "cudafd simulated GPU 2") == 0);
    OK(D.cuDeviceGetName(name, 5, 0));
    CHECK(strcmp(name, "cuda") == 0);
    CHECK_RC(D.cuDeviceGetName(name, sizeof name, 7), CUDA_ERROR_INVALID_DEVICE);
    OK(D.cuDeviceGetAttribute(&v, 75, 0));
    CHECK(v == 9);
    OK(D.cuDeviceGetAttribute(&v, 76, 0));
    CHECK(v == 0);
    OK(D.cuDeviceGetAttribute(&v, 16, 1));
    CHECK(v == 132);
    OK(D.cuDeviceGetAttribute(&v, 1, 1));
    CHECK(v == 0);
    CHECK_RC(D.cuDeviceGetAttribute(&v, 75, 3), CUDA_ERROR_INVALID_DEVICE);
    CUcontext c;
    CHECK_RC(cudafdsim_ctx_create(5, &c), CUDA_ERROR_INVALID_DEVICE);
}

static void test_ctx_stack(void)
{
    CUcontext cur = (CUcontext)0x99, popped = NULL;
    CUstream s;
    CUevent e;
    CUdevice dev = -1;
    OK(D.cuCtxGetCurrent(&cur));
    CHECK(cur == NULL);
    CHECK_RC(D.cuStreamCreate(&s, 0), CUDA_ERROR_INVALID_CONTEXT);
    CHECK_RC(D.cuEventCreate(&e, 0), CUDA_ERROR_INVALID_CONTEXT);
    CHECK_RC(D.cuCtxSynchronize(), CUDA_ERROR_INVALID_CONTEXT);
    CHECK_RC(D.cuStreamQuery(NULL), CUDA_ERROR_INVALID_CONTEXT);
    CHECK_RC(D.cuStreamQuery(CU_STREAM_PER_THREAD), CUDA_ERROR_INVALID_CONTEXT);
    CHECK_RC(D.cuStreamGetCtx(CU_STREAM_LEGACY, &cur), CUDA_ERROR_INVALID_CONTEXT);
    CHECK_RC(D.cuCtxPopCurrent(&popped), CUDA_ERROR_INVALID_CONTEXT);
    CHECK_RC(D.cuCtxGetDevice(&dev), CUDA_ERROR_INVALID_CONTEXT);
    CHECK_RC(cudafdsim_launch(NULL, 1, 0), CUDA_ERROR_INVALID_CONTEXT);

    CUcontext a, b;
    OK(cudafdsim_ctx_create(0, &a));
    OK(cudafdsim_ctx_create(1, &b));
    CHECK(a != NULL && b != NULL && a != b);
    OK(D.cuCtxGetCurrent(&cur));
    CHECK(cur == NULL); /* created, not made current */
    OK(D.cuCtxPushCurrent(a));
    OK(D.cuCtxPushCurrent(b));
    OK(D.cuCtxGetCurrent(&cur));
    CHECK(cur == b);
    OK(D.cuCtxGetDevice(&dev));
    CHECK(dev == 1);
    OK(D.cuCtxSetCurrent(a)); /* replaces the top */
    OK(D.cuCtxGetCurrent(&cur));
    CHECK(cur == a);
    OK(D.cuCtxPopCurrent(&popped));
    CHECK(popped == a);
    OK(D.cuCtxGetCurrent(&cur));
    CHECK(cur == a);
    OK(D.cuCtxPopCurrent(NULL));
    OK(D.cuCtxGetCurrent(&cur));
    CHECK(cur == NULL);
    OK(D.cuCtxSetCurrent(b)); /* on an empty stack */
    OK(D.cuCtxGetCurrent(&cur));
    CHECK(cur == b);
    OK(D.cuCtxSetCurrent(NULL)); /* pops */
    OK(D.cuCtxGetCurrent(&cur));
    CHECK(cur == NULL);
    OK(D.cuCtxSetCurrent(NULL));
    CHECK_RC(D.cuCtxPushCurrent((CUcontext)0x1230), CUDA_ERROR_INVALID_CONTEXT);
    CHECK_RC(D.cuCtxSetCurrent((CUcontext)0xdeadbeef), CUDA_ERROR_INVALID_CONTEXT);

    /* cuCtxCreate pushes; cuCtxDestroy pops it again */
    CUcontext c = NULL;
    int64_t live = stat_of(0);
    OK(D.cuCtxCreate(&c, 0, 2));
    CHECK(stat_of(0) == live + 1);
    OK(D.cuCtxGetCurrent(&cur));
    CHECK(cur == c);
    OK(D.cuCtxDestroy(c));
    CHECK(stat_of(0) == live);
    OK(D.cuCtxGetCurrent(&cur));
    CHECK(cur == NULL);
    CHECK_RC(D.cuCtxPushCurrent(c), CUDA_ERROR_CONTEXT_IS_DESTROYED);
    CHECK_RC(D.cuCtxDestroy(c), CUDA_ERROR_CONTEXT_IS_DESTROYED);
    CUresult fault;
    CHECK_RC(cudafdsim_ctx_fault(c, &fault), CUDA_ERROR_CONTEXT_IS_DESTROYED);
    CHECK_RC(cudafdsim_ctx_fault((CUcontext)0x4321, &fault), CUDA_ERROR_INVALID_CONTEXT);

    /* a context destroyed while current but not on top stays on the stack */
    OK(cudafdsim_ctx_create(0, &c));
    OK(D.cuCtxPushCurrent(c));
    OK(D.cuCtxPushCurrent(a));
    OK(cudafdsim_ctx_destroy(c));
    OK(D.cuCtxPopCurrent(&popped));
    CHECK(popped == a);
    OK(D.cuCtxGetCurrent(&cur));
    CHECK(cur == c);
    CHECK_RC(D.cuStreamCreate(&s, 0), CUDA_ERROR_CONTEXT_IS_DESTROYED);
    CHECK_RC(D.cuStreamQuery(NULL), CUDA_ERROR_CONTEXT_IS_DESTROYED);
    OK(D.cuCtxPopCurrent(NULL));

    /* primary contexts: one per device, live while retained */
    CUcontext p1, p2;
    live = stat_of(0);
    OK(D.cuDevicePrimaryCtxRetain(&p1, 1));
    OK(D.cuDevicePrimaryCtxRetain(&p2, 1));
    CHECK(p1 == p2 && p1 != NULL);
    CHECK(stat_of(0) == live + 1);
    CHECK_RC(D.cuCtxDestroy(p1), CUDA_ERROR_INVALID_CONTEXT);
    OK(D.cuCtxPushCurrent(p1));
    OK(D.cuCtxGetDevice(&dev));
    CHECK(dev == 1);
    OK(D.cuCtxPopCurrent(NULL));
    OK(D.cuDevicePrimaryCtxRelease(1));
    CHECK(stat_of(0) == live + 1);
    OK(D.cuDevicePrimaryCtxRelease(1));
    CHECK(stat_of(0) == live);
    CHECK_RC(D.cuDevicePrimaryCtxRelease(1), CUDA_ERROR_INVALID_CONTEXT);
    CHECK_RC(D.cuDevicePrimaryCtxRetain(&p1, 9), CUDA_ERROR_INVALID_DEVICE);

    destroy_ctx(a);
    destroy_ctx(b);
    CHECK_RC(cudafdsim_ctx_destroy(a), CUDA_ERROR_CONTEXT_IS_DESTROYED);
}

static void test_ordering(void)
{
    CUcontext c = push_new_ctx(0);
    CUstream s = new_stream();
    enum { N = 8 };
    CUevent ev[N];
    for (int i = 0; i < N; i++)
        ev[i] = new_event();
    OK(D.cuEventQuery(ev[0])); /* never recorded: complete */
    OK(D.cuEventSynchronize(ev[0]));

    double t0 = now_ms();
    int total_ms = 0;
    for (int i = 0; i < N; i++) {
        int ms = (i * 7) % 5 + 2; /* varying lengths */
        total_ms += ms;
        OK(cudafdsim_launch(s, MS(ms), 0));
        OK(D.cuEventRecord(ev[i], s));
    }
    /* the last record waits for all 32 ms of kernels (ev[0], behind 2 ms,
     * was over already once under TSan on a loaded machine) */
    CHECK_RC(D.cuEventQuery(ev[N - 1]), CUDA_ERROR_NOT_READY);
    CHECK_RC(D.cuStreamQuery(s), CUDA_ERROR_NOT_READY);
    /* Query newest first: if a later record is complete, every earlier one must be. */
    bool in_order = true, all_done = false;
    while (!all_done) {
        bool later_done = false;
        all_done = true;
        for (int i = N - 1; i >= 0; i--) {
            CUresult rc = D.cuEventQuery(ev[i]);
            if (rc == CUDA_SUCCESS) {
                later_done = true;
            } else {
                all_done = false;
                if (rc != CUDA_ERROR_NOT_READY || later_done)
                    in_order = false;
            }
        }
    }
    CHECK(in_order);
    CHECK(now_ms() - t0 >= total_ms * 0.99);
    OK(D.cuStreamQuery(s));

    /* the default stream and the per-thread stream run work too */
    OK(cudafdsim_launch(NULL, MS(2), 0));
    OK(D.cuEventRecord(ev[0], NULL));
    OK(D.cuStreamSynchronize(CU_STREAM_LEGACY));
    OK(D.cuEventQuery(ev[0]));
    OK(cudafdsim_launch(CU_STREAM_PER_THREAD, MS(2), 0));
    OK(D.cuEventRecord(ev[1], CU_STREAM_PER_THREAD));
    OK(D.cuEventSynchronize(ev[1]));
    OK(D.cuStreamQuery(CU_STREAM_PER_THREAD));

    /* a synchronisation waits for the record current at the call */
    double t1 = now_ms(); /* before the launch: the kernel's 40 ms count from there */
    OK(cudafdsim_launch(s, MS(40), 0));
    OK(D.cuEventRecord(ev[3], s));
    struct syncer w = {.kind = SYNC_EVENT, .event = ev[3]};
    syncer_start(&w);
    sleep_ms(10);
    OK(cudafdsim_launch(s, MS(1000), 0));
    OK(D.cuEventRecord(ev[3], s));
    pthread_join(w.thread, NULL);
    OK(w.rc);
    /* it returned after the first record, and before the second (a second of
     * margin, so that a loaded machine's late wake cannot pass for waiting) */
    CHECK(w.end_ms - t1 >= 40.0);
    CHECK_RC(D.cuEventQuery(ev[3]), CUDA_ERROR_NOT_READY);
    OK(D.cuStreamSynchronize(s));

    /* a re-recorded event answers for its latest record */
    OK(cudafdsim_launch(s, MS(30), 0));
    OK(D.cuEventRecord(ev[2], s));
    CHECK_RC(D.cuEventQuery(ev[2]), CUDA_ERROR_NOT_READY);
    OK(D.cuStreamSynchronize(s));
    OK(D.cuEventQuery(ev[2]));

    for (int i = 0; i < N; i++)
        OK(D.cuEventDestroy(ev[i]));
    OK(D.cuStreamDestroy(s));
    destroy_ctx(c);
}

static void test_concurrency(void)
{
    CUcontext c = push_new_ctx(0);
    CUstream a = new_stream(), b = new_stream();
    CUevent ea = new_event(), eb = new_event();
    double t0 = now_ms();
    OK(cudafdsim_launch(a, MS(500), 0));
    OK(D.cuEventRecord(ea, a));
    OK(cudafdsim_launch(b, MS(1), 0));
    OK(D.cuEventRecord(eb, b));
    OK(D.cuEventSynchronize(eb));
    double dt = now_ms() - t0;
    CHECK(dt >= 1.0 && dt < 250.0); /* the 500 ms kernel on `a` does not hold `b` back */
    CHECK_RC(D.cuEventQuery(ea), CUDA_ERROR_NOT_READY);
    OK(D.cuEventSynchronize(ea));
    CHECK(now_ms() - t0 >= 500.0);
    OK(D.cuEventDestroy(ea));
    OK(D.cuEventDestroy(eb));
    OK(D.cuStreamDestroy(a));
    OK(D.cuStreamDestroy(b));
    destroy_ctx(c);
}

static void test_blocking_sync(void)
{
    CUcontext c = push_new_ctx(1);
    CUstream s = new_stream(), s2 = new_stream();
    CUevent e = new_event();
    double t0 = now_ms();
    OK(cudafdsim_launch(s, MS(150), 0));
    OK(D.cuEventRecord(e, s));
    struct syncer w = {.kind = SYNC_EVENT, .event = e};
    syncer_start(&w);
    pthread_join(w.thread, NULL);
    OK(w.rc);
    CHECK(w.end_ms - t0 >= 150.0);
    CHECK(w.cpu_ms < 30.0); /* slept, did not spin */

    t0 = now_ms();
    OK(cudafdsim_launch(s, MS(60), 0));
    OK(D.cuStreamSynchronize(s));
    CHECK(now_ms() - t0 >= 60.0);
    OK(D.cuStreamQuery(s));

    t0 = now_ms();
    OK(cudafdsim_launch(s, MS(40), 0));
    OK(cudafdsim_launch(s2, MS(80), 0));
    OK(cudafdsim_launch(NULL, MS(20), 0));
    OK(D.cuCtxSynchronize());
    CHECK(now_ms() - t0 >= 80.0);
    OK(D.cuStreamQuery(s2));
    CHECK(stat_of(3) == 0);

    OK(D.cuEventDestroy(e));
    OK(D.cuStreamDestroy(s));
    OK(D.cuStreamDestroy(s2));
    destroy_ctx(c);
}

static void test_hostfn(void)
{
    CUcontext c = push_new_ctx(0);
    CUstream a = new_stream(), b = new_stream(), d = new_stream();
    CUevent ea = new_event(), eb = new_event();
    int calls0 = atomic_load(&hostfn_calls);

    /* runs after the kernel ahead of it, before the record behind it, on the callback thread */
    struct hostrec h1 = {0};
    OK(cudafdsim_launch(a, MS(20), 0));
    OK(D.cuLaunchHostFunc(a, hostfn_record, &h1));
    OK(D.cuEventRecord(ea, a));
    CHECK(atomic_load(&h1.ran) == 0);
    OK(D.cuEventSynchronize(ea));
    CHECK(atomic_load(&h1.ran) == 1);
    CHECK(!pthread_equal(h1.thread, pthread_self()));
    CHECK(strcmp(h1.name, "cudafd-sim-cb") == 0); /* not the scheduler ("cudafd-sim-dev") */

    /* a host function blocks its stream, not the device */
    struct hostrec slow = {.sleep_ms = 150};
    double t0 = now_ms();
    OK(D.cuLaunchHostFunc(a, hostfn_record, &slow));
    OK(D.cuEventRecord(ea, a));
    OK(cudafdsim_launch(b, MS(5), 0));
    OK(D.cuEventRecord(eb, b));
    OK(D.cuEventSynchronize(eb));
    CHECK(now_ms() - t0 < 120.0);
    CHECK_RC(D.cuEventQuery(ea), CUDA_ERROR_NOT_READY);
    CHECK(atomic_load(&slow.ran) == 0);
    OK(D.cuEventSynchronize(ea));
    CHECK(atomic_load(&slow.ran) == 1);
    CHECK(now_ms() - t0 >= 150.0);

    /* from many streams: one thread, in the order they became ready */
    struct hostrec h[3] = {{0}};
    CUstream on[3] = {a, b, d};
    int delay[3] = {60, 20, 40};
    for (int i = 0; i < 3; i++) {
        OK(cudafdsim_launch(on[i], MS(delay[i]), 0));
        OK(D.cuLaunchHostFunc(on[i], hostfn_record, &h[i]));
    }
    OK(D.cuCtxSynchronize());
    for (int i = 0; i < 3; i++) {
        CHECK(atomic_load(&h[i].ran) == 1);
        CHECK(pthread_equal(h[i].thread, h1.thread));
    }
    CHECK(h[1].seq < h[2].seq && h[2].seq < h[0].seq);
    CHECK(atomic_load(&hostfn_calls) == calls0 + 5);
    CHECK_RC(D.cuLaunchHostFunc(a, NULL, NULL), CUDA_ERROR_INVALID_VALUE);

    OK(D.cuEventDestroy(ea));
    OK(D.cuEventDestroy(eb));
    OK(D.cuStreamDestroy(a));
    OK(D.cuStreamDestroy(b));
    OK(D.cuStreamDestroy(d));
    destroy_ctx(c);
}

static void test_fault(void)
{
    CUcontext g = push_new_ctx(1); /* a bystander context, on another device */
    CUstream gs = new_stream();
    CUevent ge = new_event();
    OK(D.cuCtxPopCurrent(NULL));

    CUcontext f = push_new_ctx(0);
    CUstream s1 = new_stream(), s2 = new_stream();
    CUevent e1 = new_event(), e2 = new_event(), e3 = new_event();
    struct hostrec queued1 = {0}, queued2 = {0}, never = {0};

    double t0 = now_ms();
    OK(cudafdsim_launch(s2, MS(3000), 0));
    OK(D.cuEventRecord(e2, s2));
    OK(cudafdsim_launch(s1, MS(80), ILLEGAL));
    OK(D.cuEventRecord(e1, s1));
    OK(D.cuLaunchHostFunc(s1, hostfn_record, &queued1));
    OK(D.cuLaunchHostFunc(s2, hostfn_record, &queued2));
    OK(D.cuCtxPushCurrent(g));
    OK(cudafdsim_launch(gs, MS(120), 0));
    OK(D.cuEventRecord(ge, gs));
    OK(D.cuCtxPopCurrent(NULL));

    struct syncer w[4] = {
        {.kind = SYNC_EVENT, .event = e1},
        {.kind = SYNC_EVENT, .event = e2},
        {.kind = SYNC_STREAM, .stream = s2},
        {.kind = SYNC_CTX, .ctx = f},
    };
    for (int i = 0; i < 4; i++)
        syncer_start(&w[i]);
    for (int i = 0; i < 4; i++) {
        pthread_join(w[i].thread, NULL);
        CHECK_RC(w[i].rc, ILLEGAL);
        CHECK(w[i].end_ms - t0 >= 80.0 && w[i].end_ms - t0 < 2000.0);
    }

    /* sticky: every call on the context's handles returns the fault */
    CHECK_RC(D.cuEventQuery(e1), ILLEGAL);
    CHECK_RC(D.cuEventQuery(e2), ILLEGAL);
    CHECK_RC(D.cuEventQuery(e3), ILLEGAL); /* never recorded */
    CHECK_RC(D.cuEventSynchronize(e1), ILLEGAL);
    CHECK_RC(D.cuEventRecord(e3, s1), ILLEGAL);
    CHECK_RC(D.cuStreamQuery(s1), ILLEGAL);
    CHECK_RC(D.cuStreamQuery(NULL), ILLEGAL);
    CHECK_RC(D.cuStreamSynchronize(s2), ILLEGAL);
    CHECK_RC(D.cuCtxSynchronize(), ILLEGAL);
    CHECK_RC(D.cuLaunchHostFunc(s1, hostfn_record, &never), ILLEGAL);
    CHECK_RC(D.cuStreamWaitEvent(s1, e3, 0), ILLEGAL);
    CHECK_RC(cudafdsim_launch(s1, 1, 0), ILLEGAL);
    CUstream sx;
    CUevent ex;
    CHECK_RC(D.cuStreamCreate(&sx, 0), ILLEGAL);
    CHECK_RC(D.cuEventCreate(&ex, 0), ILLEGAL);
    CUresult fault = 0;
    OK(cudafdsim_ctx_fault(f, &fault));
    CHECK(fault == ILLEGAL);
    CHECK(stat_of(3) == 0); /* the fault dropped every queued op, g's too */

    /* as on two H200s: the fault ends the other device's context too */
    CHECK_RC(D.cuEventSynchronize(ge), ILLEGAL);
    OK(cudafdsim_ctx_fault(g, &fault));
    CHECK(fault == ILLEGAL);

    sleep_ms(30);
    /* as on an H200: host functions queued before the fault still ran, though
     * the work before them never finished; one launched after it never runs */
    CHECK(atomic_load(&queued1.ran) == 1 && atomic_load(&queued2.ran) == 1);
    CHECK(atomic_load(&never.ran) == 0);

    /* cleanup works on a faulted context */
    OK(D.cuEventDestroy(e1));
    OK(D.cuEventDestroy(e2));
    OK(D.cuEventDestroy(e3));
    OK(D.cuStreamDestroy(s1));
    OK(D.cuStreamDestroy(s2));
    CHECK_RC(D.cuEventQuery(e1), CUDA_ERROR_INVALID_HANDLE);
    destroy_ctx(f);
    OK(D.cuEventDestroy(ge));
    OK(D.cuStreamDestroy(gs));
    destroy_ctx(g);

    /* the same through cuLaunchKernel("cudafd_spin", ns, fault=1), in a
     * context made after the fault: healthy until a kernel of its own faults */
    g = push_new_ctx(1);
    gs = new_stream();
    ge = new_event();
    CUmodule m;
    CUfunction spin;
    OK(D.cuModuleLoadData(&m, "image"));
    OK(D.cuModuleGetFunction(&spin, m, "cudafd_spin"));
    uint64_t ns = MS(10);
    uint32_t bad = 1;
    void *params[] = {&ns, &bad};
    OK(D.cuLaunchKernel(spin, 1, 1, 1, 1, 1, 1, 0, gs, params, NULL));
    OK(D.cuEventRecord(ge, gs));
    CHECK_RC(D.cuEventSynchronize(ge), ILLEGAL);
    CHECK_RC(D.cuLaunchKernel(spin, 1, 1, 1, 1, 1, 1, 0, gs, params, NULL), ILLEGAL);
    OK(D.cuModuleUnload(m));
    OK(D.cuEventDestroy(ge));
    OK(D.cuStreamDestroy(gs));
    destroy_ctx(g);
}

static void test_wait_event(void)
{
    CUcontext c = push_new_ctx(0);
    CUstream s1 = new_stream(), s2 = new_stream(), s3 = new_stream();
    CUevent e = new_event(), e2 = new_event(), never = new_event();

    /* a never-recorded event: no wait */
    OK(cudafdsim_launch(s1, MS(300), 0));
    OK(D.cuStreamWaitEvent(s2, never, 0));
    OK(D.cuEventRecord(e2, s2));
    OK(D.cuEventSynchronize(e2));
    CHECK_RC(D.cuStreamQuery(s1), CUDA_ERROR_NOT_READY);
    OK(D.cuStreamSynchronize(s1));

    /* waits for the record latest at the call, not a later one */
    double t0 = now_ms();
    OK(cudafdsim_launch(s1, MS(100), 0));
    OK(D.cuEventRecord(e, s1));
    OK(D.cuStreamWaitEvent(s2, e, 0));
    OK(D.cuEventRecord(e2, s2));
    OK(D.cuEventRecord(e, s3)); /* completes at once: s3 is idle */
    OK(D.cuEventSynchronize(e));
    CHECK(now_ms() - t0 < 90.0);
    CHECK_RC(D.cuEventQuery(e2), CUDA_ERROR_NOT_READY);
    OK(D.cuEventSynchronize(e2));
    CHECK(now_ms() - t0 >= 100.0);

    /* a wait on a completed record does not wait */
    t0 = now_ms();
    OK(cudafdsim_launch(s3, MS(200), 0));
    OK(D.cuStreamWaitEvent(s2, e, 0));
    OK(D.cuEventRecord(e2, s2));
    OK(D.cuEventSynchronize(e2));
    CHECK(now_ms() - t0 < 150.0);
    CHECK_RC(D.cuStreamWaitEvent(s2, e, 4), CUDA_ERROR_INVALID_VALUE);
    CHECK_RC(D.cuStreamWaitEvent(s2, (CUevent)0x77777, 0), CUDA_ERROR_INVALID_HANDLE);

    OK(D.cuCtxSynchronize());
    OK(D.cuEventDestroy(e));
    OK(D.cuEventDestroy(e2));
    OK(D.cuEventDestroy(never));
    OK(D.cuStreamDestroy(s1));
    OK(D.cuStreamDestroy(s2));
    OK(D.cuStreamDestroy(s3));
    destroy_ctx(c);
}

static void test_handles(void)
{
    CUcontext c = push_new_ctx(0);
    CUcontext got;
    CUstream fake_s = (CUstream)(uintptr_t)0xdead0;
    CUevent fake_e = (CUevent)(uintptr_t)0xbeef0;
    CUstream s = new_stream();
    CUevent e = new_event();

    /* made-up handles */
    CHECK_RC(D.cuStreamQuery(fake_s), CUDA_ERROR_INVALID_HANDLE);
    CHECK_RC(D.cuStreamSynchronize(fake_s), CUDA_ERROR_INVALID_HANDLE);
    CHECK_RC(D.cuStreamDestroy(fake_s), CUDA_ERROR_INVALID_HANDLE);
    CHECK_RC(D.cuStreamGetCtx(fake_s, &got), CUDA_ERROR_INVALID_HANDLE);
    CHECK_RC(D.cuEventRecord(e, fake_s), CUDA_ERROR_INVALID_HANDLE);
    CHECK_RC(D.cuEventQuery(fake_e), CUDA_ERROR_INVALID_HANDLE);
    CHECK_RC(D.cuEventSynchronize(fake_e), CUDA_ERROR_INVALID_HANDLE);
    CHECK_RC(D.cuEventDestroy(fake_e), CUDA_ERROR_INVALID_HANDLE);
    CHECK_RC(D.cuEventRecord(fake_e, s), CUDA_ERROR_INVALID_HANDLE);
    CHECK_RC(D.cuEventQuery((CUevent)s), CUDA_ERROR_INVALID_HANDLE); /* wrong kind */
    CHECK_RC(D.cuStreamQuery((CUstream)e), CUDA_ERROR_INVALID_HANDLE);
    CHECK_RC(D.cuStreamDestroy(NULL), CUDA_ERROR_INVALID_HANDLE);

    /* destroyed handles: a stream's is invalid until the next stream made
     * takes it (as a driver hands it on; cuStreamGetId tells the two apart),
     * an event's stays invalid after its slot is reused */
    CUstream s_old = new_stream();
    CUevent e_old = new_event();
    unsigned long long id_old = 0, id_new = 0, id_legacy = 0, id_null = 0;
    OK(D.cuStreamGetId(s_old, &id_old));
    OK(D.cuStreamDestroy(s_old));
    OK(D.cuEventDestroy(e_old));
    CHECK_RC(D.cuStreamQuery(s_old), CUDA_ERROR_INVALID_HANDLE);
    CHECK_RC(D.cuStreamDestroy(s_old), CUDA_ERROR_INVALID_HANDLE);
    CHECK_RC(D.cuStreamGetId(s_old, &id_new), CUDA_ERROR_INVALID_HANDLE);
    CHECK_RC(cudafdsim_launch(s_old, 1, 0), CUDA_ERROR_INVALID_HANDLE);
    CHECK_RC(D.cuLaunchHostFunc(s_old, hostfn_record, NULL), CUDA_ERROR_INVALID_HANDLE);
    CUstream s_new = new_stream();
    CUevent e_new = new_event();
    CHECK(s_new == s_old && e_new != e_old);
    OK(D.cuStreamGetId(s_new, &id_new));
    CHECK(id_new != id_old && id_old != 0 && id_new != 0);
    OK(D.cuStreamGetId(CU_STREAM_LEGACY, &id_legacy));
    OK(D.cuStreamGetId(NULL, &id_null));
    CHECK(id_legacy == id_null && id_legacy != id_new);
    CHECK_RC(D.cuStreamGetId(s_new, NULL), CUDA_ERROR_INVALID_VALUE);
    CHECK_RC(D.cuEventQuery(e_old), CUDA_ERROR_INVALID_HANDLE);
    CHECK_RC(D.cuEventRecord(e_old, s), CUDA_ERROR_INVALID_HANDLE);
    CHECK_RC(D.cuEventDestroy(e_old), CUDA_ERROR_INVALID_HANDLE);
    OK(D.cuStreamQuery(s_new));
    OK(D.cuEventQuery(e_new));

    /* cuStreamGetCtx: explicit handles need no current context */
    OK(D.cuStreamGetCtx(CU_STREAM_PER_THREAD, &got));
    CHECK(got == c);
    OK(D.cuStreamGetCtx(NULL, &got));
    CHECK(got == c);
    OK(D.cuCtxPopCurrent(NULL));
    got = NULL;
    OK(D.cuStreamGetCtx(s, &got));
    CHECK(got == c);
    CHECK_RC(D.cuStreamGetCtx(NULL, &got), CUDA_ERROR_INVALID_CONTEXT);
    CHECK_RC(D.cuStreamGetCtx(CU_STREAM_PER_THREAD, &got), CUDA_ERROR_INVALID_CONTEXT);
    OK(D.cuCtxPushCurrent(c));

    /* an event and a stream of different contexts */
    CUcontext other = push_new_ctx(0);
    CUstream os = new_stream();
    OK(D.cuCtxPopCurrent(NULL));
    CHECK_RC(D.cuEventRecord(e, os), CUDA_ERROR_INVALID_HANDLE);

    /* a stream destroyed with work queued still runs it */
    int64_t streams0 = stat_of(1);
    OK(cudafdsim_launch(s_new, MS(50), 0));
    OK(D.cuEventRecord(e_new, s_new));
    OK(D.cuStreamDestroy(s_new));
    CHECK(stat_of(1) == streams0 - 1);
    CHECK_RC(D.cuStreamQuery(s_new), CUDA_ERROR_INVALID_HANDLE);
    CHECK_RC(D.cuEventQuery(e_new), CUDA_ERROR_NOT_READY);
    OK(D.cuEventSynchronize(e_new));

    /* an event destroyed while another thread waits on it */
    double t0 = now_ms();
    OK(cudafdsim_launch(s, MS(400), 0));
    OK(D.cuEventRecord(e, s));
    struct syncer w = {.kind = SYNC_EVENT, .event = e};
    syncer_start(&w);
    sleep_ms(50);
    OK(D.cuEventDestroy(e));
    pthread_join(w.thread, NULL);
    CHECK(w.rc == CUDA_SUCCESS || w.rc == CUDA_ERROR_INVALID_HANDLE);
    CHECK(w.end_ms - t0 < 300.0);
    OK(D.cuEventDestroy(e_new));

    /* a context destroyed under blocked synchronisations */
    OK(D.cuCtxPushCurrent(other));
    CUevent oe = new_event();
    OK(cudafdsim_launch(os, MS(2000), 0));
    OK(D.cuEventRecord(oe, os));
    struct hostrec never = {0};
    OK(D.cuLaunchHostFunc(os, hostfn_record, &never));
    OK(D.cuCtxPopCurrent(NULL));
    struct syncer ws[3] = {
        {.kind = SYNC_EVENT, .event = oe},
        {.kind = SYNC_STREAM, .stream = os},
        {.kind = SYNC_CTX, .ctx = other},
    };
    t0 = now_ms();
    for (int i = 0; i < 3; i++)
        syncer_start(&ws[i]);
    sleep_ms(50);
    int64_t ctx0 = stat_of(0), streams1 = stat_of(1), events1 = stat_of(2);
    OK(cudafdsim_ctx_destroy(other));
    CHECK(stat_of(0) == ctx0 - 1 && stat_of(1) == streams1 - 1 && stat_of(2) == events1 - 1);
    for (int i = 0; i < 3; i++) {
        pthread_join(ws[i].thread, NULL);
        CHECK_RC(ws[i].rc, CUDA_ERROR_CONTEXT_IS_DESTROYED);
        CHECK(ws[i].end_ms - t0 < 1500.0);
    }
    CHECK_RC(D.cuEventQuery(oe), CUDA_ERROR_INVALID_HANDLE);
    CHECK_RC(D.cuStreamQuery(os), CUDA_ERROR_INVALID_HANDLE);
    CHECK_RC(D.cuStreamGetCtx(os, &got), CUDA_ERROR_INVALID_HANDLE);
    CHECK_RC(D.cuEventDestroy(oe), CUDA_ERROR_INVALID_HANDLE);
    CHECK_RC(D.cuCtxPushCurrent(other), CUDA_ERROR_CONTEXT_IS_DESTROYED);
    CHECK(atomic_load(&never.ran) == 0);

    OK(D.cuStreamDestroy(s));
    destroy_ctx(c);
}

struct ptds_arg {
    CUcontext ctx;
    CUevent ev;
    CUstream mine;
    double wall_ms;
};

static void *ptds_main(void *arg)
{
    struct ptds_arg *p = arg;
    double t0 = now_ms();
    D.cuCtxPushCurrent(p->ctx);
    OK(cudafdsim_launch(CU_STREAM_PER_THREAD, MS(1), 0));
    OK(D.cuEventRecord(p->ev, CU_STREAM_PER_THREAD));
    OK(D.cuEventSynchronize(p->ev));
    p->wall_ms = now_ms() - t0;
    D.cuCtxPopCurrent(NULL);
    return NULL;
}

static void test_per_thread_stream(void)
{
    CUcontext c = push_new_ctx(0);
    CUevent mine = new_event(), deflt = new_event();
    struct ptds_arg p = {.ctx = c, .ev = new_event()};
    OK(cudafdsim_launch(CU_STREAM_PER_THREAD, MS(300), 0));
    OK(D.cuEventRecord(mine, CU_STREAM_PER_THREAD));
    pthread_t t;
    pthread_create(&t, NULL, ptds_main, &p);
    pthread_join(t, NULL);
    CHECK(p.wall_ms < 200.0); /* the other thread has its own stream */
    OK(cudafdsim_launch(NULL, MS(1), 0)); /* and so does the default stream */
    OK(D.cuEventRecord(deflt, NULL));
    OK(D.cuEventSynchronize(deflt));
    CHECK_RC(D.cuEventQuery(mine), CUDA_ERROR_NOT_READY);
    OK(D.cuEventSynchronize(mine));
    OK(D.cuEventDestroy(mine));
    OK(D.cuEventDestroy(deflt));
    OK(D.cuEventDestroy(p.ev));
    destroy_ctx(c);
}

static void test_module_launch(void)
{
    CUcontext c = push_new_ctx(2);
    CUstream s = new_stream();
    CUevent e = new_event();
    CUmodule m;
    CUfunction spin, other;
    CHECK_RC(D.cuModuleLoadData(&m, NULL), CUDA_ERROR_INVALID_VALUE);
    OK(D.cuModuleLoadData(&m, "any image"));
    CHECK_RC(D.cuModuleGetFunction(&other, m, "some_kernel"), CUDA_ERROR_NOT_FOUND);
    OK(D.cuModuleGetFunction(&spin, m, "cudafd_spin"));
    uint64_t ns = MS(40);
    uint32_t fault = 0;
    void *params[] = {&ns, &fault};
    double t0 = now_ms();
    int64_t kernels0 = stat_of(5);
    OK(D.cuLaunchKernel(spin, 1, 1, 1, 32, 1, 1, 0, s, params, NULL));
    OK(D.cuEventRecord(e, s));
    OK(D.cuEventSynchronize(e));
    CHECK(now_ms() - t0 >= 40.0);
    CHECK(stat_of(5) == kernels0 + 1);
    CHECK_RC(D.cuLaunchKernel(spin, 0, 1, 1, 1, 1, 1, 0, s, params, NULL),
             CUDA_ERROR_INVALID_VALUE);
    CHECK_RC(D.cuLaunchKernel((CUfunction)m, 1, 1, 1, 1, 1, 1, 0, s, params, NULL),
             CUDA_ERROR_INVALID_HANDLE);
    OK(D.cuModuleUnload(m));
    CHECK_RC(D.cuLaunchKernel(spin, 1, 1, 1, 1, 1, 1, 0, s, params, NULL),
             CUDA_ERROR_INVALID_HANDLE);
    CHECK_RC(D.cuModuleGetFunction(&spin, m, "cudafd_spin"), CUDA_ERROR_INVALID_HANDLE);
    CHECK_RC(D.cuModuleUnload(m), CUDA_ERROR_INVALID_HANDLE);
    OK(D.cuEventDestroy(e));
    OK(D.cuStreamDestroy(s));
    destroy_ctx(c);
}

static void test_scale(void)
{
    enum { STREAMS = 1000, RECORDS = 10 };
    CUcontext c = push_new_ctx(1);
    static CUstream s[STREAMS];
    static CUevent e[STREAMS][RECORDS];
    int created = 0, queued = 0, completed = 0, destroyed = 0;
    for (int i = 0; i < STREAMS; i++) {
        created += D.cuStreamCreate(&s[i], 0) == CUDA_SUCCESS;
        for (int j = 0; j < RECORDS; j++)
            created += D.cuEventCreate(&e[i][j], CU_EVENT_DISABLE_TIMING) == CUDA_SUCCESS;
    }
    CHECK(created == STREAMS * (RECORDS + 1));
    double t0 = now_ms();
    /* a 1 s head on stream 0 keeps its operations queued for the check below,
     * however slowly this loop runs (sanitizers on a loaded machine) */
    CHECK(cudafdsim_launch(s[0], 1000000000ull, 0) == CUDA_SUCCESS);
    for (int j = 0; j < RECORDS; j++) {
        for (int i = 0; i < STREAMS; i++) {
            queued += cudafdsim_launch(s[i], 100000, 0) == CUDA_SUCCESS; /* 100 us */
            queued += D.cuEventRecord(e[i][j], s[i]) == CUDA_SUCCESS;
        }
    }
    CHECK(queued == 2 * STREAMS * RECORDS);
    CHECK(stat_of(3) > 0);
    for (int i = 0; i < STREAMS; i++)
        for (int j = 0; j < RECORDS; j++)
            completed += D.cuEventSynchronize(e[i][j]) == CUDA_SUCCESS;
    CHECK(completed == STREAMS * RECORDS);
    double dt = now_ms() - t0;
    CHECK(dt < 20000.0);
    CHECK(stat_of(3) == 0);
    printf("sim_selftest: %d streams x %d records completed in %.0f ms\n", STREAMS, RECORDS, dt);
    for (int i = 0; i < STREAMS; i++) {
        destroyed += D.cuStreamDestroy(s[i]) == CUDA_SUCCESS;
        for (int j = 0; j < RECORDS; j++)
            destroyed += D.cuEventDestroy(e[i][j]) == CUDA_SUCCESS;
    }
    CHECK(destroyed == STREAMS * (RECORDS + 1));
    destroy_ctx(c);
}

/* Many threads at once on shared handles: events destroyed and re-created
 * under other threads' records, queries and synchronisations, a poller in a
 * tight query loop, host functions everywhere. Only the documented answers
 * may come back; the sanitizers check the rest. */
enum { HAMMER_THREADS = 6, HAMMER_EVENTS = 16 };
static _Atomic(uintptr_t) hammer_events[HAMMER_EVENTS];
static atomic_int hammer_stop, hammer_unexpected, hammer_hostfns;

static void hammer_hostfn(void *arg)
{
    (void)arg;
    atomic_fetch_add(&hammer_hostfns, 1);
    atomic_fetch_add(&hostfn_calls, 1);
}

static void hammer_expect(CUresult rc, CUresult a, CUresult b, CUresult c)
{
    if (rc != a && rc != b && rc != c) {
        if (atomic_fetch_add(&hammer_unexpected, 1) < 5)
            fprintf(stderr, "hammer: unexpected result %d\n", rc);
    }
}

struct hammer_arg {
    CUcontext ctx;
    unsigned int seed;
};

static void *hammer_worker(void *arg)
{
    struct hammer_arg *h = arg;
    CUstream s[2];
    D.cuCtxPushCurrent(h->ctx);
    for (int i = 0; i < 2; i++)
        hammer_expect(D.cuStreamCreate(&s[i], 0), CUDA_SUCCESS, CUDA_SUCCESS, CUDA_SUCCESS);
    while (!atomic_load(&hammer_stop)) {
        unsigned int r = (unsigned int)rand_r(&h->seed);
        CUstream st = s[r & 1];
        int k = (int)((r >> 1) % HAMMER_EVENTS);
        CUevent e = (CUevent)atomic_load(&hammer_events[k]);
        CUevent fresh;
        switch ((r >> 8) % 9) {
        case 0:
            hammer_expect(cudafdsim_launch(st, (r >> 12) % 300000, 0), 0, 0, 0);
            break;
        case 1:
            hammer_expect(D.cuEventRecord(e, st), 0, CUDA_ERROR_INVALID_HANDLE, 0);
            break;
        case 2:
            hammer_expect(D.cuEventQuery(e), 0, CUDA_ERROR_NOT_READY, CUDA_ERROR_INVALID_HANDLE);
            break;
        case 3:
            hammer_expect(D.cuEventSynchronize(e), 0, CUDA_ERROR_INVALID_HANDLE, 0);
            break;
        case 4:
            hammer_expect(D.cuStreamWaitEvent(st, e, 0), 0, CUDA_ERROR_INVALID_HANDLE, 0);
            break;
        case 5:
            hammer_expect(D.cuLaunchHostFunc(st, hammer_hostfn, NULL), 0, 0, 0);
            break;
        case 6: /* replace a shared event under everyone else */
            hammer_expect(D.cuEventCreate(&fresh, 0), 0, 0, 0);
            e = (CUevent)atomic_exchange(&hammer_events[k], (uintptr_t)fresh);
            hammer_expect(D.cuEventDestroy(e), 0, CUDA_ERROR_INVALID_HANDLE, 0);
            break;
        case 7:
            hammer_expect(D.cuStreamQuery(st), 0, CUDA_ERROR_NOT_READY, 0);
            break;
        case 8:
            hammer_expect(D.cuStreamSynchronize(st), 0, 0, 0);
            break;
        }
    }
    for (int i = 0; i < 2; i++)
        hammer_expect(D.cuStreamDestroy(s[i]), 0, 0, 0); /* with work queued */
    D.cuCtxPopCurrent(NULL);
    return NULL;
}

static void *hammer_poller(void *arg)
{
    (void)arg;
    while (!atomic_load(&hammer_stop))
        for (int k = 0; k < HAMMER_EVENTS; k++)
            hammer_expect(D.cuEventQuery((CUevent)atomic_load(&hammer_events[k])), 0,
                          CUDA_ERROR_NOT_READY, CUDA_ERROR_INVALID_HANDLE);
    return NULL;
}

static void test_hammer(void)
{
    CUcontext c = push_new_ctx(0);
    int64_t streams0 = stat_of(1), events0 = stat_of(2);
    for (int k = 0; k < HAMMER_EVENTS; k++)
        atomic_store(&hammer_events[k], (uintptr_t)new_event());
    pthread_t t[HAMMER_THREADS + 1];
    struct hammer_arg args[HAMMER_THREADS];
    for (int i = 0; i < HAMMER_THREADS; i++) {
        args[i] = (struct hammer_arg){.ctx = c, .seed = 12345u + (unsigned)i};
        pthread_create(&t[i], NULL, hammer_worker, &args[i]);
    }
    pthread_create(&t[HAMMER_THREADS], NULL, hammer_poller, NULL);
    sleep_ms(500);
    atomic_store(&hammer_stop, 1);
    for (int i = 0; i <= HAMMER_THREADS; i++)
        pthread_join(t[i], NULL);
    CHECK(atomic_load(&hammer_unexpected) == 0);
    OK(D.cuCtxSynchronize());
    CHECK(stat_of(3) == 0);
    CHECK(stat_of(1) == streams0);
    CHECK(stat_of(2) == events0 + HAMMER_EVENTS);
    CHECK(atomic_load(&hammer_hostfns) > 0);
    printf("sim_selftest: hammer ran %d host functions\n", atomic_load(&hammer_hostfns));
    for (int k = 0; k < HAMMER_EVENTS; k++)
        OK(D.cuEventDestroy((CUevent)atomic_load(&hammer_events[k])));

    /* a context destroyed while its host functions are queued and one is running */
    CUstream s = new_stream();
    CUevent e = new_event();
    struct hostrec h[4] = {{.sleep_ms = 60}, {0}, {0}, {0}};
    OK(D.cuLaunchHostFunc(s, hostfn_record, &h[0]));
    sleep_ms(10); /* h[0] is running now */
    for (int i = 1; i < 4; i++)
        OK(D.cuLaunchHostFunc(i < 2 ? s : NULL, hostfn_record, &h[i]));
    OK(D.cuEventRecord(e, s));
    sleep_ms(10); /* h[2] is handed over, waiting behind h[0] */
    destroy_ctx(c);
    sleep_ms(80);
    CHECK(atomic_load(&h[0].ran) == 1);
    CHECK(atomic_load(&h[1].ran) == 0);
    CHECK(atomic_load(&h[2].ran) == 0 && atomic_load(&h[3].ran) == 0);
    CHECK(stat_of(3) == 0);
    CHECK_RC(D.cuEventQuery(e), CUDA_ERROR_INVALID_HANDLE);
}

static void test_stats_at_end(void)
{
    int64_t st[CUDAFDSIM_STAT_COUNT + 2];
    CHECK(cudafdsim_stats(st, CUDAFDSIM_STAT_COUNT + 2) == CUDAFDSIM_STAT_COUNT);
    CHECK(st[0] == 0); /* contexts */
    CHECK(st[1] == 0); /* streams */
    CHECK(st[2] == 0); /* events */
    CHECK(st[3] == 0); /* queued operations */
    CHECK(st[4] == atomic_load(&hostfn_calls));
    CHECK(st[5] > 10000);
    CHECK(cudafdsim_stats(st, 2) == 2);
    CHECK(cudafdsim_abi_version() == CUDAFDSIM_ABI_VERSION);
}

int main(void)
{
    setenv("CUDAFD_SIM_DEVICES", "3", 1);
    resolve_all(); /* works before cuInit, as with the driver */
    test_before_init();
    test_proc_address();
    test_errors();
    test_devices();
    test_ctx_stack();
    test_ordering();
    test_concurrency();
    test_blocking_sync();
    test_hostfn();
    test_fault();
    test_wait_event();
    test_handles();
    test_per_thread_stream();
    test_module_launch();
    test_scale();
    test_hammer();
    test_stats_at_end();
    int f = atomic_load(&failed);
    printf("sim_selftest: %d passed, %d failed\n", atomic_load(&passed), f);
    return f ? 1 : 0;
}
