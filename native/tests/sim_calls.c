/* sim_calls.c - the simulator's entry points for the C tests (sim_calls.h). */
#include <dlfcn.h>
#include <stdio.h>
#include <stdlib.h>

#include "../../include/cudafd.h"
#include "sim_calls.h"

CUresult (*sim_ctx_create)(CUdevice, CUcontext *);
CUresult (*sim_ctx_destroy)(CUcontext);
CUresult (*sim_launch)(CUstream, uint64_t, CUresult);
CUresult (*sim_push)(CUcontext);
CUresult (*sim_pop)(CUcontext *);
CUresult (*sim_stream_create)(CUstream *, unsigned);
CUresult (*sim_stream_destroy)(CUstream);
int (*sim_stats)(int64_t *, int);

void sim_calls_load(const char *who)
{
    const char *path = getenv("CUDAFD_DRIVER");
    void *lib = path ? dlopen(path, RTLD_NOW) : NULL;
    if (!lib) {
        fprintf(stderr, "%s: set CUDAFD_DRIVER to libcudafd_sim.so\n", who);
        exit(2);
    }
#define SYM(var, name) *(void **)&var = dlsym(lib, name)
    SYM(sim_ctx_create, "cudafdsim_ctx_create");
    SYM(sim_ctx_destroy, "cudafdsim_ctx_destroy");
    SYM(sim_launch, "cudafdsim_launch");
    SYM(sim_push, "cuCtxPushCurrent");
    SYM(sim_pop, "cuCtxPopCurrent");
    SYM(sim_stream_create, "cuStreamCreate");
    SYM(sim_stream_destroy, "cuStreamDestroy");
    SYM(sim_stats, "cudafdsim_stats");
#undef SYM
    if (cudafd_driver_load() != CUDAFD_OK) {
        fprintf(stderr, "%s: cannot load the driver: %s\n", who, cudafd_last_error());
        exit(2);
    }
}
