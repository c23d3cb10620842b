/* The RT sampler: one per measured CPU, SCHED_FIFO, pinned.  Everything it
 * touches is preallocated and locked; it never takes a lock, never allocates,
 * never does I/O.  Shared fields are written with relaxed atomic stores so the
 * writer thread may read them concurrently (and 64-bit values never tear on
 * 32-bit ARM). */
#include "rtprobe.h"

#include <errno.h>
#include <string.h>
#include <time.h>

#define ST(p, v) __atomic_store_n((p), (v), __ATOMIC_RELAXED)
#define LD(p) __atomic_load_n((p), __ATOMIC_RELAXED)

int64_t mono_ns(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (int64_t)ts.tv_sec * NSEC_PER_SEC + ts.tv_nsec;
}

int64_t real_ns(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_REALTIME, &ts);
    return (int64_t)ts.tv_sec * NSEC_PER_SEC + ts.tv_nsec;
}

static void record(struct cpu_state *c, uint64_t lat, uint64_t missed)
{
    struct totals *t = &c->tot;
    uint64_t s0 = c->seq;
    ST(&c->seq, s0 + 1);
    __atomic_thread_fence(__ATOMIC_RELEASE);
    unsigned i = hist_index(lat);
    ST(&t->hist[i], t->hist[i] + 1);
    ST(&t->count, t->count + 1);
    ST(&t->sum_ns, t->sum_ns + lat);
    ST(&t->overruns, t->overruns + missed);
    if (lat < t->min_ns)
        ST(&t->min_ns, lat);
    if (lat > t->max_ns)
        ST(&t->max_ns, lat);
    __atomic_store_n(&c->seq, s0 + 2, __ATOMIC_RELEASE);
}

static void push_spike(struct cpu_state *c, uint64_t t_ns, uint64_t lat)
{
    uint64_t head = c->ring_head;
    ST(&c->spikes_total, c->spikes_total + 1);
    if (head - __atomic_load_n(&c->ring_tail, __ATOMIC_ACQUIRE) >= SPIKE_RING) {
        ST(&c->spikes_dropped, c->spikes_dropped + 1);
        return;
    }
    c->ring[head % SPIKE_RING].t_ns = t_ns;
    c->ring[head % SPIKE_RING].lat_ns = lat;
    __atomic_store_n(&c->ring_head, head + 1, __ATOMIC_RELEASE);
}

void *sampler_main(void *arg)
{
    struct cpu_state *c = arg;
    struct run *r = c->run;
    const struct config *cfg = &r->cfg;
    const int64_t iv = cfg->interval_ns;
    const int64_t start = r->start_mono_ns;
    int64_t next;
    int64_t sec = -1, sec_end = start; /* per-second slot, by wake time */
    struct sec_slot *slot = &c->slots[0];
    uint64_t loops = 0;
    int64_t now = start;

    /* Fault the stack in now: a page fault inside the loop is latency. */
    volatile char stack_prefault[32 * 1024];
    memset((char *)stack_prefault, 0, sizeof stack_prefault);

    /* Phase.  By default each thread starts its period when it starts, as
     * cyclictest's threads do: created one after another, they wake within
     * microseconds of each other, as the threads of a multi-threaded control
     * loop would (and contend for the same wake-up instant).  --phase spread
     * instead wakes the CPUs evenly spread over the period, from a common
     * start, so no two ever share a wake-up instant. */
    if (cfg->phase_spread)
        next = start + iv + iv * c->index / cfg->ncpus;
    else
        next = mono_ns() + iv;
    /* Every thread measures the whole duration from its own first period,
     * so each gets duration / interval periods (as with --loops). */
    const int64_t end = cfg->duration_ns ? next - iv + cfg->duration_ns : INT64_MAX;

    while (!__atomic_load_n(&r->stop, __ATOMIC_RELAXED)) {
        struct timespec ts = { (time_t)(next / NSEC_PER_SEC), (long)(next % NSEC_PER_SEC) };
        int err = clock_nanosleep(CLOCK_MONOTONIC, TIMER_ABSTIME, &ts, NULL);
        if (err == EINTR)
            continue;
        if (err)
            break;
        now = mono_ns();
        uint64_t lat = now > next ? (uint64_t)(now - next) : 0;
        /* A wake later than a whole interval means those periods never ran:
         * count them and skip ahead, instead of replaying them as a burst
         * of fake samples the way a plain absolute-timer loop would. */
        uint64_t missed = lat / (uint64_t)iv;

        /* Attribute the sample to the second it woke in: never a second the
         * writer may already have emitted. */
        while (now >= sec_end) {
            sec++;
            sec_end += NSEC_PER_SEC;
            slot = &c->slots[sec % SEC_SLOTS];
            ST(&slot->max_ns, 0);
            ST(&slot->count, 0);
            ST(&slot->overruns, 0);
            __atomic_store_n(&slot->sec, sec, __ATOMIC_RELEASE);
            ST(&c->cur_sec, sec);
        }
        ST(&slot->count, slot->count + 1);
        ST(&slot->overruns, slot->overruns + missed);
        if (lat > slot->max_ns)
            ST(&slot->max_ns, lat);

        record(c, lat, missed);
        if (cfg->spike_ns && lat > cfg->spike_ns)
            push_spike(c, (uint64_t)(next - start), lat);
        if (c->raw && c->raw_len < c->raw_cap)
            c->raw[c->raw_len++] = lat;

        loops++;
        next += (int64_t)(missed + 1) * iv;
        if (cfg->loops && loops >= cfg->loops)
            break;
        if (next > end)
            break;
    }
    c->last_wake_ns = now;
    __atomic_store_n(&c->finished, 1, __ATOMIC_RELEASE);
    return NULL;
}

/* Consistent copy of a CPU's totals for a checkpoint (non-RT side). */
void totals_snapshot(struct cpu_state *c, struct totals *out)
{
    for (;;) {
        uint64_t s1 = __atomic_load_n(&c->seq, __ATOMIC_ACQUIRE);
        if (s1 & 1)
            continue;
        out->count = LD(&c->tot.count);
        out->min_ns = LD(&c->tot.min_ns);
        out->max_ns = LD(&c->tot.max_ns);
        out->sum_ns = LD(&c->tot.sum_ns);
        out->overruns = LD(&c->tot.overruns);
        for (unsigned i = 0; i < HIST_BUCKETS; i++)
            out->hist[i] = LD(&c->tot.hist[i]);
        __atomic_thread_fence(__ATOMIC_ACQUIRE);
        if (__atomic_load_n(&c->seq, __ATOMIC_RELAXED) == s1)
            return;
    }
}
