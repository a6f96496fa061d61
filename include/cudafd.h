/*
 * cudafd.h - a pollable file descriptor for CUDA stream progress.
 *
 * A notifier owns one eventfd. cudafd_watch_stream() marks "all work enqueued
 * on this stream so far"; when the GPU passes that point (or the context
 * faults), a completion {token, status} is queued on the notifier and its fd
 * becomes readable. Any event loop waits for the fd (epoll, poll, Tokio
 * AsyncFd, asyncio add_reader) and then calls cudafd_drain() to collect every
 * finished token in one batch.
 *
 * Readiness contract: the fd is readable exactly while completions are queued
 * (or the notifier is closed). cudafd_drain() that empties the queue also
 * clears the fd, under the same lock as the producers, so a completion is
 * never lost and never reported twice. Level-triggered and edge-triggered
 * polling both work: after an edge, drain until cudafd_drain() returns 0.
 *
 * Threads: cudafd runs one native poller thread shared by every notifier in
 * the process and, for the hostfunc mechanism, a watchdog thread and code on
 * the driver's callback thread. None of them calls back into the caller: they only
 * queue completions and write the eventfd.
 *
 * Every function that returns int returns CUDAFD_OK (0) or a negative
 * CUDAFD_E_* code; cudafd_last_error() then describes the failure on the
 * calling thread. A CUDA error met while setting up a watch is returned as
 * CUDAFD_E_CUDA with the CUresult in cudafd_last_cuda_error().
 *
 * fork(): CUDA cannot be used in a child forked after its parent initialised
 * the driver. In a child forked after this library loaded the driver, every
 * call that would reach the driver returns CUDAFD_E_STATE (the message says
 * to start children with spawn, or fork before first use), and a notifier
 * made before the fork refuses everything but cudafd_notifier_close() and
 * cudafd_notifier_destroy(), which touch neither the driver nor its locks.
 * The parent is unaffected. A child forked before the driver was loaded
 * starts from nothing and works.
 */
#ifndef CUDAFD_H
#define CUDAFD_H

#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

/* Bumped on every incompatible change of this header. */
#define CUDAFD_ABI_VERSION 4

/* Return codes (negative). */
#define CUDAFD_OK 0
#define CUDAFD_E_INVALID (-1)       /* bad argument (NULL notifier, unknown mechanism, ...) */
#define CUDAFD_E_CLOSED (-2)        /* the notifier was closed */
#define CUDAFD_E_NOMEM (-3)         /* out of memory */
#define CUDAFD_E_SYS (-4)           /* a system call failed; the message carries errno */
#define CUDAFD_E_NODRIVER (-5)      /* the driver library could not be loaded or initialised */
#define CUDAFD_E_STATE (-6)         /* call not allowed now (driver path after the driver loaded; after fork()) */
#define CUDAFD_E_CUDA (-7)          /* a driver call failed: see cudafd_last_cuda_error() */
#define CUDAFD_E_UNSUPPORTED (-8)   /* mechanism not available with this driver */
#define CUDAFD_E_UNKNOWN_TOKEN (-9) /* cancel, ask: token unknown, already reported or cancelled */

/* Completion status values beside 0 (the point was reached): a positive CUresult
 * (the driver's error for the awaited work, e.g. 700 CUDA_ERROR_ILLEGAL_ADDRESS). */

/* Mechanisms: how a notifier learns that the GPU passed a point. */
#define CUDAFD_MECH_EVENT 0    /* pooled event; a shared poller asks at intervals bounded by max_lateness */
#define CUDAFD_MECH_HOSTFUNC 1 /* cuLaunchHostFunc on a side stream; a watchdog surfaces faults */
#define CUDAFD_MECH_SPIN 2     /* pooled event; a shared waiter polls while waits are pending */
/* Jetson (experimental, not yet run on a board): the GPU signals a host1x
 * syncpoint through NvSciSync; the poller sleeps on one host1x pollfd for
 * every point, with a driver query on a slow interval as a backstop. Only
 * where libnvscisync.so and /dev/host1x-fence exist and a self-test passes:
 * cudafd_syncfd_report(). */
#define CUDAFD_MECH_SYNCFD 3

/* Tunables for cudafd_set_option(); process-wide. */
/* hostfunc: how often pending points are checked for faults (from the watchdog's next check) */
#define CUDAFD_OPT_WATCHDOG_NS 0
/* event: the default max_lateness of new notifiers (cudafd_notifier_set_max_lateness) */
#define CUDAFD_OPT_MAX_LATENESS_NS 1

/* max_lateness: the event mechanism finds a wait at most this long after its
 * work ended (plus the time this machine takes to wake a sleeping thread).
 * A wait that has run for t is asked again after t/16, but never sooner than
 * a quarter of max_lateness nor later than max_lateness: short waits are
 * asked every max_lateness/4, and a long wait costs about 1/max_lateness
 * wake-ups per second. Faults surface within max_lateness too. */
#define CUDAFD_MAX_LATENESS_DEFAULT_NS (400 * 1000)
#define CUDAFD_MAX_LATENESS_MIN_NS (1000)
#define CUDAFD_MAX_LATENESS_MAX_NS (10LL * 1000 * 1000 * 1000)

typedef struct cudafd_notifier cudafd_notifier;

typedef struct cudafd_completion {
    uint64_t token; /* as returned by cudafd_watch_*(): nonzero, below 2^63 */
    int64_t status; /* 0, or the CUresult of the failure */
} cudafd_completion;

/* ---- library and driver ---- */

int cudafd_abi_version(void);
const char *cudafd_version(void);

/* Thread-local description of the last failure on this thread ("" if none). */
const char *cudafd_last_error(void);
/* The CUresult behind the last CUDAFD_E_CUDA on this thread. */
int cudafd_last_cuda_error(void);

/* Choose the driver library (path or soname) before it is first loaded.
 * NULL restores the default: $CUDAFD_DRIVER if set, else "libcuda.so.1".
 * After the driver loaded: CUDAFD_OK if the same path, else CUDAFD_E_STATE. */
int cudafd_set_driver(const char *path);
/* Load and initialise the driver (idempotent, thread-safe). */
int cudafd_driver_load(void);
/* The path given to dlopen once the driver loaded ("" until then, and after a
 * failed attempt). */
const char *cudafd_driver_path(void);
/* The driver's version, e.g. 13000 (loads the driver). */
int cudafd_driver_version(int *version);
/* The driver's name for a CUresult ("CUDA_ERROR_ILLEGAL_ADDRESS");
 * falls back to "CUDA_ERROR_<code>" where the driver does not know it. Never NULL. */
const char *cudafd_cuda_error_name(int code);

int cudafd_set_option(int option, int64_t value);
int cudafd_get_option(int option, int64_t *value);
/* CUDAFD_OK if the mechanism can be used here, else why not (see last_error). */
int cudafd_mechanism_available(int mechanism);

/* ---- notifiers ---- */

/* A new notifier with its own nonblocking, close-on-exec eventfd. */
int cudafd_notifier_create(int mechanism, cudafd_notifier **out);
/* The eventfd to poll for readability (-1 for NULL). Owned by the notifier. */
int cudafd_notifier_fd(const cudafd_notifier *n);
/* The notifier's max_lateness for its later watches, in ns, within
 * [CUDAFD_MAX_LATENESS_MIN_NS, CUDAFD_MAX_LATENESS_MAX_NS] (CUDAFD_E_INVALID
 * otherwise). New notifiers take CUDAFD_OPT_MAX_LATENESS_NS. CUDAFD_E_CLOSED
 * once n is closed. */
int cudafd_notifier_set_max_lateness(cudafd_notifier *n, int64_t ns);
/* Ask now, on the calling thread, whether the wait of `token` (pending on
 * an event or spin notifier) is over: one cuEventQuery. Returns 1 when it
 * is, with *status 0 or the CUresult of the failure; the wait is then
 * reported here and never drained. Returns 0 while its work runs. A wait
 * is over once its own work is: a caller asking about several waits of one
 * stream keeps their order itself. For a caller that runs a pass anyway
 * (a task in an event loop that never sleeps): the end reaches it without a
 * hand-over from the poller's thread. A sticky fault found so reaches the
 * context's other waits through the queue. CUDAFD_E_UNKNOWN_TOKEN when the
 * token is not pending on n: cancelled, or reported already through the
 * queue (the poller or a fault found it first: drain it); CUDAFD_E_CLOSED
 * once closed; both also when that happened while the query ran.
 * CUDAFD_E_INVALID for another mechanism or a NULL argument. Any thread. */
int cudafd_ask_token(cudafd_notifier *n, uint64_t token, int64_t *status);
/* A spin notifier whose callers ask about its waits themselves
 * (cudafd_ask_token at every pass) while they wait (on: nonzero): its waits
 * watched from now on are asked by the poller only every max(max_lateness,
 * 10 ms) (a backstop), so the poller does not spin on them; off: they spin
 * again. The order of one stream's waits in the queue holds among the waits
 * watched in one mode: a wait watched with asking on is the caller's to ask
 * about, and one watched later with asking off may be drained first.
 * CUDAFD_E_INVALID for another mechanism, CUDAFD_E_CLOSED once n is
 * closed. */
int cudafd_notifier_set_asking(cudafd_notifier *n, int on);
/* Make now every stream the notifier's waits in `stream`'s context may need
 * later (side streams: hostfunc points, waits on events), so that no later
 * watch creates one. Optional, and best called before the work
 * starts: on an H200 about every 128th stream a process creates waits until
 * the device has no work in flight, and every call into the context waits
 * behind it. A context's side streams stay once made (cudafd_release_idle). */
int cudafd_prepare(cudafd_notifier *n, uintptr_t stream);
/* Mark the current end of the stream: completes when all work enqueued on
 * `stream` before this call has finished. stream may be 0 (legacy default
 * stream of the current context), CU_STREAM_LEGACY or CU_STREAM_PER_THREAD.
 * The stream's context is made current where needed and restored after. */
int cudafd_watch_stream(cudafd_notifier *n, uintptr_t stream, uint64_t *token);
/* Completes when the event's record that was latest at the time of this call
 * has completed (an event never recorded completes at once). The event may be
 * recorded again or destroyed as soon as this returns. The calling thread's
 * current context hosts the wait (a side stream of it waits for the event;
 * the event may belong to another context); one must be current. */
int cudafd_watch_event(cudafd_notifier *n, uintptr_t event, uint64_t *token);
/* Already passed? 1 when every piece of work enqueued on `stream` so far has
 * finished without error, else 0: still running or faulted (watch it to
 * learn which). A cheap check before a watch, so a wait on work that is
 * already done costs no event, no thread and no fd wake. `stream` must be a
 * live stream, as for a watch: what a real driver does with a destroyed or
 * made-up handle is undefined (the simulator answers 0). Never fails (0 also
 * when the driver cannot be loaded). */
int cudafd_stream_done(uintptr_t stream);
/* The same for an event's latest record: 1 when it completed without error. */
int cudafd_event_done(uintptr_t event);
/* What the core keeps one stream's waits together by, for a caller that
 * keeps its own waits in order by stream (as callers of cudafd_ask_token
 * do): the driver's id of the stream (cuStreamGetId, unique for the
 * process's life) with the top bit set, else the handle (0 for both 0 and
 * CU_STREAM_LEGACY, the current context's legacy stream). Not the
 * handle alone: a driver hands a new stream the handle of one destroyed just
 * before, even while the destroyed one's work runs. Never fails. */
uint64_t cudafd_stream_key(uintptr_t stream);
/* The syncfd mechanism's per-point fd: cudafd_watch_stream() /
 * cudafd_watch_event() on a CUDAFD_MECH_SYNCFD notifier, which also returns in
 * *fence_fd a new sync_file fd (close-on-exec, the caller's to close) that the
 * kernel makes readable when the GPU passes the point, or 30 s after it is
 * first polled (poll, select, epoll_ctl), with the work possibly still
 * running: L4T's host1x-fence driver gives it a timeout that signals it with
 * -ETIMEDOUT (read in NVIDIA's kernel source, not seen on a board). So a
 * readable sync_file means "passed, or 30 s went by"; only the notifier's
 * completion says the work is done. A caller that polls the sync_file alone
 * drains the notifier once it is readable and, if the wait has not
 * completed, waits on the notifier's fd instead (the sync_file stays
 * readable). The wait is queued on the notifier as usual, and only the
 * notifier reports a fault: what a GPU fault does to a sync_file before
 * that timeout is not documented.
 * CUDAFD_E_INVALID on a notifier of another mechanism. */
int cudafd_watch_stream_fence(cudafd_notifier *n, uintptr_t stream, uint64_t *token, int *fence_fd);
int cudafd_watch_event_fence(cudafd_notifier *n, uintptr_t event, uint64_t *token, int *fence_fd);
/* The syncfd mechanism's self-test, as text (running it on the first call,
 * and again at a later one while the driver could not be loaded; it loads
 * the driver): a first line "available ..." or "unavailable: STEP:
 * why", then one line per step, in order, "STEP | what it does | RESULT", where
 * RESULT is "ok", "not run" or why it failed. The steps: library, driver,
 * device, module, attributes, reconcile, syncpoint, import, signal, extract,
 * fence, pollfd, trigger, poll. Valid for the life of the process (a run
 * again rewrites the text). */
const char *cudafd_syncfd_report(void);
/* Detach a pending wait: it will not be reported, and the event poller lets
 * it go at its next round instead of asking about it until its work ends; a
 * hostfunc wait whose host function was put off (16 in flight) ends at once,
 * one launched once its host function runs. The GPU work is unaffected. CUDAFD_E_UNKNOWN_TOKEN if the token is not
 * pending on n (reported already, or cancelled), CUDAFD_E_CLOSED once n is
 * closed (its waits are detached then). */
int cudafd_cancel(cudafd_notifier *n, uint64_t token);
/* Move up to `max` completions into out[]; returns how many (>= 0), or
 * CUDAFD_E_CLOSED once the notifier is closed and nothing is queued. `out`
 * may be NULL when `max` is 0 (nothing is taken). CUDAFD_E_INVALID for a
 * NULL notifier, a negative `max`, or a NULL `out` with `max` above 0. */
int cudafd_drain(cudafd_notifier *n, cudafd_completion *out, int max);
/* Number of watches not yet drained or cancelled. */
int cudafd_notifier_pending(const cudafd_notifier *n);
/* Close: every pending wait is detached (its GPU work goes on), queued
 * completions are dropped, the fd stays open and becomes readable, and every
 * later watch or drain returns CUDAFD_E_CLOSED. Idempotent; any thread. */
int cudafd_notifier_close(cudafd_notifier *n);
/* Close, then release the notifier and its fd. No other call on `n` may be in
 * progress or follow. */
void cudafd_notifier_destroy(cudafd_notifier *n);

/* ---- accounting ---- */

/* A context's side streams (the hostfunc mechanism's, those of waits on an
 * event) are made at their first use and kept, after the last notifier
 * closed too, until the process exits: so a later notifier or one-shot fence
 * in that context makes none (a stream creation can wait until the GPU is
 * idle, and every call into the context waits behind it). In a device's
 * primary context, cudafd holds a reference to it (cuDevicePrimaryCtxRetain)
 * while a notifier is open that watched there, or side streams or syncfd
 * semaphores are kept there, so releasing the primary context does not destroy cudafd's events
 * and streams under it; it goes once they do. A context of your own cannot
 * be held so: destroying it while cudafd has a wait, events or side streams
 * there leaves dead handles, which a real driver crashes on.
 * This call first waits for the event poller to let go of the waits of
 * closed notifiers, of cancelled ones and of those whose result went
 * already (to cudafd_ask_token, or early with a fault of their context),
 * though it may be asking about one at that moment; it ends the hostfunc
 * waits of a faulted context, and waits for the hostfunc watchdog to take
 * those whose host function ran, and for every query or launch in flight on
 * another thread (an ask, the watchdog's). So none is asked about after it returns
 * (hostfunc waits whose host function has not run yet, in a context without
 * a fault, are still asked about by the watchdog until it runs: synchronize
 * their work first). It then destroys the idle
 * events and side streams, the records and the primary-context references
 * of every context with no wait in flight; with no notifier open, the idle
 * events of the others too; and the syncfd mechanism's semaphores that no
 * wait uses and whose signals all ran (one whose signal is still queued,
 * its wait cancelled, is left to go with its context, and its syncpoint
 * goes at a later call once passed). So to
 * destroy a context of your own: let its waits end (or cancel them, or close
 * their notifiers), call this, then destroy it. Also call it to see every
 * live count at zero. A later watch in a context it let go of makes its
 * events and side streams again. Returns how many streams it destroyed
 * (CUDAFD_E_STATE in a child forked after the driver loaded: the streams are
 * the parent's). */
int cudafd_release_idle(void);

/* Live counts, by index (stable within an ABI version):
 *   0 threads    native threads of cudafd alive now (the poller; for
 *                hostfunc, its watchdog)
 *   1 events     CUevents created by cudafd and not yet destroyed
 *   2 eventfds   eventfds open (the notifiers', the poller's timerfd and,
 *                for syncfd, the host1x pollfd it sleeps on)
 *   3 pending    wait records alive (attached or detached, not yet finished)
 *   4 notifiers  notifiers created and not yet destroyed
 *   5 contexts   per-context records (event pools, side streams; kept with them)
 *   6 streams    side streams created by cudafd (hostfunc, waits on events),
 *                kept ones included (cudafd_release_idle)
 *   7 notifications  host functions in flight (the core keeps at most 16:
 *                past the driver's few, every call into the context stalls)
 * and cumulative totals:
 *   8 completed  completions delivered
 *   9 faults     completions with a nonzero status
 *  10 queries    event queries made by the poller and by cudafd_ask_token
 *  11 wakes      times the poller woke from a sleep */
#define CUDAFD_STAT_COUNT 12
const char *cudafd_stat_name(int index);
/* Fill out[0..n) with the counts; returns how many were filled. */
int cudafd_stats(int64_t *out, int n);

#ifdef __cplusplus
}
#endif
#endif /* CUDAFD_H */
