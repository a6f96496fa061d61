/*
 * common.c - the driver binding, setup and helpers of the C benchmarks
 * (see common.h).
 */
#define _GNU_SOURCE
#include "common.h"

#include <dlfcn.h>
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/epoll.h>
#include <time.h>

typedef CUresult (*gpa_t)(const char *, void **, int, uint64_t, int *);

struct bench_driver cu;
CUdevice bench_dev;
char bench_device_name[256];
CUfunction spin_fn;
CUstream stream;

double now_s(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

void die(const char *what, const char *why)
{
    fprintf(stderr, "%s: %s: %s\n", bench_prog, what, why);
    exit(2);
}

/* cuGetProcAddress for the CUDA 12.0 ABI (as libcudafd asks), else the
 * exported symbol: its _v2 name first where the driver has one. */
static void *resolve(void *lib, gpa_t gpa, const char *name, const char *v2, bool optional)
{
    void *fn = NULL;
    int status = 0;
    if (gpa && gpa(name, &fn, 12000, 0, &status) != 0)
        fn = NULL;
    if (!fn && v2)
        fn = dlsym(lib, v2);
    if (!fn)
        fn = dlsym(lib, name);
    if (!fn && !optional)
        die("the driver lacks", name);
    return fn;
}

void load_driver(void)
{
    int rc = cudafd_driver_load();
    if (rc != CUDAFD_OK)
        die("cudafd_driver_load", cudafd_last_error());
    void *lib = dlopen(cudafd_driver_path(), RTLD_NOW | RTLD_LOCAL);
    if (!lib)
        die("dlopen", dlerror());
    gpa_t gpa;
    *(void **)&gpa = dlsym(lib, "cuGetProcAddress_v2");
#define R(name, v2, opt) *(void **)&cu.name = resolve(lib, gpa, #name, v2, opt)
    R(cuInit, NULL, false);
    R(cuDeviceGet, NULL, false);
    R(cuDeviceGetName, NULL, false);
    R(cuDevicePrimaryCtxRetain, NULL, false);
    R(cuDevicePrimaryCtxRelease, "cuDevicePrimaryCtxRelease_v2", false);
    R(cuCtxSetCurrent, NULL, false);
    R(cuCtxSynchronize, NULL, false);
    R(cuStreamCreate, NULL, false);
    R(cuStreamDestroy, "cuStreamDestroy_v2", false);
    R(cuEventCreate, NULL, false);
    R(cuEventDestroy, "cuEventDestroy_v2", false);
    R(cuEventRecord, NULL, false);
    R(cuEventQuery, NULL, false);
    R(cuEventSynchronize, NULL, false);
    R(cuModuleLoadData, NULL, false);
    R(cuModuleGetFunction, NULL, false);
    R(cuLaunchKernel, NULL, false);
    R(cuDeviceGetAttribute, NULL, true);
    R(cuStreamQuery, NULL, true);
    R(cuEventElapsedTime, NULL, true);
    R(cuLaunchHostFunc, NULL, true);
    /* The v2 stream memory operations (CUDA 11.7+; what cuGetProcAddress
     * gives for 12.0) need no driver option, unlike the v1 ones. */
    R(cuStreamWriteValue32, "cuStreamWriteValue32_v2", true);
    R(cuMemHostAlloc, NULL, true);
    R(cuMemHostGetDevicePointer, "cuMemHostGetDevicePointer_v2", true);
    R(cuMemFreeHost, NULL, true);
#undef R
}

char *read_file(const char *path)
{
    FILE *f = fopen(path, "rb");
    if (!f)
        die("cannot open the PTX file", path);
    fseek(f, 0, SEEK_END);
    long n = ftell(f);
    fseek(f, 0, SEEK_SET);
    char *buf = malloc((size_t)n + 1);
    if (!buf || fread(buf, 1, (size_t)n, f) != (size_t)n)
        die("cannot read", path);
    buf[n] = 0;
    fclose(f);
    return buf;
}

void bench_setup(const char *ptx)
{
    CUcontext ctx;
    CUmodule module; /* kept loaded: the context's release unloads it */
    SETUP(cu.cuInit(0));
    SETUP(cu.cuDeviceGet(&bench_dev, 0));
    SETUP(cu.cuDeviceGetName(bench_device_name, sizeof bench_device_name, bench_dev));
    SETUP(cu.cuDevicePrimaryCtxRetain(&ctx, bench_dev));
    SETUP(cu.cuCtxSetCurrent(ctx));
    SETUP(cu.cuModuleLoadData(&module, ptx));
    SETUP(cu.cuModuleGetFunction(&spin_fn, module, "cudafd_spin"));
    SETUP(cu.cuStreamCreate(&stream, 1)); /* CU_STREAM_NON_BLOCKING */
}

void bench_teardown(void)
{
    cu.cuStreamDestroy(stream);
    cu.cuDevicePrimaryCtxRelease(bench_dev);
}

CUresult launch(CUstream s, uint64_t ns)
{
    uint32_t fault = 0;
    void *params[] = {&ns, &fault};
    return cu.cuLaunchKernel(spin_fn, 1, 1, 1, 1, 1, 1, 0, s, params, NULL);
}

int cmp_double(const void *a, const void *b)
{
    double x = *(const double *)a, y = *(const double *)b;
    return (x > y) - (x < y);
}

double pct(const double *sorted, int n, double q)
{
    double pos = q * (n - 1);
    int lo = (int)pos, hi = lo + 1 < n ? lo + 1 : n - 1;
    return sorted[lo] + (sorted[hi] - sorted[lo]) * (pos - lo);
}

int arg_int(int argc, char **argv, const char *name, int dflt)
{
    for (int i = 1; i + 1 < argc; i++)
        if (!strcmp(argv[i], name))
            return atoi(argv[i + 1]);
    return dflt;
}

double arg_double(int argc, char **argv, const char *name, double dflt)
{
    for (int i = 1; i + 1 < argc; i++)
        if (!strcmp(argv[i], name))
            return atof(argv[i + 1]);
    return dflt;
}

const char *arg_str(int argc, char **argv, const char *name, const char *dflt)
{
    for (int i = 1; i + 1 < argc; i++)
        if (!strcmp(argv[i], name))
            return argv[i + 1];
    return dflt;
}

void add_to_epoll(int ep, int fd)
{
    struct epoll_event reg = {.events = EPOLLIN};
    if (epoll_ctl(ep, EPOLL_CTL_ADD, fd, &reg))
        die("epoll_ctl", strerror(errno));
}

int wait_fd(int ep, double timeout_s)
{
    struct epoll_event ev;
    for (;;) {
        int k = epoll_wait(ep, &ev, 1, (int)(timeout_s * 1000));
        if (k > 0)
            return 0;
        if (k == 0 || errno != EINTR)
            return -1;
    }
}
