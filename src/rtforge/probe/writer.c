/* The non-RT writer: owns every file.  Every 100 ms it drains the spike
 * rings; once a second it samples the interrupt counts (irqstat.c), emits
 * the per-second series (two seconds behind the samplers, so a slot is
 * never read while it is written) and samples telemetry; every checkpoint_s it flushes, fsyncs and atomically replaces
 * probe.json.  A SIGKILL therefore loses at most one checkpoint interval of
 * totals and about a second of series. */
#include "rtprobe.h"

#include <errno.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#define LD(p) __atomic_load_n((p), __ATOMIC_RELAXED)
#define TICK_NS (100 * 1000 * 1000LL)

static struct {
    FILE *series, *spikes, *tel;
    int64_t emitted;        /* last second written to series.jsonl */
    int64_t next_tel, next_ckpt;
    struct irqstat *irq;    /* NULL: its fields are null */
    int64_t irq_sec;        /* the second of the run last sampled */
} W;

static struct totals snap; /* 30 KB: static, only one snapshot at a time */

static FILE *open_out(const struct run *r, const char *name, const char *header)
{
    char path[4096];
    snprintf(path, sizeof path, "%s/%s", r->cfg.out_dir, name);
    FILE *f = file_fcreate(path);
    if (f && header)
        fputs(header, f);
    return f;
}

static void drain_spikes(struct run *r)
{
    for (int i = 0; i < r->cfg.ncpus; i++) {
        struct cpu_state *c = &r->cs[i];
        uint64_t head = __atomic_load_n(&c->ring_head, __ATOMIC_ACQUIRE);
        uint64_t tail = c->ring_tail;
        if (tail == head)
            continue;
        for (; tail != head; tail++) {
            const struct spike *s = &c->ring[tail % SPIKE_RING];
            fprintf(W.spikes, "%d,%llu,%llu\n", c->cpu, (unsigned long long)s->t_ns, (unsigned long long)s->lat_ns);
        }
        __atomic_store_n(&c->ring_tail, tail, __ATOMIC_RELEASE);
        fflush(W.spikes);
    }
}

static void emit_second(struct run *r, int64_t s)
{
    int n = r->cfg.ncpus;
    fprintf(W.series, "{\"t\":%lld", (long long)s);
    static const char *keys[] = { "count", "max_ns", "overruns" };
    for (int k = 0; k < 3; k++) {
        fprintf(W.series, ",\"%s\":[", keys[k]);
        for (int i = 0; i < n; i++) {
            const struct sec_slot *sl = &r->cs[i].slots[s % SEC_SLOTS];
            int here = __atomic_load_n(&sl->sec, __ATOMIC_ACQUIRE) == s;
            uint64_t v = !here ? 0 : k == 0 ? LD(&sl->count) : k == 1 ? LD(&sl->max_ns) : LD(&sl->overruns);
            if (i)
                fputc(',', W.series);
            /* no sample in that second: max is unknown, not zero */
            if (k == 1 && !here)
                fputs("null", W.series);
            else
                fprintf(W.series, "%llu", (unsigned long long)v);
        }
        fputc(']', W.series);
    }
    irqstat_write(W.irq, W.series, s);
    fputs("}\n", W.series);
    fflush(W.series);
}

static const char *policy_name(int p)
{
    return p == SCHED_RR ? "rr" : "fifo";
}

int write_probe_json(struct run *r, const char *state)
{
    const struct config *cfg = &r->cfg;
    char *buf = NULL;
    size_t len = 0;
    FILE *f = open_memstream(&buf, &len);
    int64_t end = r->end_mono_ns ? r->end_mono_ns : mono_ns();
    int64_t elapsed = end > r->start_mono_ns ? end - r->start_mono_ns : 0;

    fprintf(f, "{\"probe_format\":%d,\"state\":\"%s\",\"end_reason\":", PROBE_FORMAT, state);
    json_str(f, r->end_reason);
    fprintf(f, ",\"start_realtime_ns\":%lld,\"elapsed_ns\":%lld,\"written_realtime_ns\":%lld",
            (long long)r->start_real_ns, (long long)elapsed, (long long)real_ns());
    fprintf(f, ",\"config\":{\"interval_ns\":%lld,\"priority\":%d,\"policy\":\"%s\",\"duration_ns\":%lld,"
               "\"loops\":%llu,\"spike_ns\":%llu,\"checkpoint_s\":%d,\"telemetry_s\":%d,\"dma_latency_us\":%d,"
               "\"monitor_only\":%s,\"phase\":\"%s\",\"cpus\":[",
            (long long)cfg->interval_ns, cfg->priority, policy_name(cfg->policy), (long long)cfg->duration_ns,
            (unsigned long long)cfg->loops, (unsigned long long)cfg->spike_ns, cfg->checkpoint_s,
            cfg->telemetry_s, cfg->dma_latency_us, cfg->monitor_only ? "true" : "false",
            cfg->phase_spread ? "spread" : "together");
    for (int i = 0; i < cfg->ncpus; i++)
        fprintf(f, "%s%d", i ? "," : "", cfg->cpus[i]);
    fprintf(f, "]},\"meta\":%s,\"hist\":{\"kind\":\"loglinear\",\"sub_bits\":%d},\"cpus\":[",
            r->meta_json, HIST_SUB_BITS);
    for (int i = 0; i < cfg->ncpus; i++) {
        struct cpu_state *c = &r->cs[i];
        totals_snapshot(c, &snap);
        fprintf(f, "%s{\"cpu\":%d,\"count\":%llu,\"min_ns\":", i ? "," : "", c->cpu, (unsigned long long)snap.count);
        if (snap.count)
            fprintf(f, "%llu", (unsigned long long)snap.min_ns);
        else
            fputs("null", f);
        fprintf(f, ",\"max_ns\":%llu,\"sum_ns\":%llu,\"overruns\":%llu,\"spikes\":%llu,\"spikes_dropped\":%llu,\"buckets\":[",
                (unsigned long long)snap.max_ns, (unsigned long long)snap.sum_ns,
                (unsigned long long)snap.overruns, (unsigned long long)LD(&c->spikes_total),
                (unsigned long long)LD(&c->spikes_dropped));
        int first = 1;
        for (unsigned b = 0; b < HIST_BUCKETS; b++) {
            if (!snap.hist[b])
                continue;
            fprintf(f, "%s[%llu,%llu,%llu]", first ? "" : ",", (unsigned long long)hist_lo(b),
                    (unsigned long long)hist_hi(b), (unsigned long long)snap.hist[b]);
            first = 0;
        }
        fputs("]}", f);
    }
    fputs("]}\n", f);
    fclose(f);
    int rc = write_atomic(cfg->out_dir, "probe.json", buf, len);
    free(buf);
    return rc;
}

static void sync_files(void)
{
    FILE *fs[] = { W.series, W.spikes, W.tel };
    for (int i = 0; i < 3; i++)
        if (fs[i]) {
            fflush(fs[i]);
            fsync(fileno(fs[i]));
        }
}

static void *writer_main(void *arg)
{
    struct run *r = arg;
    const int64_t start = r->start_mono_ns;
    int64_t next = mono_ns();
    for (;;) {
        next += TICK_NS;
        struct timespec ts = { (time_t)(next / NSEC_PER_SEC), (long)(next % NSEC_PER_SEC) };
        while (clock_nanosleep(CLOCK_MONOTONIC, TIMER_ABSTIME, &ts, NULL) == EINTR)
            ;
        int stopping = __atomic_load_n(&r->writer_stop, __ATOMIC_ACQUIRE);
        int64_t now = mono_ns();
        if (W.spikes)
            drain_spikes(r);
        if (W.irq && now >= start && (now - start) / NSEC_PER_SEC > W.irq_sec) {
            W.irq_sec = (now - start) / NSEC_PER_SEC;
            irqstat_sample(W.irq, W.irq_sec);
        }
        if (W.series && !stopping && now >= start)
            while (W.emitted + 1 <= (now - start) / NSEC_PER_SEC - 2)
                emit_second(r, ++W.emitted);
        if (W.tel && (now >= W.next_tel || stopping)) {
            telemetry_sample(r->tel, W.tel, (double)(now - start) / 1e9);
            fflush(W.tel);
            while (W.next_tel <= now)
                W.next_tel += (int64_t)r->cfg.telemetry_s * NSEC_PER_SEC;
        }
        if (stopping)
            break;
        if (now >= W.next_ckpt) {
            sync_files();
            write_probe_json(r, "running");
            while (W.next_ckpt <= now)
                W.next_ckpt += (int64_t)r->cfg.checkpoint_s * NSEC_PER_SEC;
        }
    }
    /* The samplers have stopped: every remaining second is final. */
    int64_t last = -1;
    for (int i = 0; i < r->cfg.ncpus; i++)
        if (LD(&r->cs[i].cur_sec) > last)
            last = LD(&r->cs[i].cur_sec);
    while (W.series && W.emitted < last)
        emit_second(r, ++W.emitted);
    sync_files();
    return NULL;
}

int writer_start(struct run *r, pthread_t *t)
{
    W.emitted = -1;
    W.next_tel = r->start_mono_ns;
    W.next_ckpt = r->start_mono_ns + (int64_t)r->cfg.checkpoint_s * NSEC_PER_SEC;
    if (!r->cfg.monitor_only) {
        W.series = open_out(r, "series.jsonl", NULL);
        W.spikes = open_out(r, "spikes.csv", "cpu,t_ns,lat_ns\n");
        if (!W.series || !W.spikes)
            return -1;
        W.irq = irqstat_open(r->cfg.cpus, r->cfg.ncpus);
        W.irq_sec = -1;
    }
    if (r->cfg.telemetry_s > 0 && !(W.tel = open_out(r, "telemetry.jsonl", NULL)))
        return -1;
    return pthread_create(t, NULL, writer_main, r);
}

void writer_finish(struct run *r, pthread_t t)
{
    __atomic_store_n(&r->writer_stop, 1, __ATOMIC_RELEASE);
    pthread_join(t, NULL);
    FILE *fs[] = { W.series, W.spikes, W.tel };
    for (int i = 0; i < 3; i++)
        if (fs[i])
            fclose(fs[i]);
    irqstat_close(W.irq);
    W.irq = NULL;
}
