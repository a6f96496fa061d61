/*
 * pace_caller.c - when a caller that times its own waits (timed.c) asks.
 *
 * A caller that comes before the end pays a whole second wake (a loop pass,
 * a check and a re-arm: tens of us of CPU on an H200 host right after a
 * sleep, bench/cold_cost.py), one that comes late only latency. So unlike
 * the poller (which wakes early and spins across the end), the caller is
 * sent where about one check in CALLER_EARLY_ONE_IN comes early. Each
 * stream keeps that point as a time from the wait's start (`due`, at first
 * its predicted length + CALLER_LATE_NS). A check that finds the wait over
 * moves it 1/32 of a step sooner, an early one a step later (a step: 1/32
 * of it, at least CALLER_STEP_NS, or a quarter of how much later the wait
 * was found if more): in balance one check in ~33 comes early. (Before:
 * asked 40 us past the shortest recent wait, stepping back 10 us per hit,
 * it came early 1.3-1.4 times per wait: bench/results/2026-11-30-h200-
 * loop-timed; now 1.06: -busy-clock.)
 *
 * That alone would learn a stream whose waits got shorter at 1/1024 of a
 * wait per wait. So one wait every CALLER_PROBE_NS of waiting (every 2 to
 * 32 waits) is first probed an eighth before due, a wake of its own. A
 * probe that finds the wait over (and was not itself so late that it came
 * at due) means the waits may have shrunk: due drops to the probe's time,
 * and the next wait is probed an eighth below that. Each probe in a row
 * that finds the wait over cuts deeper (a quarter, then half of due); one
 * that comes early makes the next cut half as deep, and ends the search
 * at an eighth. A stream whose waits went from 15 ms to 1 ms is checked
 * late for at most ~50 ms of its old waits, then within about ten waits
 * near 1 ms again; a steady one pays one early wake per probe, and one
 * whose waits vary by more than an eighth about two.
 *
 * Called with g.mu held, from timed.c. A lane's flags: l->halfway, its next
 * check is a probe (at l->pred_end); l->predicted, it is at due; neither,
 * it comes at growing intervals after an early check, as the poller's do.
 */
#include "internal.h"

#define CALLER_LATE_NS (40 * 1000)
#define CALLER_STEP_NS (20 * 1000)
#define CALLER_EARLY_ONE_IN 32
#define CALLER_PROBE_NS (50 * 1000 * 1000LL)
#define CALLER_PROBE_MIN 2
#define CALLER_PROBE_MAX 32

static int64_t step_of(int64_t due) { return due / 32 > CALLER_STEP_NS ? due / 32 : CALLER_STEP_NS; }

void cfd_caller_plan(cfd_lane *l, int64_t now)
{
    cfd_caller_pace *c = cfd_pace_caller(l);
    if (c->due <= 0)
        c->due = cfd_pace_predict(l) + CALLER_LATE_NS;
    l->step = 0;
    l->halfway = false;
    l->predicted = true;
    l->next_poll = l->since + c->due;
    if (!c->cut) {
        int64_t every = CALLER_PROBE_NS / c->due;
        every = every < CALLER_PROBE_MIN ? CALLER_PROBE_MIN : every > CALLER_PROBE_MAX ? CALLER_PROBE_MAX : every;
        if (++c->since_probe < every)
            return;
        c->since_probe = 0;
    }
    int64_t probe = c->due - c->due / (c->cut ? c->cut : 8);
    if (l->since + probe > now + CALLER_STEP_NS) {
        l->halfway = true;
        l->predicted = false;
        l->pred_end = l->since + probe;
        l->next_poll = l->pred_end;
    }
}

void cfd_caller_missed(cfd_lane *l, int64_t now)
{
    cfd_caller_pace *c = cfd_pace_caller(l);
    if (l->halfway) { /* the probe came early: a smaller cut next, and the check at due stands */
        l->halfway = false;
        c->cut = c->cut == 0 || c->cut >= 8 ? 0 : c->cut * 2;
        l->predicted = true;
        l->next_poll = l->since + c->due;
        if (l->next_poll >= now + CALLER_STEP_NS)
            return;
    }
    cfd_pace_backoff(l, now, CALLER_STEP_NS);
}

void cfd_caller_found(cfd_lane *l, int64_t now, int64_t asked)
{
    cfd_caller_pace *c = cfd_pace_caller(l);
    int64_t at = asked - l->since; /* when it was asked, from the wait's start */
    int64_t took;
    if (l->halfway && at < c->due - c->due / 16) { /* over well before due: shorter waits, cut deeper */
        c->due = at;
        c->cut = c->cut == 0 ? 8 : c->cut > 2 ? c->cut / 2 : 2;
        took = at;
    } else if (l->halfway || l->predicted) { /* on time (a probe that came that late too) */
        c->due -= step_of(c->due) / CALLER_EARLY_ONE_IN;
        if (c->due < CALLER_STEP_NS)
            c->due = CALLER_STEP_NS;
        took = at - CALLER_LATE_NS;
    } else { /* the check at due came early: later next time */
        took = now - l->since - l->step / 2;
        int64_t gap = (took + CALLER_LATE_NS - c->due) / 4;
        int64_t step = step_of(c->due);
        c->due += gap > step ? gap : step;
    }
    l->halfway = false;
    cfd_pace_push(l, took); /* the poller's history, should the stream go back to it */
}
