/*
 * sim_api.c - initialisation, the entry-point table behind cuGetProcAddress,
 * error names, modules and kernel launches, and the cudafdsim_* extras.
 *
 * Facts this code relies on:
 *  - cuDriverGetVersion reports $CUDAFD_SIM_DRIVER_VERSION (read once; a
 *    number from 1000 to 99999, else 13000), and the entry-point lookup acts
 *    as that driver's does: cuGetProcAddress (the four-argument CUDA 11
 *    form) exists from 11030, cuGetProcAddress_v2 (with the status argument)
 *    from 12000; below those they answer CUDA_ERROR_NOT_FOUND to every
 *    symbol, as if absent. Asking for a version above the driver's gives
 *    CUDA_ERROR_INVALID_VALUE. A lookup resolves the base name for the
 *    version asked: the SIM_VERSIONED entry points give their _v2 function
 *    from the version it appeared in and the legacy one below it (counted,
 *    see sim_legacy.c); "cuGetProcAddress" itself gives the five-argument
 *    form from 12000 on. Not found: CUDA_ERROR_NOT_FOUND, *pfn = NULL and
 *    status CU_GET_PROC_ADDRESS_SYMBOL_NOT_FOUND (1).
 *  - cuInit reads $CUDAFD_SIM_DEVICES once (default 2, at most 64); other
 *    driver calls return CUDA_ERROR_NOT_INITIALIZED until it succeeded. The
 *    check is one atomic load. The cudafdsim_* calls initialise on their own.
 *    A real driver's first cuInit takes a while (it sets up every device);
 *    $CUDAFD_SIM_INIT_MS=N makes the simulator's first take N ms (default 0);
 *    $CUDAFD_SIM_INIT_FORK=1 makes it fork() a child that exits at once, as a
 *    real first cuInit may start a helper program (nvidia-modprobe).
 *  - Unknown error codes give CUDA_ERROR_INVALID_VALUE and a NULL string, as
 *    the driver does.
 *  - The only kernel is "cudafd_spin" (uint64_t ns, uint32_t fault): it runs
 *    for ns nanoseconds and, if fault != 0, faults its context with
 *    CUDA_ERROR_ILLEGAL_ADDRESS when it ends.
 */
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <sys/wait.h>
#include <unistd.h>

#include "sim_internal.h"

struct sim_global sim = {.lock = PTHREAD_MUTEX_INITIALIZER};
atomic_int sim_initialized;
atomic_bool sim_forked;

/* A child forked after the simulator was initialised: like CUDA's, it cannot
 * be used there (its threads that run streams and host functions are the
 * parent's; its lock may have been held by one of them). Every call fails with
 * CUDA_ERROR_NOT_INITIALIZED without touching its state. */
static void in_forked_child(void)
{
    atomic_store(&sim_forked, true);
    atomic_store(&sim_initialized, 0);
}

uint64_t sim_now_ns(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (uint64_t)ts.tv_sec * 1000000000u + (uint64_t)ts.tv_nsec;
}

void sim_sleep_ns(uint64_t ns)
{
    struct timespec ts = {(time_t)(ns / 1000000000u), (long)(ns % 1000000000u)};
    while (nanosleep(&ts, &ts) != 0)
        ;
}

/* ---- initialisation ---- */

static pthread_once_t init_once = PTHREAD_ONCE_INIT;
static CUresult init_result;

static void init_globals(void)
{
    pthread_atfork(NULL, NULL, in_forked_child);
    sim_cond_init_monotonic(&sim.sched_cv);
    pthread_cond_init(&sim.cb_cv, NULL);
    pthread_cond_init(&sim.notify_cv, NULL);
    int n = SIM_DEFAULT_DEVICES;
    const char *env = getenv("CUDAFD_SIM_DEVICES");
    if (env && *env) {
        char *end;
        long v = strtol(env, &end, 10);
        if (*end == '\0' && v >= 0)
            n = v > SIM_MAX_DEVICES ? SIM_MAX_DEVICES : (int)v;
    }
    sim.ndev = n;
    env = getenv("CUDAFD_SIM_LATE_FAULT_MS");
    if (env && *env)
        sim.late_fault_ns = (uint64_t)strtoull(env, NULL, 10) * 1000000ull;
    env = getenv("CUDAFD_SIM_FAULT_SCOPE");
    sim.fault_one_ctx = env && strcmp(env, "context") == 0;
    env = getenv("CUDAFD_SIM_INIT_MS");
    long ms = env && *env ? strtol(env, NULL, 10) : 0;
    if (ms > 0)
        sim_sleep_ns((uint64_t)ms * 1000000u);
    env = getenv("CUDAFD_SIM_INIT_FORK");
    if (env && strcmp(env, "1") == 0) { /* a helper program run by fork(), as libcuda may */
        pid_t pid = fork();
        if (pid == 0)
            _exit(0);
        if (pid > 0)
            waitpid(pid, NULL, 0);
    }
    init_result = n ? CUDA_SUCCESS : CUDA_ERROR_NO_DEVICE;
    if (n)
        atomic_store_explicit(&sim_initialized, 1, memory_order_release);
}

CUresult sim_init(void)
{
    if (atomic_load(&sim_forked))
        return CUDA_ERROR_NOT_INITIALIZED;
    pthread_once(&init_once, init_globals);
    return init_result;
}

SIM_API CUresult cuInit(unsigned int flags)
{
    if (flags)
        return CUDA_ERROR_INVALID_VALUE;
    return sim_init();
}

SIM_API CUresult cuDriverGetVersion(int *version)
{
    if (!version)
        return CUDA_ERROR_INVALID_VALUE;
    *version = sim_driver_version();
    return CUDA_SUCCESS;
}

SIM_API int cudafdsim_abi_version(void)
{
    return CUDAFDSIM_ABI_VERSION;
}

/* ---- errors ---- */

#define SIM_ERRORS(X)                                                                  \
    X(CUDA_SUCCESS, "no error")                                                        \
    X(CUDA_ERROR_INVALID_VALUE, "invalid argument")                                    \
    X(CUDA_ERROR_OUT_OF_MEMORY, "out of memory")                                       \
    X(CUDA_ERROR_NOT_INITIALIZED, "initialization error")                              \
    X(CUDA_ERROR_DEINITIALIZED, "driver shutting down")                                \
    X(CUDA_ERROR_NO_DEVICE, "no CUDA-capable device is detected")                      \
    X(CUDA_ERROR_INVALID_DEVICE, "invalid device ordinal")                             \
    X(CUDA_ERROR_INVALID_IMAGE, "device kernel image is invalid")                      \
    X(CUDA_ERROR_INVALID_CONTEXT, "invalid device context")                            \
    X(CUDA_ERROR_INVALID_HANDLE, "invalid resource handle")                            \
    X(CUDA_ERROR_NOT_FOUND, "named symbol not found")                                  \
    X(CUDA_ERROR_NOT_READY, "device not ready")                                        \
    X(CUDA_ERROR_ILLEGAL_ADDRESS, "an illegal memory access was encountered")          \
    X(CUDA_ERROR_LAUNCH_TIMEOUT, "the launch timed out and was terminated")            \
    X(CUDA_ERROR_CONTEXT_IS_DESTROYED, "context is destroyed")                         \
    X(CUDA_ERROR_ASSERT, "device-side assert triggered")                               \
    X(CUDA_ERROR_ILLEGAL_INSTRUCTION, "an illegal instruction was encountered")        \
    X(CUDA_ERROR_MISALIGNED_ADDRESS, "misaligned address")                             \
    X(CUDA_ERROR_INVALID_PC, "invalid program counter")                                \
    X(CUDA_ERROR_LAUNCH_FAILED, "unspecified launch failure")                          \
    X(CUDA_ERROR_NOT_SUPPORTED, "operation not supported")                             \
    X(CUDA_ERROR_UNKNOWN, "unknown error")

static const struct {
    CUresult code;
    const char *name, *text;
} errors[] = {
#define SIM_ERROR_ROW(code, text) {code, #code, text},
    SIM_ERRORS(SIM_ERROR_ROW)
#undef SIM_ERROR_ROW
};

static CUresult describe(CUresult error, const char **out, bool name)
{
    if (!out)
        return CUDA_ERROR_INVALID_VALUE;
    for (size_t i = 0; i < sizeof errors / sizeof errors[0]; i++) {
        if (errors[i].code == error) {
            *out = name ? errors[i].name : errors[i].text;
            return CUDA_SUCCESS;
        }
    }
    *out = NULL;
    return CUDA_ERROR_INVALID_VALUE;
}

SIM_API CUresult cuGetErrorName(CUresult error, const char **name)
{
    return describe(error, name, true);
}

SIM_API CUresult cuGetErrorString(CUresult error, const char **text)
{
    return describe(error, text, false);
}

/* ---- modules and launches ---- */

struct sim_module {
    uint64_t handle;
    uint64_t spin; /* the function handle, once asked for */
};

SIM_API CUresult cuModuleLoadData(CUmodule *module, const void *image)
{
    SIM_CHECK_INIT();
    if (!module || !image)
        return CUDA_ERROR_INVALID_VALUE;
    struct sim_ctx *c;
    pthread_mutex_lock(&sim.lock);
    CUresult rc = sim_ctx_current_usable_locked(&c);
    if (rc == CUDA_SUCCESS) {
        struct sim_module *m = calloc(1, sizeof *m);
        if (m && (m->handle = sim_handle_new(SIM_T_MODULE, m))) {
            *module = (CUmodule)(uintptr_t)m->handle;
        } else {
            free(m);
            rc = CUDA_ERROR_OUT_OF_MEMORY;
        }
    }
    pthread_mutex_unlock(&sim.lock);
    return rc;
}

SIM_API CUresult cuModuleGetFunction(CUfunction *fn, CUmodule module, const char *name)
{
    SIM_CHECK_INIT();
    if (!fn || !name)
        return CUDA_ERROR_INVALID_VALUE;
    pthread_mutex_lock(&sim.lock);
    CUresult rc = CUDA_SUCCESS;
    struct sim_module *m = sim_handle_get((uint64_t)(uintptr_t)module, SIM_T_MODULE);
    if (!m)
        rc = CUDA_ERROR_INVALID_HANDLE;
    else if (strcmp(name, "cudafd_spin") != 0)
        rc = CUDA_ERROR_NOT_FOUND;
    else if (!m->spin && !(m->spin = sim_handle_new(SIM_T_FUNC, m)))
        rc = CUDA_ERROR_OUT_OF_MEMORY;
    if (rc == CUDA_SUCCESS)
        *fn = (CUfunction)(uintptr_t)m->spin;
    pthread_mutex_unlock(&sim.lock);
    return rc;
}

SIM_API CUresult cuModuleUnload(CUmodule module)
{
    SIM_CHECK_INIT();
    pthread_mutex_lock(&sim.lock);
    struct sim_module *m = sim_handle_get((uint64_t)(uintptr_t)module, SIM_T_MODULE);
    if (m) {
        sim_handle_free(m->spin);
        sim_handle_free(m->handle);
        free(m);
    }
    pthread_mutex_unlock(&sim.lock);
    return m ? CUDA_SUCCESS : CUDA_ERROR_INVALID_HANDLE;
}

SIM_API CUresult cuLaunchKernel(CUfunction f, unsigned int gridDimX, unsigned int gridDimY,
                                unsigned int gridDimZ, unsigned int blockDimX,
                                unsigned int blockDimY, unsigned int blockDimZ,
                                unsigned int sharedMemBytes, CUstream stream,
                                void **kernelParams, void **extra)
{
    SIM_CHECK_INIT();
    if (!gridDimX || !gridDimY || !gridDimZ || !blockDimX || !blockDimY || !blockDimZ)
        return CUDA_ERROR_INVALID_VALUE;
    if (!kernelParams)
        return extra ? CUDA_ERROR_NOT_SUPPORTED : CUDA_ERROR_INVALID_VALUE;
    if (!kernelParams[0] || !kernelParams[1])
        return CUDA_ERROR_INVALID_VALUE;
    uint64_t ns;
    uint32_t fault;
    memcpy(&ns, kernelParams[0], sizeof ns);
    memcpy(&fault, kernelParams[1], sizeof fault);
    pthread_mutex_lock(&sim.lock);
    struct sim_stream *s;
    CUresult rc = CUDA_SUCCESS;
    if (!sim_handle_get((uint64_t)(uintptr_t)f, SIM_T_FUNC))
        rc = CUDA_ERROR_INVALID_HANDLE;
    if (rc == CUDA_SUCCESS)
        rc = sim_stream_resolve_locked(stream, &s);
    if (rc == CUDA_SUCCESS)
        rc = sim_launch_locked(s, ns, fault ? CUDA_ERROR_ILLEGAL_ADDRESS : CUDA_SUCCESS);
    pthread_mutex_unlock(&sim.lock);
    return rc;
}

/* ---- statistics ---- */

SIM_API int cudafdsim_stats(int64_t *out, int n)
{
    if (!out || n <= 0 || atomic_load(&sim_forked))
        return 0;
    if (n > CUDAFDSIM_STAT_COUNT)
        n = CUDAFDSIM_STAT_COUNT;
    pthread_mutex_lock(&sim.lock);
    const int64_t all[CUDAFDSIM_STAT_COUNT] = {sim.n_ctx,     sim.n_streams, sim.n_events,   sim.n_queued,
                                               sim.n_hostfns, sim.n_kernels, sim.n_dead_calls, sim.n_busy_sem_destroys};
    pthread_mutex_unlock(&sim.lock);
    memcpy(out, all, (size_t)n * sizeof *out);
    return n;
}

/* ---- cuGetProcAddress ---- */

/* The entry points reachable by name: the core's list and the extras the
 * simulator's users call. The SIM_VERSIONED ones among them are compiled
 * under their _v2 names (sim_internal.h), so a row's function is the one
 * served from the row's version on; the legacy one serves older versions. */
#define SIM_ENTRY_POINTS(X)                                                            \
    CUDAFD_DRIVER_ENTRY_POINTS(X)                                                      \
    X(cuDeviceGetName, ())                                                             \
    X(cuDeviceGetAttribute, ())                                                        \
    X(cuDevicePrimaryCtxRetain, ())                                                    \
    X(cuDevicePrimaryCtxRelease, ())                                                   \
    X(cuDevicePrimaryCtxGetState, ())                                                  \
    X(cuCtxCreate, ())                                                                 \
    X(cuCtxDestroy, ())                                                                \
    X(cuCtxSynchronize, ())                                                            \
    X(cuStreamSynchronize, ())                                                         \
    X(cuStreamGetId, ())                                                               \
    X(cuCtxGetId, ())                                                                  \
    X(cuModuleLoadData, ())                                                            \
    X(cuModuleGetFunction, ())                                                         \
    X(cuModuleUnload, ())                                                              \
    X(cuLaunchKernel, ())                                                              \
    X(cuDeviceGetNvSciSyncAttributes, ())                                              \
    X(cuImportExternalSemaphore, ())                                                   \
    X(cuSignalExternalSemaphoresAsync, ())                                             \
    X(cuDestroyExternalSemaphore, ())

static const struct {
    const char *name;
    void *fn;
} entry_points[] = {
#define SIM_ENTRY_ROW(name, params) {#name, (void *)name},
#define SIM_V2_ROW(name, since, params) {#name "_v2", (void *)name},
    SIM_ENTRY_POINTS(SIM_ENTRY_ROW)
    SIM_VERSIONED(SIM_V2_ROW) /* the export names, found too */
#undef SIM_ENTRY_ROW
#undef SIM_V2_ROW
};

/* The version from which `name` is served its _v2 ABI; 0 if it has one ABI. */
static int versioned_since(const char *name)
{
#define SIM_SINCE_ROW(fn, since, params)                                       \
    if (strcmp(name, #fn) == 0)                                                \
        return since;
    SIM_VERSIONED(SIM_SINCE_ROW)
#undef SIM_SINCE_ROW
    return 0;
}

static bool is_extsem_call(const char *name)
{
    return strcmp(name, "cuDeviceGetNvSciSyncAttributes") == 0 || strcmp(name, "cuImportExternalSemaphore") == 0 ||
           strcmp(name, "cuSignalExternalSemaphoresAsync") == 0 || strcmp(name, "cuDestroyExternalSemaphore") == 0;
}

static pthread_once_t version_once = PTHREAD_ONCE_INIT;
static int driver_version = SIM_DEFAULT_DRIVER_VERSION;

static void read_version(void)
{
    const char *env = getenv("CUDAFD_SIM_DRIVER_VERSION");
    if (env && *env) {
        char *end;
        long v = strtol(env, &end, 10);
        if (*end == '\0' && v >= 1000 && v < 100000)
            driver_version = (int)v;
    }
}

int sim_driver_version(void)
{
    pthread_once(&version_once, read_version);
    return driver_version;
}

static CUresult lookup(const char *symbol, void **pfn, int cudaVersion,
                       CUdriverProcAddressQueryResult *status)
{
    if (!symbol || !pfn)
        return CUDA_ERROR_INVALID_VALUE;
    int drv = sim_driver_version();
    *pfn = NULL;
    if (status)
        *status = 1; /* CU_GET_PROC_ADDRESS_SYMBOL_NOT_FOUND */
    if (cudaVersion > drv)
        return CUDA_ERROR_INVALID_VALUE;
    void *fn = NULL;
    if (strcmp(symbol, "cuGetProcAddress") == 0) {
        fn = cudaVersion >= 12000 ? (void *)cuGetProcAddress_v2 : (void *)cuGetProcAddress;
    } else if (is_extsem_call(symbol) && sim_syncfd_fails("driver")) {
        fn = NULL; /* a driver without NvSciSync interop, as on x86 */
    } else if (cudaVersion < versioned_since(symbol)) {
        fn = sim_legacy_entry(symbol);
    } else {
        for (size_t i = 0; i < sizeof entry_points / sizeof entry_points[0]; i++) {
            if (strcmp(symbol, entry_points[i].name) == 0) {
                fn = entry_points[i].fn;
                break;
            }
        }
    }
    if (!fn)
        return CUDA_ERROR_NOT_FOUND;
    *pfn = fn;
    if (status)
        *status = 0; /* CU_GET_PROC_ADDRESS_SUCCESS */
    return CUDA_SUCCESS;
}

SIM_API CUresult cuGetProcAddress_v2(const char *symbol, void **pfn, int cudaVersion,
                                     uint64_t flags, CUdriverProcAddressQueryResult *status)
{
    (void)flags;
    if (sim_driver_version() < 12000) { /* no such entry point before CUDA 12.0 */
        if (pfn)
            *pfn = NULL;
        if (status)
            *status = 1;
        return CUDA_ERROR_NOT_FOUND;
    }
    return lookup(symbol, pfn, cudaVersion, status);
}

SIM_API CUresult cuGetProcAddress(const char *symbol, void **pfn, int cudaVersion, uint64_t flags)
{
    (void)flags;
    if (sim_driver_version() < 11030) { /* no such entry point before CUDA 11.3 */
        if (pfn)
            *pfn = NULL;
        return CUDA_ERROR_NOT_FOUND;
    }
    return lookup(symbol, pfn, cudaVersion, NULL);
}
