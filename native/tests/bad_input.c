/*
 * bad_input.c - the C API given bad input (include/cudafd.h): an error code
 * and a message, never a crash or undefined behaviour. On the simulator
 * ($CUDAFD_DRIVER, $CUDAFD_SYNCFD_FAKE), in a process that starts with no
 * driver loaded.
 *
 * `make SAN=undefined check` with UBSAN_OPTIONS=halt_on_error=1 also stops
 * at undefined behaviour that a plain build does not show.
 */
#include <string.h>

#include "check.h"
#include "sim_calls.h"

static bool starts_with(const char *s, const char *prefix) { return strncmp(s, prefix, strlen(prefix)) == 0; }

/* A driver that cannot be loaded yet, then the one that can: what was
 * found out before it loaded does not outlive the failure. */
static void before_the_driver(void)
{
    CHECK(cudafd_set_driver("/nonexistent/libcuda.so.1") == CUDAFD_OK, "choose a driver that is not there");
    CHECK(cudafd_driver_load() == CUDAFD_E_NODRIVER, "load it");
    CHECK(starts_with(cudafd_syncfd_report(), "unavailable: driver: "), "syncfd report without a driver: %.80s",
          cudafd_syncfd_report());
    cudafd_notifier *n = (cudafd_notifier *)&n;
    CHECK(cudafd_notifier_create(CUDAFD_MECH_EVENT, &n) == CUDAFD_E_NODRIVER && !n, "a notifier without a driver");
    CHECK(cudafd_set_driver(NULL) == CUDAFD_OK, "back to $CUDAFD_DRIVER");
    sim_calls_load("bad_input");
    CHECK(cudafd_mechanism_available(CUDAFD_MECH_SYNCFD) == CUDAFD_OK, "syncfd once the driver loaded");
    CHECK(starts_with(cudafd_syncfd_report(), "available"), "syncfd report once the driver loaded: %.80s",
          cudafd_syncfd_report());
    CHECK(cudafd_notifier_create(CUDAFD_MECH_SYNCFD, &n) == CUDAFD_OK, "a syncfd notifier");
    cudafd_notifier_destroy(n);
}

/* Drains that find nothing queued, before anything ever was. */
static void empty_drains(void)
{
    for (int mech = CUDAFD_MECH_EVENT; mech <= CUDAFD_MECH_SYNCFD; mech++) {
        cudafd_notifier *n = NULL;
        CHECK(cudafd_notifier_create(mech, &n) == CUDAFD_OK, "mech %d: create", mech);
        if (!n)
            continue;
        cudafd_completion out[4];
        CHECK(cudafd_drain(n, NULL, 0) == 0, "mech %d: drain into no buffer", mech);
        CHECK(cudafd_drain(n, out, 4) == 0, "mech %d: drain a queue that never held anything", mech);
        CHECK(cudafd_drain(n, NULL, 1) == CUDAFD_E_INVALID, "mech %d: NULL buffer for one", mech);
        CHECK(cudafd_drain(n, out, -1) == CUDAFD_E_INVALID, "mech %d: negative max", mech);
        CHECK(cudafd_notifier_close(n) == CUDAFD_OK && cudafd_notifier_close(n) == CUDAFD_OK,
              "mech %d: close twice", mech);
        CHECK(cudafd_drain(n, NULL, 0) == CUDAFD_E_CLOSED, "mech %d: drain once closed", mech);
        cudafd_notifier_destroy(n);
    }
}

int main(void)
{
    before_the_driver();
    empty_drains();
    cudafd_release_idle();
    int64_t st[CUDAFD_STAT_COUNT];
    cudafd_stats(st, CUDAFD_STAT_COUNT);
    for (int i = 1; i <= 7; i++) /* the live counts but threads (the poller leaves on its own) */
        CHECK(st[i] == 0, "%s = %lld at the end", cudafd_stat_name(i), (long long)st[i]);
    printf("bad_input: %d passed, %d failed\n", passed, failed);
    return failed ? 1 : 0;
}
