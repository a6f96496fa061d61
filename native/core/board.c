/*
 * board.c - the answer board: a thread that asks the driver for a busy loop.
 *
 * A loop that runs many tasks, each launching work and awaiting it, spends
 * its one core on launches, task switches and, per await, one cuStreamQuery
 * to learn whether the work is over (1-3 us with its call from Python). The
 * board moves that query to a thread of its own: the caller binds a stream to
 * a slot once, announces each point it will ask about (cudafd_board_want:
 * one atomic add, with release order, so the thread's query comes after the
 * work enqueued before it), and reads the answer as a plain word (done[slot]):
 * no driver call on the loop's thread. The thread scans the slots whose want
 * differs from their done, queries each stream, and stores the want it read
 * into done when the stream is idle. Nothing else ever writes done (a drop
 * aside, below), so done == w means "passed w".
 *
 * Pacing: the answers need only be there when the loop comes back to a
 * task, and in the loops the board is for that is long after the work ended
 * (64 tasks of ~12 us each take turns every ~800 us around 100 us kernels).
 * So each want measures how long the previous answer on its slot sat unread
 * (its "slack"; 0 if it was not there at all), and the thread naps a quarter
 * of the smoothed slack between scans (NAP_MIN to NAP_MAX): few wakes, and
 * about one query per point, each asking every slot due before the next
 * wake. A slot is first due when its point is likely over: 3/4 of how long
 * its stream's points took to be answered (smoothed), plus a nap, at most
 * half that time again; asked earlier, it would often be asked twice. A
 * miss halves the slack, so a loop
 * that speeds up is caught up with at once. With nothing pending the thread
 * parks on a condition (no CPU); a want wakes it if parked, starting it if
 * it has exited; it exits after IDLE_NS parked.
 *
 * Answers are only ever "passed": a fault, a bad handle or a lost wake
 * leaves done behind want, and the caller, finding no answer, asks the
 * driver itself (and watches), which reports errors. A caller that stops
 * asking about a slot with a want unanswered (its last wait on the stream
 * ended some other way) drops it, so the stream is never queried again
 * until the next want: after cudafd_board_drop returns, no query of it is in
 * flight.
 *
 * Locking: b->mu guards the thread's life and slot allocation; the scan takes
 * no lock (the words are atomics, and b->busy names the slot being queried,
 * for drop). No driver call is made with b->mu held.
 */
#include <errno.h>
#include <stdlib.h>
#include <string.h>
#include <sys/prctl.h>
#include <time.h>

#include "internal.h"

#define NAP_MIN_NS (20 * 1000)          /* the thread's pace between scans: at least this */
#define NAP_MAX_NS (1000 * 1000)        /* and at most this */
#define IDLE_NS (20 * 1000 * 1000)      /* parked this long with nothing pending: the thread exits */
#define EST_MAX_NS (5 * 1000 * 1000)    /* a first query is never put off longer than 3/4 of this */

enum { TH_NONE, TH_RUNNING, TH_EXITED };

struct cudafd_board {
    int slots;
    _Atomic uint32_t *want;  /* the caller's announcements (cudafd_board_want) */
    _Atomic uint32_t *done;  /* the thread's answers: the last want found passed */
    _Atomic uintptr_t *stream; /* bound stream per slot; 0: free */
    int64_t *seen;           /* thread only: when it first saw the slot's pending want (0: none) */
    int64_t *est;            /* thread only: announcement to answer, smoothed */
    _Atomic int64_t *answered; /* when the thread stored the slot's done (0: never) */
    atomic_llong slack;      /* how long answers sat unread, smoothed (want) */
    atomic_int busy;         /* the slot the thread is querying, or -1 */
    atomic_int parked;       /* the thread waits on cv (or is not running): a want must wake it */
    atomic_llong stat[CUDAFD_BOARD_STAT_COUNT];
    pthread_mutex_t mu;
    pthread_cond_t cv;
    int hi;                  /* mu: slots [0, hi) have been bound at some point */
    int nfree, *freed;       /* mu: slots unbound below hi */
    int state;               /* mu: TH_* */
    bool stop;               /* mu */
    pthread_t th;
};

static void count(cudafd_board *b, int index) { atomic_fetch_add_explicit(&b->stat[index], 1, memory_order_relaxed); }

static int64_t nap_ns(cudafd_board *b)
{
    int64_t nap = atomic_load_explicit(&b->slack, memory_order_relaxed) / 4;
    return nap < NAP_MIN_NS ? NAP_MIN_NS : nap > NAP_MAX_NS ? NAP_MAX_NS : nap;
}

/* One pass over the bound slots, asking each pending one that is due before
 * the next pass; returns when that is (INT64_MAX: none pending). */
static int64_t scan(cudafd_board *b, int hi)
{
    int64_t now = cfd_now_ns(), next = INT64_MAX, nap = nap_ns(b);
    for (int i = 0; i < hi; i++) {
        uint32_t w = atomic_load_explicit(&b->want[i], memory_order_acquire);
        if (w == atomic_load_explicit(&b->done[i], memory_order_relaxed)) {
            b->seen[i] = 0;
            continue;
        }
        if (!b->seen[i])
            b->seen[i] = now;
        int64_t est = b->est[i], due = b->seen[i] + est * 3 / 4 + (est / 2 < nap ? est / 2 : nap);
        if (now + nap < due) {
            next = due < next ? due : next;
            continue;
        }
        atomic_store(&b->busy, i); /* seq_cst: drop either sees it or is seen (below) */
        w = atomic_load(&b->want[i]);
        if (w != atomic_load(&b->done[i])) {
            uintptr_t s = atomic_load_explicit(&b->stream[i], memory_order_relaxed);
            count(b, CUDAFD_BOARD_QUERIES);
            if (s && cu.cuStreamQuery((CUstream)s) == CUDA_SUCCESS) {
                atomic_store_explicit(&b->answered[i], now, memory_order_relaxed);
                atomic_store_explicit(&b->done[i], w, memory_order_release);
                count(b, CUDAFD_BOARD_ANSWERS);
                int64_t took = now - b->seen[i];
                b->est[i] = (3 * b->est[i] + (took < EST_MAX_NS ? took : EST_MAX_NS)) / 4;
                b->seen[i] = 0;
                atomic_store(&b->busy, -1);
                continue;
            }
        }
        atomic_store(&b->busy, -1);
        next = now + nap < next ? now + nap : next;
    }
    return next;
}

static bool pending(cudafd_board *b, int hi)
{
    for (int i = 0; i < hi; i++)
        if (atomic_load(&b->want[i]) != atomic_load(&b->done[i]))
            return true;
    return false;
}

static void *run(void *arg)
{
    cudafd_board *b = arg;
#ifdef PR_SET_TIMERSLACK
    prctl(PR_SET_TIMERSLACK, 1000UL); /* naps from 20 us, not 20 + the default 50 */
#endif
    pthread_mutex_lock(&b->mu);
    while (!b->stop) {
        int hi = b->hi;
        pthread_mutex_unlock(&b->mu);
        int64_t next = scan(b, hi);
        if (next != INT64_MAX) {
            int64_t soonest = cfd_now_ns() + NAP_MIN_NS / 2;
            next = next < soonest ? soonest : next;
            struct timespec ts = {(time_t)(next / 1000000000), (long)(next % 1000000000)};
            while (clock_nanosleep(CLOCK_MONOTONIC, TIMER_ABSTIME, &ts, NULL) == EINTR) {
            }
            pthread_mutex_lock(&b->mu);
            continue;
        }
        pthread_mutex_lock(&b->mu);
        /* Nothing pending: park. A want after the store below sees parked and
         * wakes us (it takes mu, which we hold until we wait); one before it
         * is seen by the second look. */
        atomic_store(&b->parked, 1);
        if (b->stop || pending(b, b->hi)) {
            atomic_store(&b->parked, 0);
            continue;
        }
        int64_t until = cfd_now_ns() + IDLE_NS;
        while (!b->stop && atomic_load(&b->parked) && cfd_now_ns() < until) {
            struct timespec ts = {(time_t)(until / 1000000000), (long)(until % 1000000000)};
            pthread_cond_timedwait(&b->cv, &b->mu, &ts);
        }
        if (atomic_load(&b->parked) && !pending(b, b->hi))
            break; /* idle: exit, parked stays set so the next want restarts us */
        atomic_store(&b->parked, 0);
    }
    b->state = TH_EXITED;
    pthread_mutex_unlock(&b->mu);
    cfd_count(ST_THREADS, -1);
    return NULL;
}

/* mu held: make sure the thread runs and is not parked. */
static int wake_locked(cudafd_board *b)
{
    if (b->state == TH_RUNNING) {
        atomic_store(&b->parked, 0);
        pthread_cond_signal(&b->cv);
        return CUDAFD_OK;
    }
    if (b->state == TH_EXITED) {
        pthread_join(b->th, NULL); /* it returned or is returning: it touches nothing of ours now */
        b->state = TH_NONE;
    }
    atomic_store(&b->parked, 0);
    int err = pthread_create(&b->th, NULL, run, b);
    if (err) {
        atomic_store(&b->parked, 1);
        return cfd_fail(CUDAFD_E_SYS, "cannot start the board thread: %s", strerror(err));
    }
    pthread_setname_np(b->th, "cudafd-board");
    cfd_count(ST_THREADS, 1);
    count(b, CUDAFD_BOARD_STARTS);
    b->state = TH_RUNNING;
    return CUDAFD_OK;
}

/* Free the board's memory (NULL: nothing): all of destroy but the thread and the lock. */
static void free_parts(cudafd_board *b)
{
    if (!b)
        return;
    free((void *)b->want);
    free((void *)b->done);
    free((void *)b->stream);
    free(b->seen);
    free(b->est);
    free((void *)b->answered);
    free(b->freed);
    free(b);
}

CFD_API int cudafd_board_create(int slots, cudafd_board **out)
{
    if (!out || slots < 1 || slots > (1 << 20))
        return cfd_fail(CUDAFD_E_INVALID, "board: slots must be 1..%d and out not NULL", 1 << 20);
    *out = NULL;
    int rc = cfd_driver_ready();
    if (rc != CUDAFD_OK)
        return rc;
    cudafd_board *b = calloc(1, sizeof *b);
    if (b) {
        b->want = calloc((size_t)slots, sizeof *b->want);
        b->done = calloc((size_t)slots, sizeof *b->done);
        b->stream = calloc((size_t)slots, sizeof *b->stream);
        b->seen = calloc((size_t)slots, sizeof *b->seen);
        b->est = calloc((size_t)slots, sizeof *b->est);
        b->answered = calloc((size_t)slots, sizeof *b->answered);
        b->freed = calloc((size_t)slots, sizeof *b->freed);
    }
    if (!b || !b->want || !b->done || !b->stream || !b->seen || !b->est || !b->answered || !b->freed) {
        free_parts(b); /* its lock and condition were never made: not cudafd_board_destroy */
        return cfd_fail(CUDAFD_E_NOMEM, "board: out of memory");
    }
    pthread_condattr_t ca;
    pthread_condattr_init(&ca);
    pthread_condattr_setclock(&ca, CLOCK_MONOTONIC);
    pthread_cond_init(&b->cv, &ca);
    pthread_condattr_destroy(&ca);
    pthread_mutex_init(&b->mu, NULL);
    b->slots = slots;
    atomic_init(&b->busy, -1);
    atomic_init(&b->parked, 1);
    *out = b;
    return CUDAFD_OK;
}

CFD_API void cudafd_board_destroy(cudafd_board *b)
{
    if (!b)
        return;
    pthread_mutex_lock(&b->mu);
    b->stop = true;
    pthread_cond_signal(&b->cv);
    int state = b->state;
    pthread_mutex_unlock(&b->mu);
    if (state != TH_NONE)
        pthread_join(b->th, NULL);
    pthread_cond_destroy(&b->cv);
    pthread_mutex_destroy(&b->mu);
    free_parts(b);
}

CFD_API int cudafd_board_words(cudafd_board *b, const uint32_t **want, const uint32_t **done)
{
    if (!b || !want || !done)
        return cfd_fail(CUDAFD_E_INVALID, "board: NULL argument");
    *want = (const uint32_t *)b->want;
    *done = (const uint32_t *)b->done;
    return b->slots;
}

CFD_API int cudafd_board_bind(cudafd_board *b, uintptr_t stream)
{
    if (!b)
        return cfd_fail(CUDAFD_E_INVALID, "board is NULL");
    if (stream <= 2) /* the NULL, legacy and per-thread streams mean the querying thread's context */
        return cfd_fail(CUDAFD_E_INVALID, "board: stream %#lx is a default stream, not one the board can query",
                        (unsigned long)stream);
    pthread_mutex_lock(&b->mu);
    int slot = b->nfree ? b->freed[--b->nfree] : b->hi < b->slots ? b->hi++ : -1;
    if (slot >= 0) /* a free slot has want == done: the thread skips it until the next want */
        atomic_store_explicit(&b->stream[slot], stream, memory_order_relaxed);
    pthread_mutex_unlock(&b->mu);
    return slot >= 0 ? slot : cfd_fail(CUDAFD_E_NOMEM, "board: all %d slots are bound", b->slots);
}

static bool slot_ok(const cudafd_board *b, int slot)
{
    return b && slot >= 0 && slot < b->slots && atomic_load_explicit(&b->stream[slot], memory_order_relaxed);
}

CFD_API int cudafd_board_drop(cudafd_board *b, int slot)
{
    if (!slot_ok(b, slot))
        return cfd_fail(CUDAFD_E_INVALID, "board: slot %d is not bound", slot);
    atomic_store(&b->done[slot], atomic_load(&b->want[slot])); /* seq_cst, against scan's busy */
    while (atomic_load(&b->busy) == slot) /* a query of it in flight: at most one driver call */
        cfd_cpu_relax();
    /* A query that was in flight stored a done <= want, and want has not moved
     * (the caller does not announce while it drops): settle it again. */
    atomic_store(&b->done[slot], atomic_load(&b->want[slot]));
    return CUDAFD_OK;
}

CFD_API int cudafd_board_unbind(cudafd_board *b, int slot)
{
    int rc = cudafd_board_drop(b, slot);
    if (rc != CUDAFD_OK)
        return rc;
    pthread_mutex_lock(&b->mu);
    atomic_store_explicit(&b->stream[slot], 0, memory_order_relaxed);
    b->freed[b->nfree++] = slot;
    pthread_mutex_unlock(&b->mu);
    return CUDAFD_OK;
}

CFD_API int64_t cudafd_board_want(cudafd_board *b, int slot)
{
    if (!slot_ok(b, slot))
        return cfd_fail(CUDAFD_E_INVALID, "board: slot %d is not bound", slot);
    /* How long the previous answer sat unread paces the thread (0: it was
     * not there, the caller asked itself). */
    uint32_t prev = atomic_load_explicit(&b->want[slot], memory_order_relaxed);
    int64_t at = atomic_load_explicit(&b->answered[slot], memory_order_relaxed);
    if (at) {
        int64_t slack = atomic_load_explicit(&b->slack, memory_order_relaxed);
        bool there = atomic_load_explicit(&b->done[slot], memory_order_relaxed) == prev;
        slack = there ? (7 * slack + (cfd_now_ns() - at)) / 8 : slack / 2;
        atomic_store_explicit(&b->slack, slack, memory_order_relaxed); /* racing wants: one update lost */
    }
    uint32_t w = atomic_fetch_add(&b->want[slot], 1) + 1; /* seq_cst: against the thread's parking */
    if (atomic_load(&b->parked)) {
        pthread_mutex_lock(&b->mu);
        int rc = b->stop ? CUDAFD_OK : wake_locked(b);
        pthread_mutex_unlock(&b->mu);
        if (rc != CUDAFD_OK)
            return rc; /* no thread: the want stays unanswered, and the caller asks itself */
        count(b, CUDAFD_BOARD_WAKES);
    }
    return w;
}

CFD_API int cudafd_board_stats(const cudafd_board *b, int64_t *out, int n)
{
    if (!b || !out || n < 0)
        return cfd_fail(CUDAFD_E_INVALID, "board: bad stats arguments");
    if (n > CUDAFD_BOARD_STAT_COUNT)
        n = CUDAFD_BOARD_STAT_COUNT;
    for (int i = 0; i < n; i++)
        out[i] = atomic_load_explicit(&((cudafd_board *)b)->stat[i], memory_order_relaxed);
    return n;
}
