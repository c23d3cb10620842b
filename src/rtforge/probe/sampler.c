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

/* Prometheus's le bounds (ns): the cycle times people run, dense where RT
 * latencies live (5 µs to 1 ms), then the ranges of a broken system. */
const uint64_t prom_le_ns[PROM_BUCKETS] = {
    5000, 10000, 15000, 20000, 25000, 30000, 40000, 50000, 60000, 75000, 100000, 125000,
    150000, 200000, 250000, 300000, 400000, 500000, 750000, 1000000, 2000000, 5000000, 10000000, 100000000,
};

/* Enter window w's slot.  The writer frees a slot GRACE after its window
 * ends; one still held means the writer is WIN_SLOTS - 1 windows behind, and
 * the old window is given up rather than mixed into this one. */
static struct win_slot *win_enter(struct cpu_state *c, int64_t w)
{
    struct win_slot *s = &c->wins[w % WIN_SLOTS];
    if (LD(&s->win) != -1 || LD(&s->count)) {
        uint64_t s0 = LD(&s->seq);
        ST(&s->seq, s0 + 1);
        __atomic_thread_fence(__ATOMIC_RELEASE);
        ST(&s->count, 0);
        ST(&s->sum_ns, 0);
        ST(&s->overruns, 0);
        ST(&s->spikes, 0);
        ST(&s->max_ns, 0);
        for (unsigned i = 0; i <= PROM_BUCKETS; i++)
            ST(&s->prom[i], 0);
        for (unsigned i = 0; i < HIST_BUCKETS; i++)
            ST(&s->hist[i], 0);
        __atomic_store_n(&s->seq, s0 + 2, __ATOMIC_RELEASE);
        ST(&c->wins_lost, c->wins_lost + 1);
    }
    ST(&s->min_ns, UINT64_MAX);
    __atomic_store_n(&s->win, w, __ATOMIC_RELEASE);
    ST(&c->cur_win, w);
    return s;
}

static void win_record(struct win_slot *s, uint64_t lat, uint64_t missed, int spike)
{
    uint64_t s0 = s->seq;
    ST(&s->seq, s0 + 1);
    __atomic_thread_fence(__ATOMIC_RELEASE);
    unsigned i = hist_index(lat), p = 0;
    while (p < PROM_BUCKETS && lat > prom_le_ns[p])
        p++;
    ST(&s->hist[i], s->hist[i] + 1);
    ST(&s->prom[p], s->prom[p] + 1);
    ST(&s->count, s->count + 1);
    ST(&s->sum_ns, s->sum_ns + lat);
    ST(&s->overruns, s->overruns + missed);
    ST(&s->spikes, s->spikes + (uint64_t)spike);
    if (lat < s->min_ns)
        ST(&s->min_ns, lat);
    if (lat > s->max_ns)
        ST(&s->max_ns, lat);
    __atomic_store_n(&s->seq, s0 + 2, __ATOMIC_RELEASE);
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
    /* soak windows, by wake time like the seconds */
    const int64_t wlen = (int64_t)cfg->window_s * NSEC_PER_SEC;
    int64_t win = 0, win_end = r->win_origin_ns + wlen;
    struct win_slot *wslot = c->wins ? win_enter(c, 0) : NULL;
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
        int spike = cfg->spike_ns && lat > cfg->spike_ns;
        if (wslot) {
            while (now >= win_end) {
                win_end += wlen;
                wslot = win_enter(c, ++win);
            }
            win_record(wslot, lat, missed, spike);
        }
        if (spike)
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

/* A consistent copy of window w's slot (non-RT side); 0 when the slot does
 * not hold w (no wake-up of this CPU fell in it, or it was given up). */
int win_read(struct cpu_state *c, int64_t w, struct win_slot *out)
{
    struct win_slot *s = &c->wins[w % WIN_SLOTS];
    for (;;) {
        uint64_t s1 = __atomic_load_n(&s->seq, __ATOMIC_ACQUIRE);
        if (s1 & 1)
            continue;
        if (__atomic_load_n(&s->win, __ATOMIC_ACQUIRE) != w)
            return 0;
        out->win = w;
        out->count = LD(&s->count);
        out->min_ns = LD(&s->min_ns);
        out->max_ns = LD(&s->max_ns);
        out->sum_ns = LD(&s->sum_ns);
        out->overruns = LD(&s->overruns);
        out->spikes = LD(&s->spikes);
        for (unsigned i = 0; i <= PROM_BUCKETS; i++)
            out->prom[i] = LD(&s->prom[i]);
        for (unsigned i = 0; i < HIST_BUCKETS; i++)
            out->hist[i] = LD(&s->hist[i]);
        __atomic_thread_fence(__ATOMIC_ACQUIRE);
        if (__atomic_load_n(&s->seq, __ATOMIC_RELAXED) == s1 && LD(&s->win) == w)
            return 1;
    }
}

/* Clear window w's slot for the sampler's next lap (non-RT side, after the
 * grace: the sampler is in a later window by then). */
void win_free(struct cpu_state *c, int64_t w)
{
    struct win_slot *s = &c->wins[w % WIN_SLOTS];
    if (LD(&s->win) != w)
        return;
    uint64_t s0 = LD(&s->seq);
    ST(&s->seq, s0 + 1);
    __atomic_thread_fence(__ATOMIC_RELEASE);
    ST(&s->count, 0);
    ST(&s->sum_ns, 0);
    ST(&s->overruns, 0);
    ST(&s->spikes, 0);
    ST(&s->max_ns, 0);
    for (unsigned i = 0; i <= PROM_BUCKETS; i++)
        ST(&s->prom[i], 0);
    for (unsigned i = 0; i < HIST_BUCKETS; i++)
        ST(&s->hist[i], 0);
    /* a sampler that already claimed the slot for a later window keeps it */
    int64_t expected = w;
    __atomic_compare_exchange_n(&s->win, &expected, -1, 0, __ATOMIC_RELEASE, __ATOMIC_RELAXED);
    __atomic_store_n(&s->seq, s0 + 2, __ATOMIC_RELEASE);
}
