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
 * Threads: cudafd runs its own native waiter threads (a bounded pool shared by
 * every notifier in the process) and, for the hostfunc mechanism, code on the
 * driver's callback thread. None of them calls back into the caller: they only
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
#define CUDAFD_ABI_VERSION 1

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
#define CUDAFD_E_UNKNOWN_TOKEN (-9) /* cancel: token unknown, already completed or cancelled */

/* Completion status values beside 0 (the point was reached): a positive CUresult
 * (the driver's error for the awaited work, e.g. 700 CUDA_ERROR_ILLEGAL_ADDRESS). */

/* Mechanisms: how a notifier learns that the GPU passed a point. */
#define CUDAFD_MECH_EVENT 0    /* pooled event; a shared poller spins briefly, then paces; long waits block */
#define CUDAFD_MECH_HOSTFUNC 1 /* cuLaunchHostFunc on a side stream; a watchdog surfaces faults */
#define CUDAFD_MECH_SPIN 2     /* pooled event; a shared waiter polls while waits are pending */

/* Tunables for cudafd_set_option(); process-wide, take effect for new waits. */
#define CUDAFD_OPT_SPIN_NS 0     /* the longest the poller spins on a wait before it paces it */
#define CUDAFD_OPT_MAX_THREADS 1 /* cap on blocking waiter threads (the poller and watchdog are extra) */
#define CUDAFD_OPT_LINGER_NS 2   /* how long the poller stays awake after its last completion */
#define CUDAFD_OPT_WATCHDOG_NS 3 /* hostfunc: how often pending points are checked for faults */
#define CUDAFD_OPT_BLOCK_AFTER_NS 4 /* event: how long a wait is paced before a blocking waiter takes it */

typedef struct cudafd_notifier cudafd_notifier;

typedef struct cudafd_completion {
    uint64_t token; /* as returned by cudafd_watch_*() */
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
/* The path given to dlopen ("" before any load attempt). */
const char *cudafd_driver_path(void);
/* The driver's version, e.g. 13000 (loads the driver). */
int cudafd_driver_version(int *version);
/* Fill *name with the driver's name for a CUresult ("CUDA_ERROR_ILLEGAL_ADDRESS");
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
/* A counter that grows by one with every completion queued and at close,
 * for callers that spin briefly before polling the fd: when it has not
 * changed since the last drain, there is nothing to drain. Read it with an
 * atomic load (acquire); valid until cudafd_notifier_destroy. NULL for NULL. */
const uint64_t *cudafd_notifier_seq(const cudafd_notifier *n);
/* Make now every stream the notifier's waits in `stream`'s context may need
 * later (side streams; the event mechanism's blocking-waiter bridges), so that
 * no later watch creates one. Optional, and best called before the work
 * starts: on an H200 about every 128th stream a process creates waits until
 * the device has no work in flight, and every call into the context waits
 * behind it. A context's side streams stay once made (cudafd_release_idle);
 * its bridges go when no notifier is open. */
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
/* cudafd_watch_stream, for a caller that can sleep on a precise timer of its
 * own (an event loop with a timerfd) and so spare the poller's thread its
 * wake: *due_ns > 0 says the caller times this wait; it calls cudafd_check at
 * that time (CLOCK_MONOTONIC ns) and as often as that says, until the wait
 * finished or went back to the core. *due_ns == 0: an ordinary watch, whose
 * completion comes through the fd (another mechanism, a stream with no
 * history yet, or a stream with waits already pending). A caller that stops
 * checking should cancel the token (closing the notifier also does); a wait
 * not checked for a second past its due time goes back to the core, and the
 * fd reports it. */
int cudafd_watch_stream_timed(cudafd_notifier *n, uintptr_t stream, uint64_t *token, int64_t *due_ns);
/* Ask after a wait from cudafd_watch_stream_timed. Sets *due_ns:
 *   0   it finished: its status is in *status (0 or the CUresult); it will
 *       never be drained, and the token is no longer pending;
 *   > 0 still running: check again at *due_ns;
 *   -1  the core has it now (another wait joined its stream, or it was
 *       detached): its completion comes through the fd as usual.
 * One thread at a time per token (CUDAFD_E_STATE otherwise). */
int cudafd_check(cudafd_notifier *n, uint64_t token, int64_t *status, int64_t *due_ns);
/* Have the core arm the caller's timerfd (CLOCK_MONOTONIC) for the waits
 * the caller times, which spares it a timerfd_settime of its own per wait:
 * cudafd_watch_stream_timed and cudafd_check arm it at each *due_ns > 0 they
 * return, and cudafd_check disarms it (clearing its readiness) when it
 * returns 0 or -1. If it cannot be armed, the wait is the core's instead
 * (*due_ns 0 from the watch, -1 from the check), so a wait is never left
 * without a timer. For a caller that times one wait at a time: each due
 * replaces the last. -1 stops it. The fd stays the caller's: set -1 before
 * closing it. CUDAFD_E_INVALID if it is not a timerfd.
 * idle_ns > 0: a check that returns 0 (the wait ended) arms the clock
 * idle_ns later instead of disarming it, in the same call; a later watch
 * re-arms it for its own due. So the clock fires with no timed wait pending
 * once no timed wait followed for idle_ns: a caller may then unregister
 * what it keeps registered between waits, at no cost per wait. 0: never;
 * negative: CUDAFD_E_INVALID. */
int cudafd_set_clock(cudafd_notifier *n, int timerfd, int64_t idle_ns);
/* Already passed? 1 when every piece of work enqueued on `stream` so far has
 * finished without error, else 0: still running, faulted, or not a live
 * stream (watch it to learn which). A cheap check before a watch, so a wait
 * on work that is already done costs no event, no thread and no fd wake.
 * Never fails (0 also when the driver cannot be loaded). */
int cudafd_stream_done(uintptr_t stream);
/* The same for an event's latest record: 1 when it completed without error. */
int cudafd_event_done(uintptr_t event);
/* Detach a pending wait: it will not be reported. The GPU work is unaffected. */
int cudafd_cancel(cudafd_notifier *n, uint64_t token);
/* Move up to `max` completions into out[]; returns how many (>= 0), or
 * CUDAFD_E_CLOSED once the notifier is closed and nothing is queued. */
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
 * idle, and every call into the context waits behind it). A kept pool is
 * checked once at its next use (one cuStreamQuery): if its context was
 * destroyed meanwhile, it is dropped and made again. This call destroys
 * them, with the records of their contexts, when no notifier is open (else
 * it does nothing: they are in use). Call it before destroying a context of
 * your own, or to see every live count at zero. Returns how many streams it
 * destroyed. */
int cudafd_release_idle(void);

/* Live counts, by index (stable within an ABI version):
 *   0 threads    native threads of cudafd alive now
 *   1 events     CUevents created by cudafd and not yet destroyed
 *   2 eventfds   eventfds open (the notifiers', and the poller's timerfd)
 *   3 pending    wait records alive (attached or detached, not yet finished)
 *   4 notifiers  notifiers created and not yet destroyed
 *   5 contexts   per-context records (event pools, side streams; kept with them)
 *   6 streams    side streams created by cudafd (hostfunc, waits on events,
 *                bridges), kept ones included (cudafd_release_idle)
 * and cumulative totals:
 *   7 completed  completions delivered
 *   8 spun       completions found by the polling waiter
 *   9 blocked    completions found by a blocking waiter
 *  10 faults     completions with a nonzero status
 *  11 direct     waits that skipped the poller's spin (the adaptive budget
 *                said waits are long) and went straight to paced queries
 *  12 paced      completions found by a paced (timed) query of the poller
 *  13 wakes      times the poller woke from a sleep (the CPU a long wait costs
 *                it: about one per paced wait)
 *  14 timed      completions found by a caller's cudafd_check
 * and one more live count:
 *  15 notifications  host notifications in flight: host functions and
 *                blocking waiters' bridges (the core keeps at most 16: past
 *                the driver's few, every call into the context stalls) */
#define CUDAFD_STAT_COUNT 16
const char *cudafd_stat_name(int index);
/* Fill out[0..n) with the counts; returns how many were filled. */
int cudafd_stats(int64_t *out, int n);

/* ---- the answer board: the driver asked for a busy loop (board.c) ----
 *
 * For a thread that runs many tasks, each launching work and awaiting it
 * (64 streams, each a loop of a 100 us kernel and an await), where the
 * thread's own core is the bottleneck and one cuStreamQuery per await is a
 * large part of it. The board's thread makes those queries; the caller
 * reads the answers as plain words, with no driver call:
 *
 *   slot = cudafd_board_bind(b, stream);          once per stream
 *   launch work on stream;
 *   w = cudafd_board_want(b, slot);               announce: "has it passed this?"
 *   ... run other tasks ...
 *   if (done[slot] == w) it passed;               done from cudafd_board_words (an acquire load)
 *   else ask the driver yourself (cudafd_stream_done) or watch.
 *
 * Answers are only ever "passed": a running stream, a fault or a bad handle
 * leave done behind want, so a caller that finds no answer must ask or
 * watch, which reports errors. done only moves forward (modulo 2^32) to a
 * value want had, so done == w means "passed w", and a later want's answer
 * covers earlier ones. The thread queries a slot first when its point is
 * likely over (from how long that stream's points took to be answered,
 * smoothed), then at its pace: a
 * quarter of how long answers sat unread before the caller announced the
 * next point on their slot (smoothed; 20 us to 1 ms, halved by each answer
 * not there in time). With nothing pending it parks (no CPU), and it exits after 20 ms parked
 * (cudafd_stats counts it among the threads); a want starts or wakes it.
 * Default streams (0, CU_STREAM_LEGACY, CU_STREAM_PER_THREAD) cannot be
 * bound: they name the querying thread's context.
 * Threads: want and drop on one slot from one thread at a time; bind and
 * unbind from any. destroy when no other call on the board is in progress. */
typedef struct cudafd_board cudafd_board;
int cudafd_board_create(int slots, cudafd_board **out); /* 1..2^20 slots; loads the driver */
void cudafd_board_destroy(cudafd_board *b);              /* stops its thread; NULL is a no-op */
/* The answer words: want[slot] and done[slot] (uint32), valid until destroy;
 * returns the number of slots. */
int cudafd_board_words(cudafd_board *b, const uint32_t **want, const uint32_t **done);
int cudafd_board_bind(cudafd_board *b, uintptr_t stream); /* a free slot (>= 0) for stream; NOMEM: full */
int cudafd_board_unbind(cudafd_board *b, int slot);       /* drop, then free the slot */
/* Announce a point on the slot's stream (everything enqueued on it so far):
 * returns w (>= 0, done[slot] becomes w once it passed) or an error. */
int64_t cudafd_board_want(cudafd_board *b, int slot);
/* Forget the slot's unanswered want, if any: when it returns, no query of
 * the stream is in flight, and none is made before the next want. For a
 * caller whose last wait on the stream ended another way. */
int cudafd_board_drop(cudafd_board *b, int slot);
/* The board's counts: queries made, answers stored (points found passed),
 * thread starts, wakes of a parked or exited thread. */
enum { CUDAFD_BOARD_QUERIES, CUDAFD_BOARD_ANSWERS, CUDAFD_BOARD_STARTS, CUDAFD_BOARD_WAKES, CUDAFD_BOARD_STAT_COUNT };
int cudafd_board_stats(const cudafd_board *b, int64_t *out, int n);

#ifdef __cplusplus
}
#endif
#endif /* CUDAFD_H */
