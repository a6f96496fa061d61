/*
 * stress.h - what the stress test's files share (stress.c):
 * the simulator's entry points and a few helpers (the checks: check.h).
 */
#ifndef CUDAFD_STRESS_H
#define CUDAFD_STRESS_H

#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>

#include "check.h"
#include "sim_calls.h"

/* simulator entry points beside sim_calls.h's, resolved from the same library the core loads */
extern void (*sim_fail_next_signal)(CUresult);
extern void (*sim_fail_next_fence)(int);
extern void (*sim_delay_next_host_launch)(uint64_t);
extern void (*sim_delay_next_query)(uint64_t);

CUstream new_stream(CUcontext ctx); /* a non-blocking stream of ctx */
/* One cudafd_watch_stream on a thread of its own (pthread_create's start:
 * watch_on_a_thread), its token and result kept. */
struct watcher {
    cudafd_notifier *n;
    CUstream s;
    uint64_t token;
    int rc;
};
void *watch_on_a_thread(void *watcher);
/* stress_syncfd.c: the syncfd mechanism's own checks; whether the fakes are
 * set up ($CUDAFD_SYNCFD_FAKE), so that syncfd must be available. */
bool syncfd_expected(void);
void test_syncfd(CUcontext ctx, CUresult (*push)(CUcontext), CUresult (*pop)(CUcontext *),
                 CUresult (*ev_create)(CUevent *, unsigned), CUresult (*ev_record)(CUevent, CUstream),
                 CUresult (*ev_destroy)(CUevent));
/* stress_syncrec.c: the syncfd mechanism's per-stream records. */
void test_syncfd_records(CUcontext ctx, CUresult (*push)(CUcontext), CUresult (*pop)(CUcontext *),
                         CUresult (*ev_create)(CUevent *, unsigned), CUresult (*ev_record)(CUevent, CUstream),
                         CUresult (*ev_destroy)(CUevent));
/* stress_ask.c: cudafd_ask_token and a spin notifier left to its callers' asks. */
void test_ask(CUcontext ctx);
/* stress_release.c: waits whose results went early leave with cudafd_release_idle. */
void test_release(void);


#endif
