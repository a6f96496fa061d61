/*
 * sim_nvsci.c - fakes for the syncfd mechanism: NvSciSync, the driver's
 * external semaphores, and the host1x fence device, so that the core's
 * syncfd path (native/core/syncfd.c) runs without a Jetson.
 *
 * The core reaches them through $CUDAFD_SYNCFD_FAKE=<this library>: it then
 * takes the NvSciSync calls (exported here under their own names) and the
 * device's open/ioctl/close from this library instead of libnvscisync.so and
 * /dev/host1x-fence. The driver calls are ordinary entry points of the
 * simulated driver.
 *
 * What they reproduce (nvsci_abi.h):
 *  - Each NvSciSync object gets a syncpoint of its own: a 32-bit counter that
 *    starts at $CUDAFD_SIM_SYNCPOINT_START (default 0) and wraps.
 *  - cuSignalExternalSemaphoresAsync hands out the next threshold (counter
 *    value after one more increment) in the fence, and queues a signal
 *    operation on the stream; the counter moves when the stream runs it, in
 *    order after the work before it. A fault drops it: the syncpoint never
 *    reaches that threshold.
 *  - CREATE_FENCE gives a sync_file: one end of a socket pair whose other
 *    end the fake keeps, and closes to signal it (the caller's end turns
 *    readable, at end of file, and stays so): when the counter passes the
 *    threshold (at once if it has), or when the fence times out, passed or
 *    not, as the kernel's does (host1x_fence_create(.., timeout = true):
 *    30 s after signalling is enabled, at the first poll of it). The fake
 *    counts $CUDAFD_SIM_FENCE_TIMEOUT_MS (default 30000) from the fence's
 *    creation, never later than the kernel, on a thread of its own. As the
 *    kernel frees a sync_file with its last fd, the fake frees one whose
 *    caller's end was closed everywhere (its own end then reports a hang-up)
 *    at the device's next ioctl or close.
 *  - CREATE_POLLFD gives a pollfd:
 *    an eventfd written when a threshold armed on it by TRIGGER_POLLFD
 *    passes; a threshold passed already wakes it at once; each armed
 *    threshold wakes it once. A real pollfd's poll() clears it, so the fake
 *    is cleared by cudafdsim_host1x_ack(), which reads it. The fake keeps a
 *    duplicate of the pollfd to write, so a caller closing its fd early
 *    never makes the fake write another file that took the number.
 *  - A semaphore belongs to the context current at its import and dies with
 *    it: a later signal fails with CUDA_ERROR_INVALID_HANDLE (what the core
 *    takes for a dead semaphore), and destroying it is counted as a call
 *    given a dead handle (stat 6). Destroying a live one whose
 *    signals have not all run is counted too (stat 7): CUDA requires that
 *    "any outstanding signals or waits must have completed before the
 *    semaphore is destroyed", and a real syncpoint freed early may be handed
 *    to another object while the late signal still moves it.
 *  - cudafdsim_fail_next_fence(err) makes the next CREATE_FENCE fail with
 *    errno err, as one does when the process is out of fds.
 *  - cudafdsim_fail_next_signal(r) makes the next signal fail with r, as a
 *    real one does once the semaphore's context is gone.
 *  - $CUDAFD_SIM_SYNCFD_FAIL=<step> makes one step of the core's probe fail:
 *    driver (the four external-semaphore entry points are absent), device,
 *    module, attributes, reconcile, syncpoint (the reconciled primitive is a
 *    semaphore), import, signal, extract, fence, pollfd, trigger, poll (no
 *    threshold that passes signals an fd).
 *
 * Everything here runs under sim.lock; fd writes and closes happen under it too.
 */
#include <errno.h>
#include <poll.h>
#include <stdlib.h>
#include <string.h>
#include <fcntl.h>
#include <sys/eventfd.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

#include "../nvsci_abi.h"
#include "sim_internal.h"

#define FAKE_ERROR 1 /* any nonzero NvSciError */
#define MODULE_MAGIC 0x6d6f64u
#define LIST_MAGIC 0x6c6973u
#define OBJ_MAGIC 0x6f626au
#define FENCE_MAGIC 0x66656e63u
#define SYNCPOINT_BASE 100 /* ids start here, so a zeroed fence names none */

struct fake_module { uint32_t magic; };
struct fake_list {
    uint32_t magic;
    bool signaler, waiter, cpu, reconciled;
    int primitive; /* reconciled: the primitive; unreconciled waiter: the one asked for (0: any) */
};
struct fake_obj { uint32_t magic; uint32_t syncpoint; };
struct fake_sem { uint32_t syncpoint; struct sim_ctx *ctx; /* a reference: the semaphore dies with it */ };

struct syncpoint { uint32_t value, max; };
static struct syncpoint *points;
static uint32_t npoints, cappoints;

struct pollfd_rec { int fd, own; struct pollfd_rec *next; };
struct armed {
    uint32_t syncpoint, thr;
    int own;                 /* sync_file: the fake's end, closed to signal it */
    uint64_t timeout_at;     /* sync_file: when it signals anyway (sim_now_ns) */
    struct pollfd_rec *pfd;  /* pollfd: the one to wake, else NULL */
    struct armed *next;
};
static struct armed *armed;
static struct pollfd_rec *pollfds;
static int devfds[16];
static int ndevfds;

static CUresult fail_next_signal;
static int fail_next_fence;

SIM_API void cudafdsim_fail_next_fence(int err)
{
    pthread_mutex_lock(&sim.lock);
    fail_next_fence = err;
    pthread_mutex_unlock(&sim.lock);
}

SIM_API void cudafdsim_fail_next_signal(CUresult r)
{
    pthread_mutex_lock(&sim.lock);
    fail_next_signal = r;
    pthread_mutex_unlock(&sim.lock);
}

bool sim_syncfd_fails(const char *step)
{
    const char *env = getenv("CUDAFD_SIM_SYNCFD_FAIL");
    return env && strcmp(env, step) == 0;
}

static uint32_t start_value(void)
{
    const char *env = getenv("CUDAFD_SIM_SYNCPOINT_START");
    return env && *env ? (uint32_t)strtoull(env, NULL, 0) : 0;
}

static struct syncpoint *point(uint32_t id)
{
    return id >= SYNCPOINT_BASE && id - SYNCPOINT_BASE < npoints ? &points[id - SYNCPOINT_BASE] : NULL;
}

static void wake(int fd)
{
    uint64_t one = 1;
    while (write(fd, &one, sizeof one) < 0 && errno == EINTR)
        ;
}

/* Take the entry at *link out of the armed list; a sync_file's is signalled
 * (or, closed by its caller, freed): the fake closes its end. */
static void unarm_locked(struct armed **link)
{
    struct armed *a = *link;
    *link = a->next;
    if (!a->pfd)
        close(a->own);
    free(a);
}

/* Fire what has passed on syncpoint id. */
static void fire_locked(uint32_t id)
{
    struct syncpoint *p = point(id);
    if (!p || sim_syncfd_fails("poll"))
        return;
    for (struct armed **link = &armed; *link;) {
        struct armed *a = *link;
        if (a->syncpoint == id && cfd_syncpt_passed(p->value, a->thr)) {
            if (a->pfd)
                wake(a->pfd->own);
            unarm_locked(link);
        } else {
            link = &a->next;
        }
    }
}

void sim_syncpoint_incr_locked(uint32_t id)
{
    struct syncpoint *p = point(id);
    if (!p)
        return;
    p->value++;
    fire_locked(id);
}

/* ---- NvSciSync ---- */

SIM_API NvSciError NvSciSyncModuleOpen(NvSciSyncModule *module)
{
    if (!module)
        return FAKE_ERROR;
    if (sim_syncfd_fails("module"))
        return FAKE_ERROR;
    struct fake_module *m = calloc(1, sizeof *m);
    if (!m)
        return FAKE_ERROR;
    m->magic = MODULE_MAGIC;
    *module = (NvSciSyncModule)m;
    return NvSciError_Success;
}

SIM_API void NvSciSyncModuleClose(NvSciSyncModule module) { free(module); }

SIM_API NvSciError NvSciSyncAttrListCreate(NvSciSyncModule module, NvSciSyncAttrList *list)
{
    struct fake_module *m = (struct fake_module *)module;
    if (!m || m->magic != MODULE_MAGIC || !list)
        return FAKE_ERROR;
    struct fake_list *l = calloc(1, sizeof *l);
    if (!l)
        return FAKE_ERROR;
    l->magic = LIST_MAGIC;
    *list = (NvSciSyncAttrList)l;
    return NvSciError_Success;
}

SIM_API void NvSciSyncAttrListFree(NvSciSyncAttrList list)
{
    struct fake_list *l = (struct fake_list *)list;
    if (l && l->magic == LIST_MAGIC) {
        l->magic = 0;
        free(l);
    }
}

SIM_API NvSciError NvSciSyncAttrListSetAttrs(NvSciSyncAttrList list, const NvSciSyncAttrKeyValuePair *pairs,
                                             size_t count)
{
    struct fake_list *l = (struct fake_list *)list;
    if (!l || l->magic != LIST_MAGIC || l->reconciled || !pairs)
        return FAKE_ERROR;
    for (size_t i = 0; i < count; i++) {
        const NvSciSyncAttrKeyValuePair *p = &pairs[i];
        if (!p->value)
            return FAKE_ERROR;
        if (p->attrKey == NvSciSyncAttrKey_NeedCpuAccess && p->len == sizeof(bool))
            l->cpu = *(const bool *)p->value;
        else if (p->attrKey == NvSciSyncAttrKey_RequiredPerm && p->len == sizeof(uint64_t))
            l->waiter = (*(const uint64_t *)p->value & NvSciSyncAccessPerm_WaitOnly) != 0;
        else if (p->attrKey == NvSciSyncAttrKey_PrimitiveInfo && p->len >= sizeof(int))
            l->primitive = *(const int *)p->value;
        else
            return FAKE_ERROR;
    }
    return NvSciError_Success;
}

SIM_API NvSciError NvSciSyncAttrListGetAttrs(NvSciSyncAttrList list, NvSciSyncAttrKeyValuePair *pairs, size_t count)
{
    struct fake_list *l = (struct fake_list *)list;
    if (!l || l->magic != LIST_MAGIC || !pairs)
        return FAKE_ERROR;
    for (size_t i = 0; i < count; i++) {
        if (pairs[i].attrKey == NvSciSyncAttrKey_PrimitiveInfo) {
            pairs[i].value = &l->primitive;
            pairs[i].len = sizeof l->primitive;
        } else if (pairs[i].attrKey == NvSciSyncAttrKey_NeedCpuAccess) {
            pairs[i].value = &l->cpu;
            pairs[i].len = sizeof l->cpu;
        } else {
            pairs[i].value = NULL;
            pairs[i].len = 0;
        }
    }
    return NvSciError_Success;
}

SIM_API NvSciError NvSciSyncAttrListReconcile(const NvSciSyncAttrList inputs[], size_t count,
                                              NvSciSyncAttrList *reconciled, NvSciSyncAttrList *conflicts)
{
    if (!inputs || !reconciled)
        return FAKE_ERROR;
    if (conflicts)
        *conflicts = NULL;
    bool signaler = false, waiter = false, cpu = false;
    int asked = 0;
    for (size_t i = 0; i < count; i++) {
        const struct fake_list *l = (const struct fake_list *)inputs[i];
        if (!l || l->magic != LIST_MAGIC || l->reconciled)
            return FAKE_ERROR;
        signaler |= l->signaler;
        waiter |= l->waiter;
        cpu |= l->cpu;
        if (l->primitive)
            asked = l->primitive;
    }
    if (!signaler || !waiter || sim_syncfd_fails("reconcile"))
        return FAKE_ERROR;
    if (asked && asked != NvSciSyncAttrValPrimitiveType_Syncpoint)
        return FAKE_ERROR;
    struct fake_list *r = calloc(1, sizeof *r);
    if (!r)
        return FAKE_ERROR;
    r->magic = LIST_MAGIC;
    r->reconciled = true;
    r->cpu = cpu;
    r->primitive = sim_syncfd_fails("syncpoint") ? NvSciSyncAttrValPrimitiveType_SysmemSemaphore
                                                 : NvSciSyncAttrValPrimitiveType_Syncpoint;
    *reconciled = (NvSciSyncAttrList)r;
    return NvSciError_Success;
}

SIM_API NvSciError NvSciSyncObjAlloc(NvSciSyncAttrList reconciled, NvSciSyncObj *obj)
{
    struct fake_list *l = (struct fake_list *)reconciled;
    if (!l || l->magic != LIST_MAGIC || !l->reconciled || !obj)
        return FAKE_ERROR;
    struct fake_obj *o = calloc(1, sizeof *o);
    if (!o)
        return FAKE_ERROR;
    pthread_mutex_lock(&sim.lock);
    if (npoints == cappoints) {
        uint32_t cap = cappoints ? 2 * cappoints : 16;
        struct syncpoint *grown = realloc(points, cap * sizeof *grown);
        if (!grown) {
            pthread_mutex_unlock(&sim.lock);
            free(o);
            return FAKE_ERROR;
        }
        points = grown;
        cappoints = cap;
    }
    uint32_t v = start_value();
    points[npoints] = (struct syncpoint){v, v};
    o->syncpoint = SYNCPOINT_BASE + npoints++;
    pthread_mutex_unlock(&sim.lock);
    o->magic = OBJ_MAGIC;
    *obj = (NvSciSyncObj)o;
    return NvSciError_Success;
}

SIM_API void NvSciSyncObjFree(NvSciSyncObj obj)
{
    struct fake_obj *o = (struct fake_obj *)obj;
    if (o && o->magic == OBJ_MAGIC) {
        o->magic = 0;
        free(o);
    }
}

SIM_API NvSciError NvSciSyncFenceExtractFence(const NvSciSyncFence *fence, uint64_t *id, uint64_t *value)
{
    if (!fence || !id || !value || fence->payload[0] != FENCE_MAGIC || sim_syncfd_fails("extract"))
        return FAKE_ERROR;
    *id = fence->payload[1];
    *value = fence->payload[2];
    return NvSciError_Success;
}

SIM_API void NvSciSyncFenceClear(NvSciSyncFence *fence)
{
    if (fence)
        memset(fence, 0, sizeof *fence);
}

/* ---- the driver's external semaphores ---- */

CUresult cuDeviceGetNvSciSyncAttributes(void *nvSciSyncAttrList, CUdevice dev, int flags)
{
    SIM_CHECK_INIT();
    struct fake_list *l = nvSciSyncAttrList;
    if (!l || l->magic != LIST_MAGIC || l->reconciled || !(flags & (CUDA_NVSCISYNC_ATTR_SIGNAL | CUDA_NVSCISYNC_ATTR_WAIT)))
        return CUDA_ERROR_INVALID_VALUE;
    if (dev < 0 || dev >= sim.ndev)
        return CUDA_ERROR_INVALID_DEVICE;
    if (sim_syncfd_fails("attributes"))
        return CUDA_ERROR_NOT_SUPPORTED;
    l->signaler |= (flags & CUDA_NVSCISYNC_ATTR_SIGNAL) != 0;
    l->waiter |= (flags & CUDA_NVSCISYNC_ATTR_WAIT) != 0;
    return CUDA_SUCCESS;
}

CUresult cuImportExternalSemaphore(CUexternalSemaphore *sem, const CUDA_EXTERNAL_SEMAPHORE_HANDLE_DESC *desc)
{
    SIM_CHECK_INIT();
    if (!sem || !desc || desc->type != CU_EXTERNAL_SEMAPHORE_HANDLE_TYPE_NVSCISYNC)
        return CUDA_ERROR_INVALID_VALUE;
    const struct fake_obj *o = desc->handle.nvSciSyncObj;
    if (!o || o->magic != OBJ_MAGIC)
        return CUDA_ERROR_INVALID_VALUE;
    if (sim_syncfd_fails("import"))
        return CUDA_ERROR_NOT_SUPPORTED;
    pthread_mutex_lock(&sim.lock);
    struct sim_ctx *c;
    CUresult rc = sim_ctx_current_usable_locked(&c);
    struct fake_sem *s = NULL;
    uint64_t h = 0;
    if (rc == CUDA_SUCCESS && !(s = calloc(1, sizeof *s)))
        rc = CUDA_ERROR_OUT_OF_MEMORY;
    if (rc == CUDA_SUCCESS) {
        s->syncpoint = o->syncpoint;
        s->ctx = c;
        if (!(h = sim_handle_new(SIM_T_EXTSEM, s))) {
            free(s);
            rc = CUDA_ERROR_OUT_OF_MEMORY;
        } else {
            c->refs++;
        }
    }
    pthread_mutex_unlock(&sim.lock);
    if (rc == CUDA_SUCCESS)
        *sem = (CUexternalSemaphore)(uintptr_t)h;
    return rc;
}

CUresult cuDestroyExternalSemaphore(CUexternalSemaphore sem)
{
    SIM_CHECK_INIT();
    pthread_mutex_lock(&sim.lock);
    struct fake_sem *s = sim_handle_get((uint64_t)(uintptr_t)sem, SIM_T_EXTSEM);
    CUresult rc = s ? CUDA_SUCCESS : CUDA_ERROR_INVALID_HANDLE;
    if (s && s->ctx->destroyed) {
        sim.n_dead_calls++;
        rc = CUDA_ERROR_INVALID_HANDLE;
    } else if (s) {
        const struct syncpoint *p = point(s->syncpoint);
        if (p && p->value != p->max)
            sim.n_busy_sem_destroys++;
        sim_handle_free((uint64_t)(uintptr_t)sem);
        sim_ctx_unref_locked(s->ctx);
        free(s);
    }
    pthread_mutex_unlock(&sim.lock);
    return rc;
}

CUresult cuSignalExternalSemaphoresAsync(const CUexternalSemaphore *sems,
                                                 const CUDA_EXTERNAL_SEMAPHORE_SIGNAL_PARAMS *params,
                                                 unsigned int count, CUstream stream)
{
    SIM_CHECK_INIT();
    if (!sems || !params)
        return CUDA_ERROR_INVALID_VALUE;
    pthread_mutex_lock(&sim.lock);
    struct sim_stream *st;
    CUresult rc = sim_stream_resolve_locked(stream, &st);
    if (rc == CUDA_SUCCESS)
        rc = sim_ctx_usable(st->ctx);
    if (rc == CUDA_SUCCESS && sim_syncfd_fails("signal"))
        rc = CUDA_ERROR_NOT_SUPPORTED;
    if (rc == CUDA_SUCCESS && fail_next_signal != CUDA_SUCCESS) {
        rc = fail_next_signal;
        fail_next_signal = CUDA_SUCCESS;
    }
    for (unsigned int i = 0; rc == CUDA_SUCCESS && i < count; i++) {
        struct fake_sem *s = sim_handle_get((uint64_t)(uintptr_t)sems[i], SIM_T_EXTSEM);
        NvSciSyncFence *fence = params[i].params.nvSciSync.fence;
        struct syncpoint *p = s ? point(s->syncpoint) : NULL;
        if (!p || s->ctx->destroyed) {
            rc = CUDA_ERROR_INVALID_HANDLE;
            break;
        }
        if (!fence) {
            rc = CUDA_ERROR_INVALID_VALUE;
            break;
        }
        struct sim_op *op = sim_op_new(SIM_OP_SIGNAL);
        if (!op) {
            rc = CUDA_ERROR_OUT_OF_MEMORY;
            break;
        }
        op->signal.syncpoint = s->syncpoint;
        uint32_t id = s->syncpoint;
        if ((rc = sim_enqueue_locked(st, op)) != CUDA_SUCCESS) {
            free(op);
            break;
        }
        p = point(id); /* (the table may have grown while the enqueue waited) */
        memset(fence, 0, sizeof *fence);
        fence->payload[0] = FENCE_MAGIC;
        fence->payload[1] = id;
        fence->payload[2] = ++p->max; /* queued in this order, so passed in this order */
    }
    pthread_mutex_unlock(&sim.lock);
    return rc;
}

/* ---- the host1x fence device ---- */

static bool is_devfd(int fd)
{
    for (int i = 0; i < ndevfds; i++)
        if (devfds[i] == fd)
            return true;
    return false;
}

static struct pollfd_rec *find_pollfd(int fd)
{
    for (struct pollfd_rec *p = pollfds; p; p = p->next)
        if (p->fd == fd)
            return p;
    return NULL;
}

SIM_API int cudafdsim_host1x_open(const char *path, int flags)
{
    (void)flags;
    if (!path || strcmp(path, CFD_HOST1X_DEVICE) != 0 || sim_syncfd_fails("device")) {
        errno = ENOENT;
        return -1;
    }
    int fd = eventfd(0, EFD_NONBLOCK | EFD_CLOEXEC); /* a real fd that never turns readable */
    if (fd < 0)
        return -1;
    pthread_mutex_lock(&sim.lock);
    bool room = ndevfds < (int)(sizeof devfds / sizeof devfds[0]);
    if (room)
        devfds[ndevfds++] = fd;
    pthread_mutex_unlock(&sim.lock);
    if (!room) {
        close(fd);
        errno = EMFILE;
        return -1;
    }
    return fd;
}

/* A new fd for the caller and a duplicate the fake keeps to write. */
static int fd_pair(int *own)
{
    int fd = eventfd(0, EFD_NONBLOCK | EFD_CLOEXEC);
    if (fd < 0)
        return -1;
    if ((*own = fcntl(fd, F_DUPFD_CLOEXEC, 0)) < 0) {
        int err = errno;
        close(fd);
        errno = err;
        return -1;
    }
    return fd;
}

static int fail_errno(int err)
{
    errno = err;
    return -1;
}

static uint64_t fence_timeout_ns;
static bool timer_started;
static pthread_cond_t timer_cv; /* CLOCK_MONOTONIC; signalled when a sync_file is made */

/* The timer thread: signals each sync_file at its timeout_at. Lives as long
 * as the process, as the simulator's other threads do. */
static void *timer_main(void *arg)
{
    (void)arg;
    pthread_setname_np(pthread_self(), "cudafd-sim-h1x");
    pthread_mutex_lock(&sim.lock);
    for (;;) {
        uint64_t now = sim_now_ns(), next = UINT64_MAX;
        for (struct armed **link = &armed; *link;) {
            struct armed *a = *link;
            if (!a->pfd && a->timeout_at <= now) {
                unarm_locked(link);
                continue;
            }
            if (!a->pfd && a->timeout_at < next)
                next = a->timeout_at;
            link = &a->next;
        }
        if (next == UINT64_MAX) {
            pthread_cond_wait(&timer_cv, &sim.lock);
        } else {
            struct timespec ts = {.tv_sec = (time_t)(next / 1000000000u), .tv_nsec = (long)(next % 1000000000u)};
            pthread_cond_timedwait(&timer_cv, &sim.lock, &ts);
        }
    }
    return NULL;
}

static int start_timer_locked(void)
{
    if (timer_started)
        return 0;
    const char *env = getenv("CUDAFD_SIM_FENCE_TIMEOUT_MS");
    long long ms = env && *env ? strtoll(env, NULL, 0) : 0;
    fence_timeout_ns = (uint64_t)(ms > 0 ? ms : 30000) * 1000000u;
    sim_cond_init_monotonic(&timer_cv);
    pthread_t t;
    int err = pthread_create(&t, NULL, timer_main, NULL);
    if (err)
        return fail_errno(err);
    pthread_detach(t);
    timer_started = true;
    return 0;
}

/* Free the sync_files whose every fd the caller closed (the fake's end
 * reports a hang-up), as the kernel frees a sync_file with its last fd. */
static void free_closed_locked(void)
{
    for (struct armed **link = &armed; *link;) {
        struct pollfd p = {.fd = (*link)->own, .events = 0, .revents = 0};
        if (!(*link)->pfd && poll(&p, 1, 0) == 1 && (p.revents & POLLHUP))
            unarm_locked(link);
        else
            link = &(*link)->next;
    }
}

static int create_fence_locked(struct cfd_host1x_create_fence *a)
{
    struct syncpoint *p = point(a->id);
    if (a->reserved[0] || !p)
        return fail_errno(EINVAL);
    if (sim_syncfd_fails("fence"))
        return fail_errno(ENODEV);
    if (fail_next_fence) {
        int err = fail_next_fence;
        fail_next_fence = 0;
        return fail_errno(err);
    }
    int sv[2];
    if (start_timer_locked() < 0 || socketpair(AF_UNIX, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0, sv) < 0)
        return -1;
    struct armed *w = calloc(1, sizeof *w);
    if (!w) {
        close(sv[0]);
        close(sv[1]);
        return fail_errno(ENOMEM);
    }
    *w = (struct armed){.syncpoint = a->id, .thr = a->threshold, .own = sv[1],
                        .timeout_at = sim_now_ns() + fence_timeout_ns, .pfd = NULL, .next = armed};
    armed = w;
    pthread_cond_signal(&timer_cv);
    fire_locked(a->id);
    a->fence_fd = sv[0];
    return 0;
}

static int create_pollfd_locked(struct cfd_host1x_create_pollfd *a)
{
    if (a->reserved[0])
        return fail_errno(EINVAL);
    if (sim_syncfd_fails("pollfd"))
        return fail_errno(ENODEV);
    struct pollfd_rec *p = calloc(1, sizeof *p);
    if (!p)
        return fail_errno(ENOMEM);
    if ((p->fd = fd_pair(&p->own)) < 0) {
        free(p);
        return -1;
    }
    p->next = pollfds;
    pollfds = p;
    a->fd = p->fd;
    return 0;
}

static int trigger_locked(struct cfd_host1x_trigger_pollfd *a)
{
    struct pollfd_rec *p = find_pollfd(a->fd);
    if (a->reserved[0] || !p || !point(a->id))
        return fail_errno(EINVAL);
    if (sim_syncfd_fails("trigger"))
        return fail_errno(ENODEV);
    struct armed *w = calloc(1, sizeof *w);
    if (!w)
        return fail_errno(ENOMEM);
    *w = (struct armed){.syncpoint = a->id, .thr = a->threshold, .own = -1, .pfd = p, .next = armed};
    armed = w;
    fire_locked(a->id);
    return 0;
}

SIM_API int cudafdsim_host1x_ioctl(int fd, unsigned long request, void *arg)
{
    if (!arg)
        return fail_errno(EFAULT);
    pthread_mutex_lock(&sim.lock);
    free_closed_locked();
    int rc;
    if (!is_devfd(fd))
        rc = fail_errno(ENOTTY);
    else if (request == CFD_HOST1X_IOCTL_CREATE_FENCE)
        rc = create_fence_locked(arg);
    else if (request == CFD_HOST1X_IOCTL_CREATE_POLLFD)
        rc = create_pollfd_locked(arg);
    else if (request == CFD_HOST1X_IOCTL_TRIGGER_POLLFD)
        rc = trigger_locked(arg);
    else
        rc = fail_errno(ENOTTY);
    int err = errno;
    pthread_mutex_unlock(&sim.lock);
    errno = err;
    return rc;
}

SIM_API int cudafdsim_host1x_close(int fd)
{
    pthread_mutex_lock(&sim.lock);
    for (int i = 0; i < ndevfds; i++) {
        if (devfds[i] == fd) {
            devfds[i] = devfds[--ndevfds];
            break;
        }
    }
    for (struct pollfd_rec **link = &pollfds; *link; link = &(*link)->next) {
        struct pollfd_rec *p = *link;
        if (p->fd != fd)
            continue;
        *link = p->next;
        for (struct armed **al = &armed; *al;) { /* what was armed on it goes with it */
            struct armed *a = *al;
            if (a->pfd == p) {
                *al = a->next;
                free(a);
            } else {
                al = &a->next;
            }
        }
        close(p->own);
        free(p);
        break;
    }
    int rc = close(fd), err = errno;
    free_closed_locked(); /* a sync_file's, if that was its last fd */
    pthread_mutex_unlock(&sim.lock);
    errno = err;
    return rc;
}

SIM_API void cudafdsim_host1x_ack(int pollfd)
{
    uint64_t value;
    while (read(pollfd, &value, sizeof value) < 0 && errno == EINTR)
        ;
}
