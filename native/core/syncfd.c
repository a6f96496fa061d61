/*
 * syncfd.c - the syncfd mechanism (Jetson): the GPU signals an NvSciSync
 * object backed by a host1x syncpoint, and the kernel turns a syncpoint
 * threshold into a pollable fd.
 *
 * The path, per caller's stream (one NvSciSync object and imported external
 * semaphore each, made at its first watch and kept until
 * cudafd_release_idle):
 *  1. NvSciSyncModuleOpen; a signaler attribute list from
 *     cuDeviceGetNvSciSyncAttributes(SIGNAL); a CPU waiter list
 *     (NeedCpuAccess, RequiredPerm = WaitOnly, PrimitiveInfo = syncpoint);
 *     reconcile (once per device); NvSciSyncObjAlloc.
 *  2. cuImportExternalSemaphore(NVSCISYNC).
 *  3. Per point: cuSignalExternalSemaphoresAsync on the stream, then
 *     NvSciSyncFenceExtractFence gives the point's (syncpoint id, threshold).
 *  4. /dev/host1x-fence: TRIGGER_POLLFD arms the process's one pollfd for the
 *     threshold; CREATE_FENCE gives a sync_file for one point.
 *
 * Facts relied on (nvsci_abi.h has the numbers):
 *  - A syncpoint is a counter the signaler increments once per signal;
 *    a threshold names a count, not an owner. So two streams signalling one
 *    syncpoint would pass each other's thresholds in whatever order their
 *    work ran: each caller's stream gets an object (a syncpoint) of its own,
 *    and its points are signalled and queued under one lock, so a lane's
 *    thresholds increase along it (modulo 2^32).
 *  - The pollfd says that some armed threshold passed, not which, and a
 *    poll forgets the ones it reported. The poller therefore asks each
 *    syncfd lane's head after every wake with a throw-away sync_file
 *    (CREATE_FENCE, poll with timeout 0, close); a head that passed tells
 *    its record that every threshold up to it passed, so the heads behind it
 *    need no system call (32-bit wrapping comparison).
 *  - A sync_file is readable once its fence signalled, and stays readable.
 *  - What a GPU fault does to a pending syncpoint is not documented. Each
 *    point also records a pooled event behind its signal, and the poller
 *    queries it on a slow interval (the backstop, CUDAFD_SYNCFD_BACKSTOP_MS,
 *    10 ms by default, at least the wait's max_lateness): a fault raises
 *    its CudaError through the usual sweep, and a point whose syncpoint
 *    never moves completes when the driver says its work is done. A point
 *    found passed through host1x is also asked once about a fault.
 *
 * Nothing of this was run on a Jetson (docs/jetson.md). Without hardware it
 * runs against fakes behind the same function pointers: $CUDAFD_SYNCFD_FAKE
 * names a library that provides the NvSciSync calls and the host1x device
 * (cudafdsim_host1x_*), as libcudafd_sim.so does (native/sim/sim_nvsci.c).
 *
 * Locks: sf.mu guards the probe, the records list and the per-device
 * attribute lists (driver calls and host1x checks are made under it while a
 * record is found or made); a record's mu orders its stream's points, and a
 * watch takes g.mu inside it to queue its wait. cfd_syncfd_release_idle_locked
 * takes sf.mu inside g.mu; nothing takes g.mu inside sf.mu.
 */
#include <dlfcn.h>
#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/ioctl.h>
#include <unistd.h>

#include "../nvsci_abi.h"
#include "internal.h"
#include "syncfd.h"

#define MAX_DEVICES 16
#define PROBE_POLL_MS 5000
#define BACKSTOP_DEFAULT_NS (10LL * 1000 * 1000)

/* The probe's steps, in order: cudafd_syncfd_report() prints one line each. */
#define STEPS(X)                                                                                   \
    X(library, "load libnvscisync.so and its calls")                                               \
    X(driver, "the driver's external-semaphore calls")                                             \
    X(device, "open " CFD_HOST1X_DEVICE)                                                           \
    X(module, "NvSciSyncModuleOpen")                                                               \
    X(attributes, "signaler (cuDeviceGetNvSciSyncAttributes) and CPU waiter attribute lists")      \
    X(reconcile, "NvSciSyncAttrListReconcile and NvSciSyncObjAlloc")                               \
    X(syncpoint, "the reconciled primitive is a syncpoint")                                        \
    X(import, "cuImportExternalSemaphore")                                                         \
    X(signal, "cuSignalExternalSemaphoresAsync on a scratch stream")                               \
    X(extract, "NvSciSyncFenceExtractFence: syncpoint id and threshold")                           \
    X(fence, "HOST1X_IOCTL_CREATE_FENCE: a sync_file")                                             \
    X(pollfd, "HOST1X_IOCTL_CREATE_POLLFD")                                                        \
    X(trigger, "HOST1X_IOCTL_TRIGGER_POLLFD")                                                      \
    X(poll, "the sync_file and the pollfd turn readable")
enum {
#define STEP_ENUM(name, what) STEP_##name,
    STEPS(STEP_ENUM)
#undef STEP_ENUM
        STEP_COUNT
};
static const char *const step_name[] = {
#define STEP_NAME(name, what) #name,
    STEPS(STEP_NAME)
#undef STEP_NAME
};
static const char *const step_what[] = {
#define STEP_WHAT(name, what) what,
    STEPS(STEP_WHAT)
#undef STEP_WHAT
};

struct nvsci {
#define SCI_FIELD(name, ret, params) ret(*name) params;
    CUDAFD_NVSCISYNC_CALLS(SCI_FIELD)
#undef SCI_FIELD
};

/* The host1x device: open(2)/ioctl(2)/close(2), or the fake's. */
struct host1x_ops {
    int (*open)(const char *path, int flags);
    int (*ioctl)(int fd, unsigned long request, void *arg);
    int (*close)(int fd);
    void (*ack)(int pollfd); /* NULL for the real device */
};

typedef struct cfd_syncrec {
    struct cfd_syncrec *next;
    cfd_ctx *cx;        /* its context's record, kept while this one is (cx->syncrecs); NULL: let go (g.mu) */
    uintptr_t stream;
    uint64_t thread;
    uint64_t key;       /* the stream's id (watch.c, stream_key) when last signalled (sf.mu) */
    NvSciSyncObj obj;
    CUexternalSemaphore sem;
    pthread_mutex_t mu; /* held from a point's signal until it is queued */
    int users;          /* watches using it now (sf.mu) */
    int waits;          /* wait records that name it (g.mu) */
    uint32_t passed;    /* the latest threshold known passed (g.mu) */
    bool has_passed;
    bool signalled;     /* last_id and last_thr name its latest point (sf.mu) */
    uint32_t last_id, last_thr;
    bool dropped;       /* its semaphore went with its context: never found again (sf.mu) */
    bool retired;       /* its handle went to another stream while a signal was pending: never found again (sf.mu) */
} cfd_syncrec;

static struct {
    pthread_mutex_t mu;
    bool probed;
    int rc;                     /* the probe's outcome */
    int failed;                 /* the step that failed, or STEP_COUNT */
    char why[STEP_COUNT][256];  /* each step's result, "" when not run */
    char message[512];          /* why the mechanism is unavailable */
    char report[STEP_COUNT * 300 + 600];
    void *lib;
    bool fake;
    char lib_path[512];
    struct nvsci sci;
    struct host1x_ops dev;
    int devfd;
    NvSciSyncModule module;
    NvSciSyncAttrList reconciled[MAX_DEVICES]; /* per CUdevice ordinal, made once */
    cfd_syncrec *recs;
    int64_t backstop_ns;
    /* g.mu */
    int pollfd;
} sf = {.mu = PTHREAD_MUTEX_INITIALIZER, .devfd = -1, .pollfd = -1};

static int real_ioctl(int fd, unsigned long request, void *arg) { return ioctl(fd, request, arg); }
static int real_open(const char *path, int flags) { return open(path, flags); }

/* ---- the probe ---- */

static int step_fail(int step, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
static int step_fail(int step, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(sf.why[step], sizeof sf.why[step], fmt, ap);
    va_end(ap);
    sf.failed = step;
    return -1;
}

static void step_ok(int step) { snprintf(sf.why[step], sizeof sf.why[step], "ok"); }

static const char *cu_name(CUresult r) { return cudafd_cuda_error_name(r); }

static int load_library(void)
{
    const char *fake = getenv("CUDAFD_SYNCFD_FAKE");
    sf.fake = fake && *fake;
    snprintf(sf.lib_path, sizeof sf.lib_path, "%s", sf.fake ? fake : "libnvscisync.so");
    dlerror();
    sf.lib = dlopen(sf.lib_path, RTLD_NOW | RTLD_LOCAL);
    if (!sf.lib) {
        const char *err = dlerror();
        bool absent = err && strstr(err, "No such file");
        return step_fail(STEP_library, "%s: %s", sf.lib_path, absent ? "not found" : (err ? err : "cannot load"));
    }
#define SCI_LOAD(name, ret, params)                                                                \
    if (!(*(void **)&sf.sci.name = dlsym(sf.lib, #name)))                                          \
        return step_fail(STEP_library, "%s lacks %s", sf.lib_path, #name);
    CUDAFD_NVSCISYNC_CALLS(SCI_LOAD)
#undef SCI_LOAD
    if (sf.fake) {
        void *p;
#define FAKE_LOAD(name, ret, params)                                                               \
    if (!(p = dlsym(sf.lib, #name)))                                                               \
        return step_fail(STEP_library, "%s lacks %s (not a fake host1x device)", sf.lib_path, #name);
        CUDAFD_HOST1X_FAKE_CALLS(FAKE_LOAD)
#undef FAKE_LOAD
        *(void **)&sf.dev.open = dlsym(sf.lib, "cudafdsim_host1x_open");
        *(void **)&sf.dev.ioctl = dlsym(sf.lib, "cudafdsim_host1x_ioctl");
        *(void **)&sf.dev.close = dlsym(sf.lib, "cudafdsim_host1x_close");
        *(void **)&sf.dev.ack = dlsym(sf.lib, "cudafdsim_host1x_ack");
    } else {
        sf.dev = (struct host1x_ops){real_open, real_ioctl, close, NULL};
    }
    step_ok(STEP_library);
    return 0;
}

static int check_driver(void)
{
    int rc = cfd_driver_ready();
    if (rc != CUDAFD_OK)
        return step_fail(STEP_driver, "%s", cudafd_last_error());
    const char *missing = !cu.cuDeviceGetNvSciSyncAttributes ? "cuDeviceGetNvSciSyncAttributes"
                          : !cu.cuImportExternalSemaphore      ? "cuImportExternalSemaphore"
                          : !cu.cuSignalExternalSemaphoresAsync ? "cuSignalExternalSemaphoresAsync"
                          : !cu.cuDestroyExternalSemaphore     ? "cuDestroyExternalSemaphore"
                          : !cu.cuDevicePrimaryCtxRetain       ? "cuDevicePrimaryCtxRetain"
                          : !cu.cuDevicePrimaryCtxRelease      ? "cuDevicePrimaryCtxRelease"
                                                               : NULL;
    if (missing)
        return step_fail(STEP_driver, "the driver %s has no %s (no NvSciSync interop: not a Tegra driver)",
                         cudafd_driver_path(), missing);
    step_ok(STEP_driver);
    return 0;
}

/* The reconciled attribute list of a device (sf.mu held): made at its first use. */
static int device_attrs(CUdevice dev, NvSciSyncAttrList *out, bool probing)
{
    if (dev < 0 || dev >= MAX_DEVICES)
        return cfd_fail(CUDAFD_E_UNSUPPORTED, "syncfd serves devices 0 to %d, not %d", MAX_DEVICES - 1, dev);
    if (sf.reconciled[dev]) {
        *out = sf.reconciled[dev];
        return CUDAFD_OK;
    }
    NvSciSyncAttrList lists[2] = {NULL, NULL}, conflicts = NULL, reconciled = NULL;
    int rc = CUDAFD_E_UNSUPPORTED;
    NvSciError e;
    CUresult r;
    if ((e = sf.sci.NvSciSyncAttrListCreate(sf.module, &lists[0])) != NvSciError_Success ||
        (e = sf.sci.NvSciSyncAttrListCreate(sf.module, &lists[1])) != NvSciError_Success) {
        cfd_fail(rc, "NvSciSyncAttrListCreate failed (NvSciError %d)", e);
        goto out;
    }
    if ((r = cu.cuDeviceGetNvSciSyncAttributes(lists[0], dev, CUDA_NVSCISYNC_ATTR_SIGNAL)) != CUDA_SUCCESS) {
        cfd_fail(rc, "cuDeviceGetNvSciSyncAttributes(SIGNAL) failed: %s (%d)", cu_name(r), r);
        goto out;
    }
    bool cpu = true;
    uint64_t perm = NvSciSyncAccessPerm_WaitOnly;
    int primitive = NvSciSyncAttrValPrimitiveType_Syncpoint;
    const NvSciSyncAttrKeyValuePair pairs[] = {
        {NvSciSyncAttrKey_NeedCpuAccess, &cpu, sizeof cpu},
        {NvSciSyncAttrKey_RequiredPerm, &perm, sizeof perm},
        {NvSciSyncAttrKey_PrimitiveInfo, &primitive, sizeof primitive},
    };
    if ((e = sf.sci.NvSciSyncAttrListSetAttrs(lists[1], pairs, 3)) != NvSciError_Success) {
        cfd_fail(rc, "NvSciSyncAttrListSetAttrs (CPU waiter) failed (NvSciError %d)", e);
        goto out;
    }
    if (probing)
        step_ok(STEP_attributes);
    if ((e = sf.sci.NvSciSyncAttrListReconcile(lists, 2, &reconciled, &conflicts)) != NvSciError_Success) {
        cfd_fail(rc, "NvSciSyncAttrListReconcile failed (NvSciError %d)", e);
        if (probing)
            step_fail(STEP_reconcile, "%s", cudafd_last_error());
        goto out;
    }
    *out = sf.reconciled[dev] = reconciled;
    rc = CUDAFD_OK;
out:
    if (rc != CUDAFD_OK && probing && sf.failed == STEP_COUNT)
        step_fail(STEP_attributes, "%s", cudafd_last_error());
    if (conflicts)
        sf.sci.NvSciSyncAttrListFree(conflicts);
    for (int i = 0; i < 2; i++)
        if (lists[i])
            sf.sci.NvSciSyncAttrListFree(lists[i]);
    return rc;
}

static int primitive_is_syncpoint(NvSciSyncAttrList reconciled)
{
    NvSciSyncAttrKeyValuePair pair = {NvSciSyncAttrKey_PrimitiveInfo, NULL, 0};
    NvSciError e = sf.sci.NvSciSyncAttrListGetAttrs(reconciled, &pair, 1);
    if (e != NvSciError_Success)
        return step_fail(STEP_syncpoint, "NvSciSyncAttrListGetAttrs(PrimitiveInfo) failed (NvSciError %d)", e);
    if (!pair.value || pair.len < sizeof(int))
        return step_fail(STEP_syncpoint, "the reconciled list names no primitive");
    int type = *(const int *)pair.value;
    if (type != NvSciSyncAttrValPrimitiveType_Syncpoint)
        return step_fail(STEP_syncpoint, "the reconciled primitive is type %d, not a syncpoint (%d)", type,
                         NvSciSyncAttrValPrimitiveType_Syncpoint);
    step_ok(STEP_syncpoint);
    return 0;
}

static int import_sem(NvSciSyncObj obj, CUexternalSemaphore *sem)
{
    CUDA_EXTERNAL_SEMAPHORE_HANDLE_DESC desc;
    memset(&desc, 0, sizeof desc);
    desc.type = CU_EXTERNAL_SEMAPHORE_HANDLE_TYPE_NVSCISYNC;
    desc.handle.nvSciSyncObj = obj;
    return cu.cuImportExternalSemaphore(sem, &desc);
}

/* Signal `sem` on `stream` and extract the point (the stream's context current). */
static int signal_point(CUexternalSemaphore sem, CUstream stream, uint32_t *id, uint32_t *thr, int *step)
{
    NvSciSyncFence fence;
    memset(&fence, 0, sizeof fence);
    CUDA_EXTERNAL_SEMAPHORE_SIGNAL_PARAMS params;
    memset(&params, 0, sizeof params);
    params.params.nvSciSync.fence = &fence;
    CUresult r = cu.cuSignalExternalSemaphoresAsync(&sem, &params, 1, stream);
    if (r != CUDA_SUCCESS) {
        *step = STEP_signal;
        return cfd_fail_cuda(r, "cuSignalExternalSemaphoresAsync");
    }
    uint64_t id64 = 0, value = 0;
    NvSciError e = sf.sci.NvSciSyncFenceExtractFence(&fence, &id64, &value);
    sf.sci.NvSciSyncFenceClear(&fence);
    if (e != NvSciError_Success) {
        *step = STEP_extract;
        return cfd_fail(CUDAFD_E_UNSUPPORTED, "NvSciSyncFenceExtractFence failed (NvSciError %d)", e);
    }
    if (id64 > UINT32_MAX) {
        *step = STEP_extract;
        return cfd_fail(CUDAFD_E_UNSUPPORTED, "the syncpoint id %llu does not fit host1x's 32 bits",
                        (unsigned long long)id64);
    }
    *id = (uint32_t)id64;
    *thr = (uint32_t)value; /* the counter wraps at 32 bits */
    return CUDAFD_OK;
}

static int create_fence(uint32_t id, uint32_t thr, int *fd)
{
    struct cfd_host1x_create_fence a = {.id = id, .threshold = thr, .fence_fd = -1, .reserved = {0}};
    if (sf.dev.ioctl(sf.devfd, CFD_HOST1X_IOCTL_CREATE_FENCE, &a) < 0)
        return -errno;
    *fd = a.fence_fd;
    return 0;
}

static int create_pollfd(int *fd)
{
    struct cfd_host1x_create_pollfd a = {.fd = -1, .reserved = {0}};
    if (sf.dev.ioctl(sf.devfd, CFD_HOST1X_IOCTL_CREATE_POLLFD, &a) < 0)
        return -errno;
    *fd = a.fd;
    return 0;
}

static int trigger(int pollfd, uint32_t id, uint32_t thr)
{
    struct cfd_host1x_trigger_pollfd a = {.fd = pollfd, .id = id, .threshold = thr, .reserved = {0}};
    return sf.dev.ioctl(sf.devfd, CFD_HOST1X_IOCTL_TRIGGER_POLLFD, &a) < 0 ? -errno : 0;
}

/* Wait for both fds to turn readable, at most PROBE_POLL_MS. */
static int poll_both(int fence_fd, int pollfd)
{
    struct pollfd p[2] = {{fence_fd, POLLIN, 0}, {pollfd, POLLIN | POLLPRI, 0}};
    bool seen[2] = {false, false};
    int64_t deadline = cfd_now_ns() + (int64_t)PROBE_POLL_MS * 1000000;
    while (!(seen[0] && seen[1])) {
        int64_t left = (deadline - cfd_now_ns()) / 1000000;
        if (left <= 0)
            break;
        int n = poll(p, 2, (int)left);
        if (n < 0 && errno != EINTR)
            return step_fail(STEP_poll, "poll: %s", strerror(errno));
        for (int i = 0; i < 2; i++) {
            if (p[i].revents & (POLLIN | POLLPRI)) {
                seen[i] = true;
                p[i].fd = -1; /* a real pollfd forgets what it reported: look no more */
            }
        }
    }
    if (!seen[0] || !seen[1])
        return step_fail(STEP_poll, "%s did not turn readable within %d ms",
                         !seen[0] ? "the sync_file" : "the pollfd", PROBE_POLL_MS);
    step_ok(STEP_poll);
    return 0;
}

/* Every step once, on device 0's primary context; sf.mu held. */
static void run_probe(void)
{
    sf.failed = STEP_COUNT;
    const char *env = getenv("CUDAFD_SYNCFD_BACKSTOP_MS");
    sf.backstop_ns = BACKSTOP_DEFAULT_NS;
    if (env && *env) {
        char *end;
        long long ms = strtoll(env, &end, 10);
        if (*end == '\0' && ms > 0 && ms <= 3600 * 1000)
            sf.backstop_ns = ms * 1000000;
    }
    if (load_library() || check_driver())
        return;
    sf.devfd = sf.dev.open(CFD_HOST1X_DEVICE, O_RDWR | O_CLOEXEC);
    if (sf.devfd < 0) {
        step_fail(STEP_device, "%s: %s", CFD_HOST1X_DEVICE, strerror(errno));
        return;
    }
    step_ok(STEP_device);
    NvSciError e = sf.sci.NvSciSyncModuleOpen(&sf.module);
    if (e != NvSciError_Success) {
        sf.module = NULL;
        step_fail(STEP_module, "NvSciSyncModuleOpen failed (NvSciError %d)", e);
        return;
    }
    step_ok(STEP_module);

    CUcontext ctx = NULL;
    CUresult r = cu.cuDevicePrimaryCtxRetain(&ctx, 0);
    if (r != CUDA_SUCCESS) {
        step_fail(STEP_attributes, "cuDevicePrimaryCtxRetain(0) failed: %s (%d)", cu_name(r), r);
        return;
    }
    bool pushed = false;
    CUstream scratch = NULL;
    CUexternalSemaphore sem = NULL;
    NvSciSyncObj obj = NULL;
    int fence_fd = -1, pollfd = -1, step = STEP_COUNT;
    uint32_t id = 0, thr = 0;
    NvSciSyncAttrList reconciled;
    if (cfd_enter_ctx(ctx, &pushed) != CUDAFD_OK) {
        step_fail(STEP_attributes, "%s", cudafd_last_error());
        goto out;
    }
    if (device_attrs(0, &reconciled, true) != CUDAFD_OK)
        goto out;
    if ((e = sf.sci.NvSciSyncObjAlloc(reconciled, &obj)) != NvSciError_Success) {
        obj = NULL;
        step_fail(STEP_reconcile, "NvSciSyncObjAlloc failed (NvSciError %d)", e);
        goto out;
    }
    step_ok(STEP_reconcile);
    if (primitive_is_syncpoint(reconciled))
        goto out;
    if ((r = import_sem(obj, &sem)) != CUDA_SUCCESS) {
        sem = NULL;
        step_fail(STEP_import, "cuImportExternalSemaphore failed: %s (%d)", cu_name(r), r);
        goto out;
    }
    step_ok(STEP_import);
    if ((r = cu.cuStreamCreate(&scratch, CU_STREAM_NON_BLOCKING)) != CUDA_SUCCESS) {
        scratch = NULL;
        step_fail(STEP_signal, "cuStreamCreate (scratch stream) failed: %s (%d)", cu_name(r), r);
        goto out;
    }
    if (signal_point(sem, scratch, &id, &thr, &step) != CUDAFD_OK) {
        if (step == STEP_extract)
            step_ok(STEP_signal);
        step_fail(step, "%s", cudafd_last_error());
        goto out;
    }
    step_ok(STEP_signal);
    step_ok(STEP_extract);
    int err = create_fence(id, thr, &fence_fd);
    if (err) {
        fence_fd = -1;
        step_fail(STEP_fence, "syncpoint %u threshold %u: %s", id, thr, strerror(-err));
        goto out;
    }
    step_ok(STEP_fence);
    if ((err = create_pollfd(&pollfd))) {
        pollfd = -1;
        step_fail(STEP_pollfd, "%s", strerror(-err));
        goto out;
    }
    step_ok(STEP_pollfd);
    if ((err = trigger(pollfd, id, thr))) {
        step_fail(STEP_trigger, "syncpoint %u threshold %u: %s", id, thr, strerror(-err));
        goto out;
    }
    step_ok(STEP_trigger);
    poll_both(fence_fd, pollfd);
out:
    if (fence_fd >= 0)
        sf.dev.close(fence_fd);
    if (pollfd >= 0)
        sf.dev.close(pollfd);
    if (scratch) {
        CUevent ev = NULL; /* the scratch stream's work must be over before its semaphore goes */
        if (cu.cuEventCreate(&ev, CU_EVENT_DISABLE_TIMING) == CUDA_SUCCESS) {
            if (cu.cuEventRecord(ev, scratch) == CUDA_SUCCESS)
                cu.cuEventSynchronize(ev);
            cu.cuEventDestroy(ev);
        }
        cu.cuStreamDestroy(scratch);
    }
    if (sem)
        cu.cuDestroyExternalSemaphore(sem);
    if (obj)
        sf.sci.NvSciSyncObjFree(obj);
    cfd_leave_ctx(pushed);
    cu.cuDevicePrimaryCtxRelease(0);
}

static void build_report(void)
{
    size_t len = 0, cap = sizeof sf.report;
    if (sf.failed == STEP_COUNT) {
        len += (size_t)snprintf(sf.report + len, cap - len, "available (experimental; fakes: %s)\n",
                                sf.fake ? sf.lib_path : "no");
    } else {
        snprintf(sf.message, sizeof sf.message, "the syncfd mechanism is unavailable here: its self-test step '%s' (%s) failed: %s",
                 step_name[sf.failed], step_what[sf.failed], sf.why[sf.failed]);
        len += (size_t)snprintf(sf.report + len, cap - len, "unavailable: %s: %s\n", step_name[sf.failed],
                                sf.why[sf.failed]);
    }
    for (int i = 0; i < STEP_COUNT && len < cap; i++)
        len += (size_t)snprintf(sf.report + len, cap - len, "%s | %s | %s\n", step_name[i], step_what[i],
                                sf.why[i][0] ? sf.why[i] : "not run");
}

static void probe_once(void)
{
    pthread_mutex_lock(&sf.mu);
    if (!sf.probed) {
        run_probe();
        sf.rc = sf.failed == STEP_COUNT ? CUDAFD_OK : CUDAFD_E_UNSUPPORTED;
        build_report();
        /* a driver that did not load may load later (cudafd_set_driver): probed again then */
        sf.probed = sf.failed != STEP_driver || cudafd_driver_path()[0];
    }
    pthread_mutex_unlock(&sf.mu);
}

int cfd_syncfd_available(void)
{
    probe_once();
    return sf.rc == CUDAFD_OK ? CUDAFD_OK : cfd_fail(sf.rc, "%s", sf.message);
}

CFD_API const char *cudafd_syncfd_report(void)
{
    if (cfd_fork_check() != CUDAFD_OK)
        return "unavailable: fork: CUDA cannot be used in a process forked after its parent used it\n";
    probe_once();
    return sf.report;
}

int64_t cfd_syncfd_backstop_ns(void) { return sf.backstop_ns; }

/* ---- per-stream records ---- */

/* Has every signal of the record run? sf.mu held. A system call (host1x),
 * so asked only where a record would be shared or freed. */
static bool record_quiet(const cfd_syncrec *rec)
{
    return !rec->signalled || cfd_syncfd_check(rec->last_id, rec->last_thr) == 1;
}

/* The record of (ctx, stream, thread), made if new; held (users) until
 * signal_end. The stream's context current.
 *
 * Found by the handle, not by the stream's id as lanes are (watch.c,
 * stream_key): a record holds a syncpoint, a scarce host1x resource, until
 * cudafd_release_idle, and a program that makes and destroys streams would
 * pile up one per stream id. But the driver hands a new stream the handle of
 * one destroyed just before, even while that one's work runs, and two
 * streams signalling one syncpoint pass each other's thresholds (a sync_file
 * of the old stream would turn readable at the new stream's signal). So a
 * record also keeps the id (`key`) of the stream that signalled it: one found
 * under another id goes over to the new stream only once all its signals
 * have run, and is otherwise retired, and the new stream gets its own. */
static int record_get(cfd_ctx *cx, uintptr_t stream, uint64_t key, uint64_t thread, cfd_syncrec **out)
{
    pthread_mutex_lock(&sf.mu);
    cfd_syncrec *rec = sf.recs;
    while (rec && (rec->dropped || rec->retired ||
                   !(rec->cx == cx && rec->stream == stream && rec->thread == thread))) /* (a let-go one's cx is NULL) */
        rec = rec->next;
    if (rec && rec->key != key) {
        if (rec->users == 0 && record_quiet(rec))
            rec->key = key;
        else
            rec->retired = true, rec = NULL;
    }
    int rc = CUDAFD_OK;
    if (!rec) {
        CUdevice dev = 0;
        CUresult r = cu.cuCtxGetDevice(&dev);
        NvSciSyncAttrList reconciled = NULL;
        NvSciSyncObj obj = NULL;
        CUexternalSemaphore sem = NULL;
        NvSciError e;
        if (r != CUDA_SUCCESS)
            rc = cfd_fail_cuda(r, "cuCtxGetDevice");
        else if ((rc = device_attrs(dev, &reconciled, false)) != CUDAFD_OK)
            ;
        else if ((e = sf.sci.NvSciSyncObjAlloc(reconciled, &obj)) != NvSciError_Success)
            rc = cfd_fail(CUDAFD_E_UNSUPPORTED, "NvSciSyncObjAlloc failed (NvSciError %d)", e), obj = NULL;
        else if ((r = import_sem(obj, &sem)) != CUDA_SUCCESS)
            rc = cfd_fail_cuda(r, "cuImportExternalSemaphore"), sem = NULL;
        else if (!(rec = calloc(1, sizeof *rec)))
            rc = cfd_fail(CUDAFD_E_NOMEM, "out of memory for a syncfd stream record");
        if (rc != CUDAFD_OK) {
            if (sem)
                cu.cuDestroyExternalSemaphore(sem);
            if (obj)
                sf.sci.NvSciSyncObjFree(obj);
        } else {
            rec->cx = cx;
            __atomic_fetch_add(&cx->syncrecs, 1, __ATOMIC_RELAXED);
            rec->stream = stream;
            rec->key = key;
            rec->thread = thread;
            rec->obj = obj;
            rec->sem = sem;
            pthread_mutex_init(&rec->mu, NULL);
            rec->next = sf.recs;
            sf.recs = rec;
        }
    }
    if (rec)
        rec->users++;
    pthread_mutex_unlock(&sf.mu);
    *out = rec;
    return rc;
}


/* g.mu held. Let go of the context's record: the context may go now. */
static void record_leave_ctx(cfd_syncrec *rec)
{
    if (rec->cx)
        __atomic_fetch_sub(&rec->cx->syncrecs, 1, __ATOMIC_RELAXED);
    rec->cx = NULL;
}

static void record_free(cfd_syncrec *rec, bool destroy_sem)
{
    if (destroy_sem)
        cu.cuDestroyExternalSemaphore(rec->sem);
    sf.sci.NvSciSyncObjFree(rec->obj);
    pthread_mutex_destroy(&rec->mu);
    free(rec);
}

/* Stop using a record whose semaphore the driver no longer knows (its
 * context was destroyed and another took its address). Earlier waits may
 * still name it, so it stays listed until cfd_syncfd_release_idle_locked. */
static void record_drop(cfd_syncrec *rec)
{
    pthread_mutex_lock(&sf.mu);
    rec->users--;
    rec->dropped = true;
    pthread_mutex_unlock(&sf.mu);
}

static bool stream_usable(CUstream stream)
{
    CUresult q = cu.cuStreamQuery(stream);
    return q == CUDA_SUCCESS || q == CUDA_ERROR_NOT_READY;
}

/* A watch is done with the record; `sp` its point, if it signalled one. */
static void record_put(cfd_syncrec *rec, const cfd_syncpt *sp)
{
    pthread_mutex_lock(&sf.mu);
    rec->users--;
    if (sp) {
        rec->signalled = true;
        rec->last_id = sp->id;
        rec->last_thr = sp->thr;
    }
    pthread_mutex_unlock(&sf.mu);
}

int cfd_syncfd_signal(cfd_ctx *cx, CUstream stream, uint64_t key, uint64_t thread, cfd_syncpt *sp)
{
    for (int attempt = 0;; attempt++) {
        cfd_syncrec *rec;
        int rc = record_get(cx, (uintptr_t)stream, key, thread, &rec);
        if (rc != CUDAFD_OK) {
            if (rec)
                record_put(rec, NULL);
            return rc;
        }
        pthread_mutex_lock(&rec->mu);
        int step;
        rc = signal_point(rec->sem, stream, &sp->id, &sp->thr, &step);
        if (rc == CUDAFD_OK) {
            sp->rec = rec;
            return CUDAFD_OK;
        }
        pthread_mutex_unlock(&rec->mu);
        int r = cudafd_last_cuda_error();
        bool stale = rc == CUDAFD_E_CUDA && step == STEP_signal && attempt == 0 &&
                     (r == CUDA_ERROR_INVALID_HANDLE || r == CUDA_ERROR_CONTEXT_IS_DESTROYED) &&
                     stream_usable(stream); /* else the caller's stream is what the driver refused */
        if (!stale) {
            record_put(rec, NULL);
            return rc;
        }
        record_drop(rec);
    }
}

void cfd_syncfd_signal_end(cfd_syncpt *sp)
{
    if (!sp->rec)
        return;
    pthread_mutex_unlock(&sp->rec->mu);
    record_put(sp->rec, sp);
    sp->rec = NULL;
}

/* ---- the pollfd and the checks ---- */

bool cfd_syncfd_arm_locked(const cfd_syncpt *sp)
{
    bool made = false;
    if (sf.pollfd < 0) {
        int fd = -1;
        if (create_pollfd(&fd) != 0)
            return false; /* the backstop completes the wait */
        sf.pollfd = fd;
        cfd_count(ST_EVENTFDS, 1);
        made = true;
    }
    trigger(sf.pollfd, sp->id, sp->thr); /* a failure leaves the wait to the backstop */
    return made;
}

int cfd_syncfd_pollfd_locked(void) { return sf.pollfd; }

void cfd_syncfd_close_pollfd_locked(void)
{
    if (sf.pollfd < 0)
        return;
    sf.dev.close(sf.pollfd);
    sf.pollfd = -1;
    cfd_count(ST_EVENTFDS, -1);
}

void cfd_syncfd_ack(int pollfd)
{
    if (sf.dev.ack)
        sf.dev.ack(pollfd);
}

int cfd_syncfd_check(uint32_t id, uint32_t thr)
{
    int fd = -1;
    int err = create_fence(id, thr, &fd);
    if (err)
        return err;
    struct pollfd p = {fd, POLLIN, 0};
    int n;
    while ((n = poll(&p, 1, 0)) < 0 && errno == EINTR)
        ;
    sf.dev.close(fd);
    return n > 0 && (p.revents & POLLIN) ? 1 : 0;
}

void cfd_syncfd_hold_locked(cfd_syncrec *rec, int delta) { rec->waits += delta; }

bool cfd_syncfd_known_passed_locked(const cfd_syncrec *rec, uint32_t thr)
{
    return rec->has_passed && cfd_syncpt_passed(rec->passed, thr);
}

void cfd_syncfd_note_passed_locked(cfd_syncrec *rec, uint32_t thr)
{
    if (!rec->has_passed || !cfd_syncpt_passed(rec->passed, thr)) {
        rec->passed = thr;
        rec->has_passed = true;
    }
}

int cfd_syncfd_sync_file(uint32_t id, uint32_t thr, int *fd)
{
    int err = create_fence(id, thr, fd);
    if (err)
        return cfd_fail(CUDAFD_E_SYS, "HOST1X_IOCTL_CREATE_FENCE (syncpoint %u threshold %u): %s", id, thr,
                        strerror(-err));
    return CUDAFD_OK;
}

/* A record no watch or wait uses goes once its signals ran, with its
 * semaphore. One whose signals never run (its context faulted, or it was
 * dropped) goes without: its semaphore goes with its context. One whose
 * signal is still queued (a cancelled wait's work runs) may not be destroyed
 * yet, nor after its context goes, which its caller may do once this returns
 * (cudafd.h): it lets go of its context's record, is never found again, and
 * its object goes at a later call once its signals ran, its semaphore with
 * its context. */
void cfd_syncfd_release_idle_locked(void)
{
    pthread_mutex_lock(&sf.mu);
    cfd_syncrec **link = &sf.recs;
    while (*link) {
        cfd_syncrec *rec = *link;
        if (rec->users > 0 || rec->waits > 0) {
            link = &rec->next;
            continue;
        }
        bool never = rec->dropped || (rec->cx && rec->cx->fault);
        bool quiet = !never && record_quiet(rec);
        bool own_sem = rec->cx != NULL; /* not let go of earlier */
        record_leave_ctx(rec);
        if (never || quiet) {
            *link = rec->next;
            record_free(rec, quiet && own_sem);
        } else {
            link = &rec->next;
        }
    }
    pthread_mutex_unlock(&sf.mu);
}
