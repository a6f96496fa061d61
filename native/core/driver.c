/*
 * driver.c - loading the CUDA driver (or the simulator) at run time.
 *
 * The library is dlopen()ed by path or soname ($CUDAFD_DRIVER, a path set by
 * cudafd_set_driver(), or "libcuda.so.1") and every entry point is resolved
 * through the driver's cuGetProcAddress for one ABI version: the CUDA 12.0
 * one (CUDAFD_CUDA_API_VERSION), or the driver's own version where that is
 * older. Facts relied on:
 *  - drivers keep older ABI versions of an entry point available under its
 *    base name, so one build works with CUDA 12 and 13 drivers;
 *  - cuDriverGetVersion is exported under its plain name by every driver;
 *  - cuGetProcAddress_v2 (five arguments) exists from CUDA 12.0 on; the
 *    plain cuGetProcAddress export is the four-argument CUDA 11.3 form, on
 *    12.x drivers too; asking for a version above the driver's fails;
 *  - a plain export such as cuCtxPushCurrent is the legacy (pre-4.0) ABI,
 *    the current one is exported as cuCtxPushCurrent_v2, so the dlsym
 *    fallback (drivers before 11.3, or a name the lookup does not know)
 *    tries the _v2 export first where it has the same signature.
 *
 * The handle is never closed: waiter threads may be inside the driver at exit.
 */
#include <dlfcn.h>
#include <errno.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "internal.h"

struct cfd_driver cu;

static pthread_mutex_t load_mu = PTHREAD_MUTEX_INITIALIZER;
static __thread bool loading_here; /* this thread holds load_mu for a load */
static __thread bool fork_locked;  /* cfd_driver_fork_prepare took load_mu on this thread */
static char chosen_path[1024]; /* set by cudafd_set_driver */
static char loaded_path[1024]; /* what dlopen got, once loaded */
static _Atomic int loaded;     /* 1 once every entry point is resolved and cuInit passed */

static __thread char last_error[512];
static __thread int last_cuda_error;

int64_t cfd_now_ns(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (int64_t)ts.tv_sec * 1000000000 + ts.tv_nsec;
}

int cfd_fail(int code, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(last_error, sizeof last_error, fmt, ap);
    va_end(ap);
    return code;
}

int cfd_closed_error(void) { return cfd_fail(CUDAFD_E_CLOSED, "the notifier is closed"); }

/* A notifier made before a fork(), used in the child: its waits are the
 * parent's (fork.c). */
int cfd_inherited_error(void)
{
    return cfd_fail(CUDAFD_E_STATE, "this notifier was made before a fork(): in the child it can only be "
                                    "closed; CUDA cannot be used in a process forked after its parent used "
                                    "it (start child processes with multiprocessing's 'spawn' or "
                                    "'forkserver' start method)");
}

CFD_API const char *cudafd_cuda_error_name(int code)
{
    static __thread char fallback[32];
    const char *name = NULL;
    if (loaded && cu.cuGetErrorName && cu.cuGetErrorName(code, &name) == CUDA_SUCCESS && name)
        return name;
    snprintf(fallback, sizeof fallback, "CUDA_ERROR_%d", code);
    return fallback;
}

int cfd_fail_cuda(CUresult r, const char *what)
{
    last_cuda_error = r;
    return cfd_fail(CUDAFD_E_CUDA, "%s failed: %s (%d)", what, cudafd_cuda_error_name(r), r);
}

CFD_API const char *cudafd_last_error(void) { return last_error; }
CFD_API int cudafd_last_cuda_error(void) { return last_cuda_error; }
CFD_API int cudafd_abi_version(void) { return CUDAFD_ABI_VERSION; }
CFD_API const char *cudafd_version(void) { return "0.1.0"; }

static const char *default_path(void)
{
    const char *env = getenv("CUDAFD_DRIVER");
    return (env && *env) ? env : "libcuda.so.1";
}

CFD_API int cudafd_set_driver(const char *path)
{
    if (path && strlen(path) >= sizeof chosen_path)
        return cfd_fail(CUDAFD_E_INVALID, "driver path longer than %zu bytes", sizeof chosen_path - 1);
    pthread_mutex_lock(&load_mu);
    int rc = CUDAFD_OK;
    if (loaded) {
        const char *want = path ? path : default_path();
        if (strcmp(want, loaded_path) != 0)
            rc = cfd_fail(CUDAFD_E_STATE, "the driver %s is already loaded; choose the driver before first use",
                          loaded_path);
    } else {
        snprintf(chosen_path, sizeof chosen_path, "%s", path ? path : "");
    }
    pthread_mutex_unlock(&load_mu);
    return rc;
}

CFD_API const char *cudafd_driver_path(void) { return loaded_path; }

/* How entry points are looked up in one driver library. */
struct lookup {
    cuGetProcAddress_v2_t gpa2;
    cuGetProcAddress_v1_t gpa1;
    int version; /* the ABI version asked for */
};

static void lookup_init(void *lib, struct lookup *lk)
{
    memset(lk, 0, sizeof *lk);
    CUresult (*get_version)(int *);
    *(void **)&get_version = dlsym(lib, "cuDriverGetVersion");
    int drv = 0;
    if (!get_version || get_version(&drv) != CUDA_SUCCESS)
        drv = 0;
    lk->version = drv < CUDAFD_CUDA_API_VERSION ? drv : CUDAFD_CUDA_API_VERSION;
    if (drv >= 12000)
        *(void **)&lk->gpa2 = dlsym(lib, "cuGetProcAddress_v2");
    if (!lk->gpa2 && drv >= 11030)
        *(void **)&lk->gpa1 = dlsym(lib, "cuGetProcAddress");
}

/* Entry points whose _v2 export has the signature of cuda_abi.h's list
 * (cuStreamGetCtx_v2, for one, has another). */
static const char *const v2_same_signature[] = {
    "cuCtxPushCurrent", "cuCtxPopCurrent", "cuStreamDestroy", "cuEventDestroy", "cuDevicePrimaryCtxRelease",
};

static void *resolve(void *lib, const struct lookup *lk, const char *name)
{
    void *fn = NULL;
    if (lk->gpa2) {
        CUdriverProcAddressQueryResult st = 0;
        if (lk->gpa2(name, &fn, lk->version, CU_GET_PROC_ADDRESS_DEFAULT, &st) != CUDA_SUCCESS)
            fn = NULL;
    } else if (lk->gpa1) {
        if (lk->gpa1(name, &fn, lk->version, CU_GET_PROC_ADDRESS_DEFAULT) != CUDA_SUCCESS)
            fn = NULL;
    }
    if (fn)
        return fn;
    for (size_t i = 0; i < sizeof v2_same_signature / sizeof v2_same_signature[0]; i++) {
        if (strcmp(name, v2_same_signature[i]) == 0) {
            char v2[64];
            snprintf(v2, sizeof v2, "%s_v2", name);
            if ((fn = dlsym(lib, v2)))
                return fn;
            break;
        }
    }
    return dlsym(lib, name);
}

static int load_locked(void)
{
    const char *path = chosen_path[0] ? chosen_path : default_path();
    dlerror();
    void *lib = dlopen(path, RTLD_NOW | RTLD_LOCAL);
    if (!lib)
        return cfd_fail(CUDAFD_E_NODRIVER, "cannot load the CUDA driver %s: %s", path, dlerror());
    struct cfd_driver table;
    memset(&table, 0, sizeof table);
    struct lookup lk;
    lookup_init(lib, &lk);
#define CFD_RESOLVE_ENTRY(name, params) table.name = (CUresult(*) params)resolve(lib, &lk, #name);
    CUDAFD_DRIVER_ENTRY_POINTS(CFD_RESOLVE_ENTRY)
    CUDAFD_DRIVER_OPTIONAL_ENTRY_POINTS(CFD_RESOLVE_ENTRY)
#undef CFD_RESOLVE_ENTRY
#define CFD_CHECK_ENTRY(name, params)                                                              \
    if (!table.name && strcmp(#name, "cuLaunchHostFunc") != 0)                                     \
        return cfd_fail(CUDAFD_E_NODRIVER, "the driver %s lacks %s (cudafd needs a driver for CUDA 11.4 or newer)", \
                        path, #name);
    CUDAFD_DRIVER_ENTRY_POINTS(CFD_CHECK_ENTRY)
#undef CFD_CHECK_ENTRY
    CUresult r = table.cuInit(0);
    if (r != CUDA_SUCCESS) {
        const char *name = NULL;
        if (table.cuGetErrorName(r, &name) != CUDA_SUCCESS || !name)
            name = "unknown error";
        last_cuda_error = r;
        return cfd_fail(CUDAFD_E_NODRIVER, "cuInit failed in %s: %s (%d)", path, name, r);
    }
    cu = table;
    snprintf(loaded_path, sizeof loaded_path, "%s", path);
    return CUDAFD_OK;
}

/* g.forked is set by fork.c in a child forked after the driver was loaded. */
int cfd_fork_check(void)
{
    if (!__atomic_load_n(&g.forked, __ATOMIC_ACQUIRE))
        return CUDAFD_OK;
    return cfd_fail(CUDAFD_E_STATE,
                    "CUDA cannot be used in a process forked after its parent used it (cudafd had "
                    "loaded the CUDA driver before this fork()): start child processes with "
                    "multiprocessing's 'spawn' or 'forkserver' start method "
                    "(multiprocessing.set_start_method('spawn')), or fork before the first use of cudafd");
}

CFD_API int cudafd_driver_load(void)
{
    int forked = cfd_fork_check(); /* a child forked after the load: CUDA is not usable there */
    if (forked != CUDAFD_OK)
        return forked;
    if (atomic_load_explicit(&loaded, memory_order_acquire))
        return CUDAFD_OK;
    pthread_mutex_lock(&load_mu);
    int rc = CUDAFD_OK;
    if (!loaded) {
        loading_here = true;
        rc = load_locked();
        loading_here = false;
        if (rc == CUDAFD_OK)
            atomic_store_explicit(&loaded, 1, memory_order_release);
    }
    pthread_mutex_unlock(&load_mu);
    return rc;
}

int cfd_driver_ready(void) { return cudafd_driver_load(); }

/* fork.c holds the load's lock across a fork(), so that a child never
 * inherits it held by a thread that does not exist there: it sees the
 * driver either loaded (and refuses it) or not tried. Nothing takes g.mu
 * and then this lock, so fork.c takes this one first. A fork() made by the
 * loading thread itself (the driver's cuInit may start a helper program)
 * leaves it alone: that thread holds it already. */
void cfd_driver_fork_prepare(void)
{
    fork_locked = !loading_here;
    if (fork_locked)
        pthread_mutex_lock(&load_mu);
}

void cfd_driver_fork_done(void)
{
    if (fork_locked)
        pthread_mutex_unlock(&load_mu);
}

CFD_API int cudafd_driver_version(int *version)
{
    if (!version)
        return cfd_fail(CUDAFD_E_INVALID, "version is NULL");
    int rc = cudafd_driver_load();
    if (rc != CUDAFD_OK)
        return rc;
    CUresult r = cu.cuDriverGetVersion(version);
    return r == CUDA_SUCCESS ? CUDAFD_OK : cfd_fail_cuda(r, "cuDriverGetVersion");
}

int cfd_enter_ctx(CUcontext ctx, bool *pushed)
{
    CUcontext cur = NULL;
    *pushed = false;
    CUresult r = cu.cuCtxGetCurrent(&cur);
    if (r != CUDA_SUCCESS)
        return cfd_fail_cuda(r, "cuCtxGetCurrent");
    if (cur == ctx)
        return CUDAFD_OK;
    r = cu.cuCtxPushCurrent(ctx);
    if (r != CUDA_SUCCESS)
        return cfd_fail_cuda(r, "cuCtxPushCurrent");
    *pushed = true;
    return CUDAFD_OK;
}

void cfd_leave_ctx(bool pushed)
{
    CUcontext ignored;
    if (pushed)
        cu.cuCtxPopCurrent(&ignored);
}
