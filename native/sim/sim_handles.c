/*
 * sim_handles.c - the registry that turns objects into opaque handles.
 *
 * A handle is  generation << 32 | slot << 3 | type.  The slot indexes a table
 * that holds the object, its type and the slot's current generation. Freed
 * slots are reused per type, last freed first. Freeing a handle bumps the
 * generation, so a stale handle never reaches a reused slot's new object,
 * except for streams: a real driver hands a new stream the handle of the
 * stream destroyed just before, even while that stream's work still runs
 * (an H200: 20 of 20 times, bench/handle_reuse.py), so here a new stream
 * takes the last destroyed stream's handle too. And a device's primary
 * context has one handle for the process's life: retained again after its
 * last release destroyed it, the new one has the old one's handle, as on an
 * H100 (bench/ctx_reuse.py); the slot is parked meanwhile. A handle of an
 * event that is gone (destroyed, or with its context) stays known as such
 * (its generation is behind its slot's), so that a later call given it is
 * counted: on that H100 cuEventRecord, cuEventQuery and cuEventDestroy of an
 * event of a destroyed context each crashed the process (SIGSEGV), and a
 * real driver may give a destroyed event's handle to a new one. Made-up
 * values fail the type, bounds or generation check. Generations start at 1, so no handle is 0,
 * CU_STREAM_LEGACY (1) or CU_STREAM_PER_THREAD (2). Called with sim.lock held.
 */
#include <stdlib.h>

#include "sim_internal.h"

#define SLOT_LIMIT (1u << 29)
#define NO_SLOT    UINT32_MAX

struct slot {
    void *obj;
    uint32_t gen;
    uint8_t type;       /* 0 while free */
    uint32_t next_free;
};

static struct slot *slots;
static uint32_t nslots, capslots;
static uint32_t free_head[8] = {NO_SLOT, NO_SLOT, NO_SLOT, NO_SLOT, NO_SLOT, NO_SLOT, NO_SLOT, NO_SLOT}; /* by type */

static uint64_t encode(uint32_t gen, uint32_t idx, enum sim_type type)
{
    return (uint64_t)gen << 32 | (uint64_t)idx << 3 | (uint64_t)type;
}

uint64_t sim_handle_new(enum sim_type type, void *obj)
{
    uint32_t idx;
    if (free_head[type] != NO_SLOT) {
        idx = free_head[type];
        free_head[type] = slots[idx].next_free;
    } else {
        if (nslots == capslots) {
            uint32_t cap = capslots ? capslots * 2 : 256;
            if (cap > SLOT_LIMIT)
                return 0;
            struct slot *grown = realloc(slots, (size_t)cap * sizeof *grown);
            if (!grown)
                return 0;
            slots = grown;
            capslots = cap;
        }
        idx = nslots++;
        slots[idx].gen = 1;
    }
    slots[idx].obj = obj;
    slots[idx].type = (uint8_t)type;
    slots[idx].next_free = NO_SLOT;
    return encode(slots[idx].gen, idx, type);
}

static struct slot *find(uint64_t handle, enum sim_type type)
{
    uint32_t idx = (uint32_t)(handle >> 3) & (SLOT_LIMIT - 1);
    if ((handle & 7) != (uint64_t)type || idx >= nslots)
        return NULL;
    return &slots[idx];
}

void *sim_handle_get(uint64_t handle, enum sim_type type)
{
    struct slot *s = find(handle, type);
    if (!s || s->type != type || s->gen != (uint32_t)(handle >> 32))
        return NULL;
    return s->obj;
}

void sim_handle_free(uint64_t handle)
{
    uint32_t idx = (uint32_t)(handle >> 3) & (SLOT_LIMIT - 1);
    if (!handle || idx >= nslots || slots[idx].gen != (uint32_t)(handle >> 32) ||
        slots[idx].type != (uint8_t)(handle & 7)) /* free already (a stream's keeps its generation) */
        return;
    struct slot *s = &slots[idx];
    uint8_t type = s->type;
    s->obj = NULL;
    s->type = 0;
    if (type != SIM_T_STREAM && ++s->gen == 0)
        s->gen = 1;
    s->next_free = free_head[type];
    free_head[type] = idx;
}

bool sim_handle_was(uint64_t handle, enum sim_type type)
{
    struct slot *s = find(handle, type);
    uint32_t gen = (uint32_t)(handle >> 32);
    if (!s || gen == 0)
        return false;
    return gen < s->gen || (gen == s->gen && s->type == (uint8_t)type && !s->obj); /* released, or parked */
}

void sim_handle_park(uint64_t handle)
{
    struct slot *s = find(handle, (enum sim_type)(handle & 7));
    if (s && s->gen == (uint32_t)(handle >> 32))
        s->obj = NULL;
}

void sim_handle_revive(uint64_t handle, void *obj)
{
    struct slot *s = find(handle, (enum sim_type)(handle & 7));
    if (s && s->gen == (uint32_t)(handle >> 32))
        s->obj = obj;
}
