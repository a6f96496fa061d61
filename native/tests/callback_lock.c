/*
 * callback_lock.c - the driver's callback thread (hostfunc's trampoline)
 * does not wait for the core's lock while another thread holds it, as one
 * inside a driver call that waits for the GPU would; the wait still
 * completes once the lock is free. On the simulator ($CUDAFD_DRIVER).
 *
 * The test includes hostfunc.c and links the rest of the core, to hold g.mu
 * itself. The simulator counts a host function once it has returned.
 */
#include "../core/hostfunc.c"

#include <unistd.h>

#include "check.h"
#include "sim_calls.h"

static int64_t host_functions_run(void)
{
    int64_t st[CUDAFDSIM_STAT_COUNT];
    sim_stats(st, CUDAFDSIM_STAT_COUNT);
    return st[4];
}

int main(void)
{
    sim_calls_load("callback_lock");
    CUcontext ctx = NULL, ignored = NULL;
    CUstream s = NULL;
    sim_ctx_create(0, &ctx);
    sim_push(ctx);
    sim_stream_create(&s, CU_STREAM_NON_BLOCKING);
    sim_pop(&ignored);
    cudafd_notifier *n = NULL;
    CHECK(cudafd_notifier_create(CUDAFD_MECH_HOSTFUNC, &n) == CUDAFD_OK, "hostfunc notifier");
    CHECK(cudafd_prepare(n, (uintptr_t)s) == CUDAFD_OK, "prepare");
    for (int round = 0; round < 3; round++) {
        sim_launch(s, 20 * 1000 * 1000, 0);
        uint64_t t = 0;
        CHECK(cudafd_watch_stream(n, (uintptr_t)s, &t) == CUDAFD_OK, "watch");
        int64_t ran = host_functions_run();
        pthread_mutex_lock(&g.mu); /* as a thread inside a driver call would */
        double until = now_s() + 2.0;
        while (host_functions_run() == ran && now_s() < until)
            usleep(1000);
        int64_t ran_held = host_functions_run() - ran;
        pthread_mutex_unlock(&g.mu);
        CHECK(ran_held == 1, "round %d: the host function returned while the lock was held (%lld)", round,
              (long long)ran_held);
        cudafd_completion c[1];
        CHECK(collect(n, c, 1, 5.0) == 1 && c[0].token == t && c[0].status == 0, "round %d: the wait completed",
              round);
    }
    cudafd_notifier_destroy(n);
    cudafd_release_idle();
    sim_stream_destroy(s);
    sim_ctx_destroy(ctx);
    int64_t st[CUDAFD_STAT_COUNT];
    for (double until = now_s() + 5.0; cudafd_stats(st, CUDAFD_STAT_COUNT) > 0 && st[0] && now_s() < until;)
        usleep(1000); /* the watchdog leaves on its own */
    CHECK(st[0] == 0 && st[1] == 0 && st[2] == 0 && st[3] == 0, "counts back to zero: threads %lld events %lld "
          "eventfds %lld pending %lld", (long long)st[0], (long long)st[1], (long long)st[2], (long long)st[3]);
    printf("callback_lock: %d passed, %d failed\n", passed, failed);
    return failed != 0;
}
