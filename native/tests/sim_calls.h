/*
 * sim_calls.h - the simulator's entry points the C tests share (the stress
 * test, token_wrap.c, callback_lock.c), from the library $CUDAFD_DRIVER
 * names (sim_calls.c).
 */
#ifndef CUDAFD_SIM_CALLS_H
#define CUDAFD_SIM_CALLS_H

#include <stdint.h>

#include "../sim/cudafd_sim.h"

extern CUresult (*sim_ctx_create)(CUdevice, CUcontext *);
extern CUresult (*sim_ctx_destroy)(CUcontext);
extern CUresult (*sim_launch)(CUstream, uint64_t, CUresult);
extern CUresult (*sim_push)(CUcontext);
extern CUresult (*sim_pop)(CUcontext *);
extern CUresult (*sim_stream_create)(CUstream *, unsigned);
extern CUresult (*sim_stream_destroy)(CUstream);
extern int (*sim_stats)(int64_t *, int);

/* Resolve them and load the core's driver (the same library); on failure
 * print why, naming the test `who`, and exit with status 2. */
void sim_calls_load(const char *who);

#endif
