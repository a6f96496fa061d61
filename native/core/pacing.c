/*
 * pacing.c - when the poller queries a wait that outlasted its spin.
 *
 * A paced lane is queried by the poller on a timer: just before the end its
 * stream's history predicts (then the poller spins at most
 * CFD_PACE_SPIN_NS), and past that at growing intervals, never more than an
 * eighth of the time waited, so a notice comes at most ~12% of the wait
 * late. Lanes paced for CUDAFD_OPT_BLOCK_AFTER_NS go to the blocking
 * waiters too (blockers.c).
 *
 * Why pacing (measured on an H200, bench/results/2026-11-30-h200*): a thread
 * asleep in cuEventSynchronize on a blocking-sync event used 137-168 us of
 * CPU per 2 ms wait and returned ~190 us after the kernel ended; a timed
 * sleep costs one wake (~17-25 us), and a paced wait was found ~94 us after.
 *
 * The prediction is the shortest of the stream's last few waits, so a
 * stream whose waits vary is queried early, never as late as its longest
 * wait; and some waits are also asked halfway (pace_next), so a stream whose
 * waits got shorter is learnt in a few waits. (Predicting from the last
 * wait alone was late: on the H200 the demo's mixed 10 us - 3 ms kernels
 * were noticed 2.8 ms after they ended, at the median.)
 *
 * Nothing here calls the driver or sleeps; every function runs with g.mu
 * held, on the poller's or a blocking waiter's thread, or (timed.c) on the
 * thread of a caller that times its own waits.
 */
#include <string.h>

#include "internal.h"

#define PACE_MIN_NS (20 * 1000)   /* the shortest sleep between paced queries */
#define PACE_EARLY_NS (10 * 1000) /* wake this much before the predicted end (and how late wakes come) */
#define PACE_SLOTS 256            /* the history of how long streams' waits took */

/* How long each stream's last PACE_KEEP waits took, from becoming their
 * lane's head to being found (direct-mapped by stream; a collision only
 * costs a guess). */
#define PACE_KEEP 4
#ifndef PACE_RANK
#define PACE_RANK 0 /* the prediction: the PACE_RANK-th shortest of those (0: the shortest) */
#endif
#ifndef PACE_STEP_BACK_DIV
#define PACE_STEP_BACK_DIV 64 /* found at a query at the predicted end: step back pace / this (>= PACE_EARLY_NS) */
#endif
#define PACE_PROBE_EVERY 8 /* waits between halfway probes of a steady stream */
static struct {
    CUcontext ctx;
    uintptr_t stream;
    int64_t ns[PACE_KEEP]; /* 0: unknown */
    unsigned next;
    unsigned since_probe; /* waits since the last halfway probe */
    bool shrinking;       /* the last halfway probe found the wait over: probe again */
    cfd_caller_pace caller; /* pace_caller.c's state for the stream */
} pace_hist[PACE_SLOTS];

static int pace_slot(const cfd_lane *l)
{
    uint64_t h = ((uint64_t)(uintptr_t)l->ctx ^ (uint64_t)l->stream * 0x9e3779b97f4a7c15ull) >> 17;
    int i = (int)(h % PACE_SLOTS);
    if (pace_hist[i].ctx != l->ctx || pace_hist[i].stream != l->stream) {
        memset(&pace_hist[i], 0, sizeof pace_hist[i]);
        pace_hist[i].ctx = l->ctx;
        pace_hist[i].stream = l->stream;
    }
    return i;
}

/* The predicted length of the lane's next wait: the shortest of its
 * stream's last waits (0: none known). The shortest, so that a stream whose
 * waits vary is queried early and then at growing intervals, rather than
 * as late as its longest wait took. */
int64_t cfd_pace_predict(const cfd_lane *l)
{
    int i = pace_slot(l);
    int64_t known[PACE_KEEP];
    int n = 0;
    for (int k = 0; k < PACE_KEEP; k++) { /* insertion sort of the known ones */
        int64_t ns = pace_hist[i].ns[k];
        if (ns <= 0)
            continue;
        int j = n++;
        for (; j > 0 && known[j - 1] > ns; j--)
            known[j] = known[j - 1];
        known[j] = ns;
    }
    return n == 0 ? 0 : known[PACE_RANK < n ? PACE_RANK : n - 1];
}

bool cfd_pace_known(const cfd_lane *l) { return cfd_pace_predict(l) > 0; }

cfd_caller_pace *cfd_pace_caller(const cfd_lane *l) { return &pace_hist[pace_slot(l)].caller; }

void cfd_pace_push(const cfd_lane *l, int64_t took)
{
    int i = pace_slot(l);
    pace_hist[i].ns[pace_hist[i].next++ % PACE_KEEP] = took > 0 ? took : 1;
}

/* Plan the query at the predicted end (PACE_EARLY_NS and the usual
 * lateness of a timed wake before it): false if that is past or too far. */
static bool pace_at_end(cfd_lane *l, int64_t now)
{
    int64_t at = l->pred_end - PACE_EARLY_NS - g.wake_late;
    l->predicted = l->pred_end && at > now && at <= now + CFD_HEALTH_NS;
    if (l->predicted)
        l->next_poll = at;
    return l->predicted;
}

/* The next paced query of a lane whose head has waited since l->since.
 * `first`: it just became paced. Then, if the stream has a history, the
 * query comes just before the predicted end, except that every
 * PACE_PROBE_EVERY-th wait (every wait while the stream is shrinking) is
 * first asked halfway: a query at the end cannot tell a wait that ended just
 * before it from one that ended long before, so without it a stream whose
 * waits got shorter would keep being noticed as late as they used to take.
 * Otherwise, intervals start at PACE_MIN_NS where there is a prediction (the
 * end is near) or at an eighth of the time waited, double after each miss, and
 * never exceed an eighth of the time waited (so a late notice costs at most
 * ~12% of the wait) nor CFD_HEALTH_NS (faults are looked for that often). */
/* A new head's plan (pace_next's first part): pred_end, and maybe a halfway
 * probe (l->halfway, l->next_poll). False when the stream has no history. */
static bool pace_plan(cfd_lane *l, int64_t now)
{
    l->step = 0;
    l->halfway = false;
    l->predicted = false;
    int64_t pace = cfd_pace_predict(l);
    l->pred_end = pace > 0 ? l->since + pace : 0;
    if (pace <= 0)
        return false;
    int i = pace_slot(l);
    int64_t half = l->since + pace / 2;
    if ((pace_hist[i].shrinking || ++pace_hist[i].since_probe >= PACE_PROBE_EVERY) && half > now + PACE_MIN_NS &&
        half <= now + CFD_HEALTH_NS) {
        pace_hist[i].since_probe = 0;
        l->halfway = true;
        l->next_poll = half;
    }
    return true;
}

/* A halfway probe found the wait running: true (and the stream is steady). */
static bool pace_not_halfway(cfd_lane *l)
{
    if (!l->halfway)
        return false;
    l->halfway = false;
    pace_hist[pace_slot(l)].shrinking = false;
    return true;
}

static void pace_next(cfd_lane *l, int64_t now, bool first)
{
    int64_t waited = now - l->since;
    if (first) {
        if (pace_plan(l, now) && (l->halfway || pace_at_end(l, now)))
            return;
    } else if (pace_not_halfway(l) && pace_at_end(l, now)) { /* the prediction stands */
        return;
    }
    cfd_pace_backoff(l, now, l->pred_end ? PACE_MIN_NS : waited / 8);
}

void cfd_pace_backoff(cfd_lane *l, int64_t now, int64_t first_step)
{
    int64_t waited = now - l->since;
    int64_t step = l->step ? 2 * l->step : first_step;
    if (step > waited / 8)
        step = waited / 8;
    l->step = step < PACE_MIN_NS ? PACE_MIN_NS : step > CFD_HEALTH_NS ? CFD_HEALTH_NS : step;
    l->predicted = false;
    l->next_poll = now + l->step;
}

/* A paced head was found done at `now` by a round of queries that began at
 * `asked`: remember how long it took. Found by spinning, the time is exact.
 * Found at the first query, it ended some time before: at a halfway probe,
 * the wait took at most that long (and the stream is probed again next
 * time, so a shorter pattern is learnt in a few waits); at the predicted
 * end, how late the wake came hides when it ended, so the prediction steps
 * back a little (until a query comes before the end and the spin times
 * it); after an interval, assume it ended midway through it. */
void cfd_pace_found(cfd_lane *l, int64_t now, int64_t asked, bool first_round)
{
    int64_t took = now - l->since;
    pace_hist[pace_slot(l)].shrinking = first_round && l->halfway;
    if (first_round && l->halfway) { /* over by halfway: at most that long, maybe much less */
        took = asked - l->since;
    } else if (first_round && l->predicted) {
        int64_t pace = l->pred_end - l->since;
        int64_t back = pace / PACE_STEP_BACK_DIV;
        took = pace - (back > PACE_EARLY_NS ? back : PACE_EARLY_NS);
    } else if (first_round) {
        took -= l->step / 2;
    }
    l->halfway = false;
    cfd_pace_push(l, took);
}

/* A lane paced for CUDAFD_OPT_BLOCK_AFTER_NS goes to the blocking waiters
 * too: for waits that long, their cost is noise. */
bool cfd_paced_long(const cfd_lane *l, int64_t now)
{
    return now - l->since >= g.block_after_ns;
}

void cfd_pace_first(cfd_lane *l, int64_t now) { pace_next(l, now, true); }

void cfd_pace_missed(cfd_lane *l, int64_t now) { pace_next(l, now, false); }
