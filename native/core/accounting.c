/*
 * accounting.c - the global state, tunables, thread bookkeeping and the live
 * counts that let tests prove every thread, event, eventfd and wait is freed.
 */
#include <string.h>
#include <time.h>

#include "internal.h"

struct cfd_global g = {
    .mu = PTHREAD_MUTEX_INITIALIZER,
    .poller_tfd = -1,
    .watchdog_ns = 10 * 1000 * 1000,
    .max_lateness_ns = CUDAFD_MAX_LATENESS_DEFAULT_NS,
};

static const char *const stat_names[CUDAFD_STAT_COUNT] = {
    "threads", "events", "eventfds", "pending", "notifiers", "contexts", "streams",
    "notifications", "completed", "faults", "queries", "wakes",
};

CFD_API const char *cudafd_stat_name(int index)
{
    return (index >= 0 && index < CUDAFD_STAT_COUNT) ? stat_names[index] : NULL;
}

CFD_API int cudafd_stats(int64_t *out, int n)
{
    if (!out || n < 0)
        return cfd_fail(CUDAFD_E_INVALID, "bad stats buffer");
    if (n > CUDAFD_STAT_COUNT)
        n = CUDAFD_STAT_COUNT;
    for (int i = 0; i < n; i++)
        out[i] = __atomic_load_n(&g.stat[i], __ATOMIC_RELAXED);
    return n;
}

static int64_t *option_slot(int option)
{
    switch (option) {
    case CUDAFD_OPT_WATCHDOG_NS: return &g.watchdog_ns;
    case CUDAFD_OPT_MAX_LATENESS_NS: return &g.max_lateness_ns;
    default: return NULL;
    }
}

CFD_API int cudafd_set_option(int option, int64_t value)
{
    int64_t *slot = option_slot(option);
    if (!slot)
        return cfd_fail(CUDAFD_E_INVALID, "unknown option %d", option);
    if ((option == CUDAFD_OPT_WATCHDOG_NS && (value < 100000 || value > CUDAFD_MAX_LATENESS_MAX_NS)) ||
        (option == CUDAFD_OPT_MAX_LATENESS_NS && (value < CUDAFD_MAX_LATENESS_MIN_NS || value > CUDAFD_MAX_LATENESS_MAX_NS)))
        return cfd_fail(CUDAFD_E_INVALID, "value %lld out of range for option %d", (long long)value, option);
    pthread_mutex_lock(&g.mu);
    *slot = value;
    pthread_mutex_unlock(&g.mu);
    return CUDAFD_OK;
}

CFD_API int cudafd_get_option(int option, int64_t *value)
{
    int64_t *slot = option_slot(option);
    if (!slot || !value)
        return cfd_fail(CUDAFD_E_INVALID, "unknown option %d or NULL value", option);
    pthread_mutex_lock(&g.mu);
    *value = *slot;
    pthread_mutex_unlock(&g.mu);
    return CUDAFD_OK;
}

int cfd_start_thread(void *(*fn)(void *), const char *name)
{
    pthread_attr_t attr;
    pthread_t t;
    pthread_attr_init(&attr);
    pthread_attr_setdetachstate(&attr, PTHREAD_CREATE_DETACHED);
    pthread_attr_setstacksize(&attr, 256 * 1024);
    int err = pthread_create(&t, &attr, fn, NULL);
    pthread_attr_destroy(&attr);
    if (err)
        return cfd_fail(CUDAFD_E_SYS, "cannot start the %s thread: %s", name, strerror(err));
    pthread_setname_np(t, name);
    cfd_count(ST_THREADS, 1);
    return CUDAFD_OK;
}

void cfd_thread_exit_locked(void) { cfd_count(ST_THREADS, -1); }
