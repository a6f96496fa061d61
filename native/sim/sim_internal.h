/*
 * sim_internal.h - the simulator's objects, global state and internal calls.
 *
 * Facts the simulator is built on:
 *  - One global mutex (sim.lock) guards every object, list and counter. Every
 *    function named *_locked expects it held. Blocking calls sleep on a
 *    per-object condition variable under it and re-check state on waking.
 *  - Handles given out to callers are opaque ids from the registry in
 *    sim_handles.c, never pointers: a destroyed or made-up handle is refused
 *    with the driver's error code instead of being dereferenced.
 *  - Objects are reference counted (plain ints, under the lock). Whoever may
 *    touch an object after dropping the lock holds a reference: the registry,
 *    a context's lists, a stream's queue, an event's latest record, a thread
 *    blocked in a synchronisation, the callback queue.
 *  - Two threads, started on first use, stand for the device: the scheduler
 *    (sim_sched.c) advances streams; the callback thread runs host functions.
 */
#ifndef CUDAFD_SIM_INTERNAL_H
#define CUDAFD_SIM_INTERNAL_H

#include <pthread.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "../cuda_abi.h"
#pragma GCC visibility push(default)
#include "cudafd_sim.h"
#pragma GCC visibility pop

#define SIM_API __attribute__((visibility("default")))

_Static_assert(sizeof(void *) == 8, "handles are 64-bit ids carried in pointer types");

#define SIM_MAX_DEVICES   64
#define SIM_DEFAULT_DEVICES 2
#define SIM_DEFAULT_DRIVER_VERSION 13000
#define SIM_CTX_STACK_MAX 64 /* depth of a thread's current-context stack */

/* ---- exported entry points (prototypes checked against the definitions) ---- */
/* Entry points whose ABI changed in an early CUDA release are compiled under
 * their versioned export names, as cuda.h maps them for its callers: the
 * definitions below `cuCtxPushCurrent` are cuCtxPushCurrent_v2, the one that
 * cuGetProcAddress serves from its version on. The plain names are the
 * legacy exports (sim_legacy.c), reached by dlsym of the plain name or a
 * lookup for an older version. SIM_VERSIONED(X): X(name, since, params). */
#define SIM_VERSIONED(X)                                                        \
    X(cuCtxCreate, 3020, (CUcontext * ctx, unsigned int flags, CUdevice dev))   \
    X(cuCtxDestroy, 4000, (CUcontext ctx))                                      \
    X(cuCtxPushCurrent, 4000, (CUcontext ctx))                                  \
    X(cuCtxPopCurrent, 4000, (CUcontext * ctx))                                 \
    X(cuStreamDestroy, 4000, (CUstream stream))                                 \
    X(cuEventDestroy, 4000, (CUevent event))                                    \
    X(cuDevicePrimaryCtxRelease, 11000, (CUdevice dev))
#define cuCtxCreate cuCtxCreate_v2
#define cuCtxDestroy cuCtxDestroy_v2
#define cuCtxPushCurrent cuCtxPushCurrent_v2
#define cuCtxPopCurrent cuCtxPopCurrent_v2
#define cuStreamDestroy cuStreamDestroy_v2
#define cuEventDestroy cuEventDestroy_v2
#define cuDevicePrimaryCtxRelease cuDevicePrimaryCtxRelease_v2
#define SIM_DECLARE(name, params) SIM_API CUresult name params;
CUDAFD_DRIVER_ENTRY_POINTS(SIM_DECLARE)
#undef SIM_DECLARE
SIM_API CUresult cuGetProcAddress(const char *symbol, void **pfn, int cudaVersion, uint64_t flags);
SIM_API CUresult cuGetProcAddress_v2(const char *symbol, void **pfn, int cudaVersion,
                                     uint64_t flags, CUdriverProcAddressQueryResult *status);
SIM_API CUresult cuDeviceGetName(char *name, int len, CUdevice dev);
SIM_API CUresult cuDeviceGetAttribute(int *value, int attrib, CUdevice dev);
SIM_API CUresult cuDevicePrimaryCtxRetain(CUcontext *ctx, CUdevice dev);
SIM_API CUresult cuDevicePrimaryCtxGetState(CUdevice dev, unsigned int *flags, int *active);
SIM_API CUresult cuDevicePrimaryCtxRelease(CUdevice dev);
SIM_API CUresult cuCtxCreate(CUcontext *ctx, unsigned int flags, CUdevice dev);
SIM_API CUresult cuCtxDestroy(CUcontext ctx);
SIM_API CUresult cuCtxSynchronize(void);
SIM_API CUresult cuStreamSynchronize(CUstream stream);
SIM_API CUresult cuStreamGetId(CUstream stream, unsigned long long *id);
SIM_API CUresult cuCtxGetId(CUcontext ctx, unsigned long long *id);
SIM_API CUresult cuModuleLoadData(CUmodule *module, const void *image);
SIM_API CUresult cuModuleGetFunction(CUfunction *fn, CUmodule module, const char *name);
SIM_API CUresult cuModuleUnload(CUmodule module);
/* The external-semaphore entry points (sim_nvsci.c) are not exported: only
 * cuGetProcAddress serves them, so $CUDAFD_SIM_SYNCFD_FAIL=driver can make
 * them absent, as they are from drivers without NvSciSync interop. */
CUresult cuDeviceGetNvSciSyncAttributes(void *nvSciSyncAttrList, CUdevice dev, int flags);
CUresult cuImportExternalSemaphore(CUexternalSemaphore *sem, const CUDA_EXTERNAL_SEMAPHORE_HANDLE_DESC *desc);
CUresult cuSignalExternalSemaphoresAsync(const CUexternalSemaphore *sems,
                                         const CUDA_EXTERNAL_SEMAPHORE_SIGNAL_PARAMS *params,
                                         unsigned int count, CUstream stream);
CUresult cuDestroyExternalSemaphore(CUexternalSemaphore sem);
SIM_API CUresult cuLaunchKernel(CUfunction f, unsigned int gridDimX, unsigned int gridDimY,
                                unsigned int gridDimZ, unsigned int blockDimX,
                                unsigned int blockDimY, unsigned int blockDimZ,
                                unsigned int sharedMemBytes, CUstream stream,
                                void **kernelParams, void **extra);

/* ---- objects ---- */
enum sim_type { SIM_T_CTX = 1, SIM_T_STREAM, SIM_T_EVENT, SIM_T_MODULE, SIM_T_FUNC, SIM_T_EXTSEM };

enum sim_op_kind { SIM_OP_KERNEL, SIM_OP_RECORD, SIM_OP_WAIT, SIM_OP_HOST, SIM_OP_SIGNAL };
enum sim_host_state { SIM_HOST_QUEUED, SIM_HOST_DISPATCHED, SIM_HOST_RUNNING, SIM_HOST_RETURNED };

struct sim_event;

/* One operation in a stream's queue. A record op doubles as the record
 * itself: the event's `last` and later wait ops keep it alive after it has
 * left the queue, so `done` stays readable. */
struct sim_op {
    int refs;
    enum sim_op_kind kind;
    bool done;      /* record: the stream reached it */
    bool dropped;   /* removed unexecuted (fault, context destroyed) */
    bool notify;    /* a host notification: counted in its context's `notify` while queued */
    struct sim_op *next;    /* stream queue */
    struct sim_op *cb_next; /* callback queue */
    uint64_t enq_ns;
    union {
        struct { uint64_t ns, end_ns; CUresult fault; } kernel;
        struct { struct sim_event *ev; } record; /* reference while queued */
        struct { struct sim_op *rec; } wait;     /* the record waited for */
        struct { CUhostFn fn; void *data; enum sim_host_state state; } host;
        struct { uint32_t syncpoint; } signal; /* an NvSciSync semaphore's signal (sim_nvsci.c) */
    };
};

struct sim_stream {
    int refs;
    uint64_t handle;          /* registry id of a live user stream, else 0 */
    uint64_t id;              /* cuStreamGetId: unique for the process's life, from 1 */
    struct sim_ctx *ctx;      /* referenced */
    unsigned int flags;
    bool user;                /* created by cuStreamCreate (counted in stats) */
    bool destroyed;           /* handle released; may still drain its queue */
    uint64_t owner_tid;       /* per-thread default streams: the owning thread */
    struct sim_op *head, *tail;
    uint64_t enq_count, done_count; /* ops ever enqueued / ever completed */
    uint64_t head_ready_ns;   /* when the current head op became the head */
    int waiters;              /* threads in cuStreamSynchronize */
    pthread_cond_t cv;
    struct sim_stream *ctx_prev, *ctx_next; /* context's stream list (holds a ref) */
    struct sim_stream *ptds_next;           /* context's per-thread stream list */
    struct sim_stream *act_prev, *act_next; /* scheduler's active list */
    bool active;
};

struct sim_event {
    int refs;
    uint64_t handle;
    struct sim_ctx *ctx;      /* referenced */
    unsigned int flags;
    bool destroyed;
    struct sim_op *last;      /* latest record (referenced), NULL if never recorded */
    int waiters;              /* threads in cuEventSynchronize */
    pthread_cond_t cv;
    struct sim_event *ctx_prev, *ctx_next; /* context's event list (holds a ref) */
};

struct sim_ctx {
    int refs;
    uint64_t handle;
    uint64_t id;              /* cuCtxGetId: unique for the process's life, from 1 */
    CUdevice dev;
    bool primary;
    bool destroyed;
    CUresult fault;           /* sticky, 0 while healthy */
    uint64_t fault_at;        /* sim_now_ns() when it faulted */
    int64_t queued;           /* ops queued on all of its streams */
    int notify;               /* host notifications queued (CUDAFDSIM_NOTIFY_MAX) */
    int notify_blocked;       /* threads waiting to add one: every enqueue waits behind them */
    int64_t streams_made;     /* by cuStreamCreate (CUDAFDSIM_STREAM_BLOCK) */
    int create_blocked;       /* threads in a cuStreamCreate that waits for the context to drain */
    int waiters;              /* threads in cuCtxSynchronize */
    pthread_cond_t cv;
    struct sim_stream *default_stream;
    struct sim_stream *ptds;  /* per-thread default streams, created on first use */
    struct sim_stream *streams;
    struct sim_event *events;
    struct sim_ctx *live_prev, *live_next; /* sim.live: every context not destroyed */
};

struct sim_device {
    struct sim_ctx *primary; /* NULL while not retained */
    int primary_refs;
    uint64_t primary_handle; /* every primary context of the device has this handle (0: none made yet) */
};

struct sim_global {
    pthread_mutex_t lock;
    int ndev;
    uint64_t late_fault_ns; /* $CUDAFD_SIM_LATE_FAULT_MS: see cuEventSynchronize */
    bool fault_one_ctx;     /* $CUDAFD_SIM_FAULT_SCOPE=context: see sim_fault_all_locked */
    struct sim_device dev[SIM_MAX_DEVICES];
    struct sim_ctx *live; /* every context not destroyed */
    /* scheduler: the streams with queued work */
    pthread_cond_t sched_cv; /* CLOCK_MONOTONIC */
    bool sched_started;
    struct sim_stream *active;
    pthread_cond_t notify_cv; /* a host notification retired, or a context faulted or went */
    /* callback thread: host functions handed over by the scheduler */
    pthread_cond_t cb_cv;
    bool cb_started;
    struct sim_op *cb_head, *cb_tail;
    uint64_t stream_ids; /* the last stream id given out */
    uint64_t ctx_ids;    /* the last context id given out */
    /* statistics */
    int64_t n_ctx, n_streams, n_events, n_queued, n_hostfns, n_kernels;
    int64_t n_busy_sem_destroys; /* external semaphores destroyed with a signal not yet run (sim_nvsci.c) */
    int64_t n_dead_calls; /* calls given a dead event: destroyed, or gone with its context (sim_event_lookup_locked); destroys of a dead external semaphore */
};

extern struct sim_global sim;
extern atomic_int sim_initialized;
extern atomic_bool sim_forked; /* this process is a fork() child of one that used the simulator */

#define SIM_CHECK_INIT()                                                           \
    do {                                                                           \
        if (!atomic_load_explicit(&sim_initialized, memory_order_acquire))         \
            return CUDA_ERROR_NOT_INITIALIZED;                                     \
    } while (0)

/* ---- sim_api.c ---- */
CUresult sim_init(void); /* what cuInit does; idempotent */
int sim_driver_version(void); /* what cuDriverGetVersion reports ($CUDAFD_SIM_DRIVER_VERSION) */
/* ---- sim_legacy.c ---- */
void *sim_legacy_entry(const char *name); /* the legacy export of a SIM_VERSIONED name, else NULL */
uint64_t sim_now_ns(void); /* CLOCK_MONOTONIC */
void sim_sleep_ns(uint64_t ns); /* the whole time, signals or not */

/* ---- sim_handles.c ---- */
uint64_t sim_handle_new(enum sim_type type, void *obj); /* 0 when out of memory */
void *sim_handle_get(uint64_t handle, enum sim_type type);
void sim_handle_free(uint64_t handle);
bool sim_handle_was(uint64_t handle, enum sim_type type); /* a released handle of that type */
void sim_handle_park(uint64_t handle); /* keep a handle while its object is gone (a primary context) */
void sim_handle_revive(uint64_t handle, void *obj); /* a parked handle's new object */

/* ---- sim_device.c ---- */
uint64_t sim_thread_id(void);
CUresult sim_ctx_lookup_locked(CUcontext h, struct sim_ctx **out);
CUresult sim_ctx_current_locked(struct sim_ctx **out);
CUresult sim_ctx_usable(const struct sim_ctx *c); /* destroyed / fault / success */
/* The current context, if it is usable (else why not). sim.lock held. */
CUresult sim_ctx_current_usable_locked(struct sim_ctx **c);
void sim_ctx_fault_locked(struct sim_ctx *c, CUresult fault);
void sim_fault_all_locked(struct sim_ctx *c, CUresult fault); /* a faulting kernel in c: every live context */
void sim_ctx_unref_locked(struct sim_ctx *c);

/* ---- sim_stream.c ---- */
struct sim_stream *sim_stream_new_locked(struct sim_ctx *ctx, unsigned int flags);
void sim_stream_unref_locked(struct sim_stream *s);
void sim_stream_kill_locked(struct sim_stream *s);  /* context destroyed: drop, free */
void sim_stream_fault_locked(struct sim_stream *s); /* context faulted: drop queue */
CUresult sim_stream_resolve_locked(CUstream h, struct sim_stream **out);
struct sim_op *sim_op_new(enum sim_op_kind kind);
void sim_op_unref_locked(struct sim_op *op);
CUresult sim_enqueue_locked(struct sim_stream *s, struct sim_op *op);
bool sim_stream_pop_locked(struct sim_stream *s, uint64_t ready_ns); /* false: s was freed */
CUresult sim_launch_locked(struct sim_stream *s, uint64_t ns, CUresult fault);

/* ---- sim_event.c ---- */
void sim_event_kill_locked(struct sim_event *e);
struct sim_event *sim_event_lookup_locked(CUevent h); /* NULL: not a live event */
void sim_event_unref_locked(struct sim_event *e);
void sim_record_complete_locked(struct sim_op *rec);

/* ---- sim_nvsci.c: the fake NvSciSync library and host1x fence device ---- */
void sim_syncpoint_incr_locked(uint32_t id); /* a signal op ran: the syncpoint counts one more */
bool sim_syncfd_fails(const char *step);      /* $CUDAFD_SIM_SYNCFD_FAIL names this step */

/* ---- sim_sched.c ---- */
CUresult sim_sched_start_locked(void);
CUresult sim_callbacks_start_locked(void);
void sim_sched_kick_locked(void);
void sim_callback_submit_locked(struct sim_op *op);
void sim_cond_init_monotonic(pthread_cond_t *cv);

#endif /* CUDAFD_SIM_INTERNAL_H */
