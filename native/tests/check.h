/*
 * check.h - what the C tests share (check.c): the check counter and macro,
 * a clock, and draining a notifier.
 */
#ifndef CUDAFD_CHECK_H
#define CUDAFD_CHECK_H

#include <stdbool.h>
#include <stdio.h>

#include "../../include/cudafd.h"

extern int passed, failed;
/* The core keeps a thread's last error message until its next error, so a
 * failed check names it only if it was set since this thread's previous
 * check (check_error, check.c): never one left over from an earlier call. */
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

double now_s(void); /* CLOCK_MONOTONIC seconds */
/* Wait on the fd and drain until `want` completions arrived or timeout. */
int collect(cudafd_notifier *n, cudafd_completion *got, int want, double timeout);

#endif
