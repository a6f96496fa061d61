/*
 * internal.h - shared state of the native core.
 *
 * Locking: one process-wide mutex, g.mu, guards waits, lanes, context records,
 * thread bookkeeping and every notifier's list of attached waits. Each
 * notifier's completion queue has its own mutex (n->mu), always taken inside
 * g.mu when both are held. No driver call is made with n->mu held; driver calls
 * under g.mu are limited to cuEventDestroy/cuStreamDestroy on the rare paths
 * that retire resources.
 *
 * Nothing in this library calls into Python or any caller-supplied code: the
 * only way out is a completion queued on a notifier and a write to its eventfd.
 */
#ifndef CUDAFD_INTERNAL_H
#define CUDAFD_INTERNAL_H

#include <pthread.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "../../include/cudafd.h"
#include "../cuda_abi.h"
#include "syncfd.h"

#define CFD_API __attribute__((visibility("default")))

/* ---- driver entry points (driver.c) ---- */
struct cfd_driver {
#define CFD_DECLARE_ENTRY(name, params) CUresult(*name) params;
    CUDAFD_DRIVER_ENTRY_POINTS(CFD_DECLARE_ENTRY)
    CUDAFD_DRIVER_OPTIONAL_ENTRY_POINTS(CFD_DECLARE_ENTRY) /* NULL where the driver lacks them */
#undef CFD_DECLARE_ENTRY
};
extern struct cfd_driver cu;

int cfd_driver_ready(void); /* loads on first use; CUDAFD_OK or an error code */
void cfd_driver_fork_prepare(void); /* fork.c: the load lock held across a fork() */
void cfd_driver_fork_done(void);
int cfd_fail(int code, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
int cfd_fail_cuda(CUresult r, const char *what);
int cfd_inherited_error(void); /* CUDAFD_E_STATE: a notifier made before a fork(), used in the child */
int cfd_closed_error(void);    /* CUDAFD_E_CLOSED: the notifier is closed */

/* Make ctx current on this thread if it is not (watch.c); *pushed: pop it
 * after with cfd_leave_ctx. Fails with the driver's error. */
int cfd_enter_ctx(CUcontext ctx, bool *pushed);
void cfd_leave_ctx(bool pushed);

/* ---- time and pausing ---- */
int64_t cfd_now_ns(void);
static inline void cfd_cpu_relax(void)
{
#if defined(__x86_64__) || defined(__i386__)
    __builtin_ia32_pause();
#elif defined(__aarch64__)
    __asm__ __volatile__("yield");
#endif
}

/* ---- per-context records (contexts.c) ---- */
#define CFD_SIDE_MAX 32
typedef struct cfd_side_key { /* a caller's stream or event with waits in flight on a side stream */
    uintptr_t key;
    int side, inflight;
} cfd_side_key;
typedef struct cfd_side_pool {
    CUstream stream[CFD_SIDE_MAX]; /* made when needed, or all at a hostfunc watch's first use (contexts.c) */
    int busy[CFD_SIDE_MAX];        /* holders of each */
    bool stale[CFD_SIDE_MAX];      /* a holder let go of it not known past its point: it may still wait there */
    uint64_t asked[CFD_SIDE_MAX];  /* the watchdog's last round that queried an unfired wait on it (hostfunc.c) */
    cfd_side_key *keys;            /* which stream each key in flight uses */
    int nkeys, capkeys;
    bool filled;  /* made (or tried) all at once: cfd_side_fill_locked */
    bool filling; /* a thread makes them now; others wait (g.fill_cv) */
    bool kept;    /* kept past the last notifier's close: checked once at the next use (contexts.c) */
} cfd_side_pool;
typedef struct cfd_ctx {
    CUcontext ctx;
    struct cfd_ctx *next;
    CUevent *pool; /* free events, all CU_EVENT_DISABLE_TIMING (not blocking-sync: contexts.c) */
    int npool, cappool;
    cfd_side_pool side;   /* waits on side streams: hostfunc points, waits on a caller's event */
    int nwaits;                      /* waits referring to this record */
    int syncrecs;                    /* syncfd records of the context (syncfd.c, atomic): they keep this record */
    int64_t fault;                   /* the first sticky error seen in this context */
    int8_t primary; /* 0 not known yet, 1 being found out, 2 a reference held on pdev's primary context, 3 none */
    CUdevice pdev;
} cfd_ctx;

cfd_ctx *cfd_ctx_get(CUcontext ctx);              /* g.mu held; NULL on OOM */
void cfd_ctx_hold_primary_locked(cfd_ctx *cx);    /* g.mu held (released meanwhile), cx->ctx current */
CUevent cfd_ctx_take_event(cfd_ctx *cx);          /* g.mu held; NULL if pool empty */
void cfd_ctx_give_event(cfd_ctx *cx, CUevent ev); /* g.mu held; the event is idle */
void cfd_ctx_release(cfd_ctx *cx);                /* g.mu held; drops one nwaits */
void cfd_quiesce_locked(void);                    /* g.mu held: retire idle pools if nothing is open (side streams stay) */
void cfd_retire_side_streams_locked(void);        /* g.mu held: every idle side stream goes */
/* g.mu held, notifiers open: the records no wait refers to go, with their
 * events, side streams and primary-context references (not while probing). */
void cfd_release_unused_locked(void);
void cfd_probe_begin(void);                       /* g.mu held: keep events and records alive while unlocked */
void cfd_probe_end(void);                         /* g.mu held: ends a probe, retires what it kept alive */
int cfd_event_create(CUevent *ev);                /* plain (contexts.c); counted; caller's context current */
/* A side stream for one wait on `key` (a caller's stream or event), held until
 * cfd_side_release: the one the key's waits in flight use (so they stay in
 * order), else an idle one that is not stale, else a new one (up to
 * CFD_SIDE_MAX; an idle stale one is destroyed and made again), else the
 * least busy. `fill`: if the pool has not been, make all CFD_SIDE_MAX now
 * (why: contexts.c). cx->ctx current. */
int cfd_side_stream(cfd_side_pool *p, uintptr_t key, bool fill, CUstream *out, int *index);
/* g.mu held. `passed`: the stream is known to be past what this holder
 * queued on it (its wait's event found complete or faulted, or nothing of it
 * was queued there); else the slot is marked stale. */
void cfd_side_release(cfd_side_pool *p, uintptr_t key, int index, bool passed);
/* Make the pool's first `count` streams now, those not made yet, and mark it
 * filled; if another thread is filling it, wait for that instead. g.mu held
 * (released while the driver makes them), cx->ctx current. */
void cfd_side_fill_locked(cfd_side_pool *p, int count);
void cfd_event_destroy(CUevent ev);

/* ---- waits and lanes (waits.c) ---- */
typedef struct cfd_wait {
    uint64_t token; /* slot | generation << 22 (waits.c); the slot alone when free */
    struct cudafd_notifier *n;   /* NULL once detached */
    struct cfd_wait *nprev, *nnext; /* in the notifier's attached list */
    struct cfd_wait *next;          /* in the lane, the hostfunc list or the free list */
    struct cfd_wait *hprev;         /* in the hostfunc list */
    struct cfd_wait *dprev, *dnext; /* in the hostfunc launches put off (g.hf_defer_head) */
    struct cfd_lane *lane;
    cfd_ctx *cx;
    CUevent ev;   /* what is waited on */
    bool owns_ev; /* ev came from the pool */
    uint8_t mech;
    bool launched;       /* hostfunc: its host function is launched (holds a notification, cfd_notify_take) */
    bool side_wait_due;  /* hostfunc, put off: its side stream waits for ev only at the launch */
    bool fired;          /* hostfunc: its host function ran; the watchdog confirms ev before success */
    bool delivered;      /* its result was pushed to its notifier (a fault sweep may do so early) */
    bool over;           /* an ask found its event complete or faulted (cfd_wait_take) */
    bool dropped;        /* let go of before its end (cfd_wait_drop): the poller takes it out of its lane */
    int8_t side;         /* the side stream it holds (cfd_side_stream, cx->side), or -1 */
    uintptr_t side_key;  /* the key it holds it for */
    cfd_syncpt sp;  /* syncfd: its point (sp.rec held through cfd_syncfd_hold_locked), else sp.rec NULL */
    int64_t t0;     /* when it was watched */
    int64_t budget; /* its notifier's max_lateness_ns at the watch */
} cfd_wait;

/* The waits of one stream in watch order (the poller asks only the head). */
typedef struct cfd_lane {
    /* key */
    CUcontext ctx;
    uintptr_t stream;
    uint64_t thread; /* per-thread default stream: the recording thread; else 0 */
    uint8_t mech;
    /* state (the poller's while active) */
    struct cfd_lane *hnext;         /* hash chain */
    struct cfd_lane *lprev, *lnext; /* in the poller's active list */
    cfd_wait *head, *tail;
    bool active;       /* handed to the poller */
    bool sync_due;     /* syncfd: ask host1x about its head in the next round */
    int64_t since;     /* when the current head became head */
    int64_t next_poll; /* when the poller asks it next */
    int64_t step;      /* the interval that planned next_poll (0: ask at once) */
    int64_t budget;    /* the smallest max_lateness of the waits it held since it was last empty */
} cfd_lane;

/* The lane kind of a spin notifier's waits while its caller asks about them
 * itself (ask.c): the poller asks such lanes only as a backstop (waiters.c). */
#define CFD_LANE_ASKED 16
int cfd_lane_kind(const struct cudafd_notifier *n); /* the lane key's mech for n's new waits; g.mu held */

cfd_wait *cfd_wait_lookup(uint64_t token); /* g.mu held */
/* Deliver the result of w, unlink it from its notifier and free it. g.mu held.
 * passed: its side stream, if it holds one, is known to be past w's point
 * (cfd_side_release). from_hostfn: running on the driver's callback thread,
 * where no driver call is allowed (idle events are parked rather than
 * destroyed). */
void cfd_wait_complete(cfd_wait *w, int64_t status, bool passed, bool from_hostfn);
/* Hand w's result to the caller that asked (ask.c) instead of its notifier's
 * queue: counted and detached as if drained, left in its lane for the poller
 * to pop; a sticky status dooms the context's other waits too. False if w
 * was detached already. g.mu held. */
bool cfd_wait_take(cfd_wait *w, int64_t status);
/* Complete the head; CUDA_ERROR_NOT_READY: its event was not found complete
 * (its side stream is then not known past it, unless an ask found it so). g.mu held. */
void cfd_lane_pop(cfd_lane *l, int64_t status);
/* A driver error seen in cx: if sticky, report it to every wait of cx. g.mu held. */
void cfd_note_fault(cfd_ctx *cx, int64_t status);
void cfd_lane_free(cfd_lane *l);                /* an empty lane nobody holds; g.mu held */
/* Record a pooled event at the stream's end; the stream's context current (contexts.c). */
int cfd_record(cfd_ctx *cx, CUstream stream, CUevent taken, CUevent *out);
cfd_wait *cfd_wait_new(struct cudafd_notifier *n, cfd_ctx *cx, CUevent ev); /* g.mu held; attached */
/* Undo cfd_wait_new before it was published; passed: as for cfd_wait_complete. g.mu held. */
void cfd_wait_discard(cfd_wait *w, bool passed);
void cfd_wait_detach(cfd_wait *w);  /* from its notifier: it will not be reported; g.mu held */
/* Its caller let go of w before its end (cancelled, its notifier closed):
 * detached, and, if it is in a lane, marked for the poller to take out at
 * its next round rather than ask about until the work ends (waiters.c).
 * g.mu held. */
void cfd_wait_drop(cfd_wait *w);
/* The same for every wait left in a lane whose result nobody will take again
 * (taken by an ask, or delivered early by a fault sweep): the poller would
 * otherwise pop them only at its next ask of their lane, which may come after
 * the caller destroyed their context (cudafd_release_idle). g.mu held. */
void cfd_drop_detached_locked(void);
/* The lane of (ctx, stream, thread, mech), created empty if new; NULL when out of memory. g.mu held. */
cfd_lane *cfd_lane_get(CUcontext ctx, uintptr_t stream, uint64_t thread, int mech);

/* ---- notifiers (notifier.c) ---- */
struct cudafd_notifier {
    int fd;
    int mech;
    bool closed; /* written under g.mu and mu */
    cfd_wait *attached; /* g.mu */
    int nattached;      /* g.mu */
    pthread_mutex_t mu; /* the completion queue */
    cudafd_completion *q;
    size_t qhead, qlen, qcap;
    int64_t max_lateness; /* ns: how late its waits may be found (waiters.c); g.mu */
    bool asking;          /* spin: its caller asks about its waits itself (ask.c); g.mu */
    uint32_t fork_gen;    /* g.fork_gen at creation: another value means inherited across fork() (fork.c) */
};
/* queue.c: queue a completion, writing the eventfd if the queue was empty */
void cfd_notifier_push(struct cudafd_notifier *n, uint64_t token, int64_t status); /* g.mu held */
void cfd_notifier_signal(struct cudafd_notifier *n); /* make the eventfd readable */

/* ---- fork() (fork.c sets g.forked; driver.c checks it) ---- */
/* CUDAFD_OK, or CUDAFD_E_STATE in a child forked after this process used the
 * driver: CUDA cannot be used there. */
int cfd_fork_check(void);
/* cudafd_drain's work (notifier.c): up to max queued completions into out,
 * clearing the fd once the queue is empty; CUDAFD_E_CLOSED once closed and
 * empty. Takes n->mu (inside g.mu if held). */
int cfd_notifier_take(struct cudafd_notifier *n, cudafd_completion *out, int max);
static inline bool cfd_inherited(const struct cudafd_notifier *n);

/* ---- the poller (waiters.c) and the hostfunc watchdog (hostfunc.c) ---- */
int cfd_lane_activate(cfd_lane *l); /* a lane that just got its first wait: the poller's now; g.mu held */
void cfd_lane_joined(cfd_lane *l, int64_t budget); /* a wait with this budget joined a lane with waits; g.mu held */
void cfd_wake_poller(void);         /* at once, if it sleeps; g.mu held */
/* How long after a query that found it running a wait of this age is asked
 * again, given its budget (max_lateness, ns): waiters.c says why. */
int64_t cfd_poll_interval(int64_t age, int64_t budget);
/* A wait on user_event if it is not NULL, else on user_stream (NULL: the legacy default stream). */
int cfd_hostfunc_watch(struct cudafd_notifier *n, cfd_ctx *cx, CUstream user_stream, uintptr_t stream_key,
                       CUevent user_event, uint64_t *token);
/* End the hostfunc waits of faulted contexts, asked about no more (hostfunc.c). g.mu held. */
void cfd_hostfunc_end_faulted_locked(void);
/* A caller lets go of a hostfunc wait (cancel); one put off, never launched,
 * ends at once (hostfunc.c). g.mu held; w may be freed. */
void cfd_hostfunc_drop_locked(cfd_wait *w);
/* The same for every wait put off whose notifier closed. g.mu held. */
void cfd_hostfunc_end_dropped_locked(void);
/* Mark fired the waits whose host function ran while g.mu stayed taken
 * (hostfunc.c, trampoline). g.mu held. */
void cfd_hostfunc_take_fired_locked(void);
/* Host notifications: work the GPU must tell the host about when it gets
 * there (a host function, a record of a blocking-sync event). The driver
 * keeps only a few in flight per context: past them (31-40 host functions
 * behind a gate, on an H200: bench/scale_watch.py) the call
 * that adds one blocks until the GPU retires one, and every other call into
 * the context waits behind it, the caller's event loop included. The core
 * keeps at most CFD_NOTIFY_MAX of its own in flight (g.mu held). */
#define CFD_NOTIFY_MAX 16
bool cfd_notify_take(void); /* one more may go out (counted); false: wait for cfd_notify_put */
void cfd_notify_put(void);  /* one came back */

/* ---- global state ---- */
struct cfd_global {
    pthread_mutex_t mu;
    /* options */
    int64_t watchdog_ns, max_lateness_ns;
    /* poller */
    int poller_tfd;        /* the timerfd it sleeps on while it runs (counted as an eventfd) */
    bool poller_running, poller_sleeping;
    bool reap_due;         /* a wait in a lane was dropped (cfd_wait_drop): the next round takes it out */
    pthread_cond_t poller_gone_cv; /* the poller left or took dropped waits out, or the watchdog took
                                      waits that fired (cudafd_release_idle waits for these) */
    int64_t poller_wake_at; /* while sleeping: when its timer fires (INT64_MAX: never) */
    /* hostfunc */
    pthread_cond_t watchdog_cv; /* CLOCK_MONOTONIC (fork.c) */
    pthread_cond_t fill_cv; /* a side-stream pool finished filling */
    bool watchdog_running;
    int probing; /* threads querying events they do not own: no event or record may be retired */
    cfd_wait *hf_pending; /* doubly linked via next and hprev, oldest first */
    cfd_wait *hf_pending_tail;
    int hf_fired;         /* waits in it whose host function ran, to be confirmed by the watchdog */
    cfd_wait *hf_defer_head, *hf_defer_tail; /* waits whose host function the watchdog is to launch, in order */
    bool hf_launching;    /* the watchdog is launching one put off (g.mu released meanwhile) */
    bool hf_querying;     /* the watchdog is querying its round's events (g.mu released meanwhile) */
    CUevent *graveyard;   /* events to destroy outside the callback thread */
    int ngrave, capgrave;
    /* life */
    int nopen; /* notifiers created and not closed */
    cfd_ctx *contexts;
    /* accounting: live counts and totals, index = cudafd_stats() index */
    int64_t stat[CUDAFD_STAT_COUNT];
    /* fork() (fork.c) */
    uint32_t fork_gen; /* forks this process's line went through since the library loaded */
    bool forked;       /* a child forked after the driver was loaded: the driver is not to be called */
};
extern struct cfd_global g;

static inline bool cfd_inherited(const struct cudafd_notifier *n) { return n->fork_gen != g.fork_gen; }

enum {
    ST_THREADS, ST_EVENTS, ST_EVENTFDS, ST_PENDING, ST_NOTIFIERS, ST_CONTEXTS, ST_STREAMS,
    ST_NOTIFY, ST_COMPLETED, ST_FAULTS, ST_QUERIES, ST_WAKES
};

static inline void cfd_count(int index, int64_t delta)
{
    __atomic_fetch_add(&g.stat[index], delta, __ATOMIC_RELAXED);
}

int cfd_start_thread(void *(*fn)(void *), const char *name); /* g.mu held; counts it */
void cfd_thread_exit_locked(void);                           /* g.mu held; uncounts it */

#endif /* CUDAFD_INTERNAL_H */
