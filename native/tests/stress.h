/*
 * stress.h - what the stress test's files share (stress.c):
 * the check counter, the simulator's entry points and a few helpers.
 */
#ifndef CUDAFD_STRESS_H
#define CUDAFD_STRESS_H

#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>

#include "../../include/cudafd.h"
#include "../sim/cudafd_sim.h"

extern int passed, failed;
/* The core keeps a thread's last error message until its next error, so a
 * failed check names it only if it was set since this thread's previous
 * check (check_error, stress.c): never one left over from an earlier call. */
const char *check_error(bool failed_now);
#define CHECK(cond, ...)                                                                           \
    do {                                                                                           \
        if (cond) {                                                                                \
            passed++;                                                                              \
            check_error(false);                                                                    \
        } else {                                                                                   \
            failed++;                                                                              \
            fprintf(stderr, "FAIL %s:%d: %s: ", __FILE__, __LINE__, #cond);                       \
            fprintf(stderr, __VA_ARGS__);                                                          \
            fprintf(stderr, " [%s]\n", check_error(true));                                        \
        }                                                                                          \
    } while (0)

/* simulator entry points, resolved from the same library the core loads */
extern CUresult (*sim_ctx_create)(CUdevice, CUcontext *);
extern CUresult (*sim_ctx_destroy)(CUcontext);
extern CUresult (*sim_launch)(CUstream, uint64_t, CUresult);
extern CUresult (*sim_stream_destroy)(CUstream);
extern void (*sim_fail_next_signal)(CUresult);
extern void (*sim_delay_next_host_launch)(uint64_t);

CUstream new_stream(CUcontext ctx); /* a non-blocking stream of ctx */
/* stress_syncfd.c: the syncfd mechanism's own checks; whether the fakes are
 * set up ($CUDAFD_SYNCFD_FAKE), so that syncfd must be available. */
bool syncfd_expected(void);
void test_syncfd(CUcontext ctx, CUresult (*push)(CUcontext), CUresult (*pop)(CUcontext *),
                 CUresult (*ev_create)(CUevent *, unsigned), CUresult (*ev_record)(CUevent, CUstream),
                 CUresult (*ev_destroy)(CUevent));
/* stress_ask.c: cudafd_ask_token and a spin notifier left to its callers' asks. */
void test_ask(CUcontext ctx);
double now_s(void);                 /* CLOCK_MONOTONIC seconds */
/* Wait on the fd and drain until `want` completions arrived or timeout. */
int collect(cudafd_notifier *n, cudafd_completion *got, int want, double timeout);


#endif
