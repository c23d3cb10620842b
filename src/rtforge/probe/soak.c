/* Soak mode (--soak): measure until stopped, at low cost, and close a window
 * every --window-s (OSADL's 5 minutes by default).  Per window and CPU: the
 * max, count, overruns and the log-linear histogram (the samplers count into
 * window slots, sampler.c); per window: the telemetry's extremes, the
 * interrupt rates and, when the max crosses --alert-us, the evidence.
 * Windows go to the state folder (soakstore.c), roll into hours and days,
 * and feed the Prometheus textfile (promtext.c).
 *
 * Windows are aligned to the wall clock (a 300 s window closes at :00, :05,
 * ...) so boards' windows line up; a window is counted by monotonic time, so
 * a clock step moves its timestamps, not its length.  The first window of a
 * start and the last of a stop are partial, and say so.
 *
 * The writer wakes every TICK: drains the spike rings into each open
 * window's worst TOP_SPIKES, samples telemetry every --telemetry-s, samples
 * the interrupt counters at each boundary and closes a window GRACE after
 * its end.  Nothing here runs in the measuring threads. */
#include "soak.h"

#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <stdlib.h>
#include <string.h>
#include <sys/utsname.h>
#include <time.h>
#include <unistd.h>

#define TICK_NS (100 * 1000 * 1000LL)

static int64_t wlen(const struct run *r)
{
    return (int64_t)r->cfg.window_s * NSEC_PER_SEC;
}

static struct wacc *acc_for(struct soak *k, int64_t w)
{
    struct wacc *a = &k->acc[w % WIN_SLOTS];
    if (a->win != w) {
        memset(a, 0, sizeof *a);
        a->win = w;
        a->throttled = -1;
        a->load_max = -1;
        for (int i = 0; i < TEL_ZONES; i++) {
            a->tmax[i] = LLONG_MIN;
            a->tmin[i] = LLONG_MAX;
        }
    }
    return a;
}

static int64_t win_of(const struct run *r, int64_t mono)
{
    return mono < r->win_origin_ns ? 0 : (mono - r->win_origin_ns) / wlen(r);
}

/* Keep the worst TOP_SPIKES of each window (replace the mildest). */
static void keep_spike(struct soak *k, int cpu, int64_t wake, uint64_t lat)
{
    if (win_of(k->r, wake) < k->next_win)
        return; /* its window is closed (a spike drained after the grace: not seen) */
    struct wacc *a = acc_for(k, win_of(k->r, wake));
    if (a->ntop < TOP_SPIKES) {
        a->top[a->ntop++] = (struct spike_rec){ cpu, wake, lat };
        return;
    }
    int low = 0;
    for (int i = 1; i < TOP_SPIKES; i++)
        if (a->top[i].lat < a->top[low].lat)
            low = i;
    if (lat > a->top[low].lat)
        a->top[low] = (struct spike_rec){ cpu, wake, lat };
}

static void drain(struct soak *k)
{
    struct run *r = k->r;
    for (int i = 0; i < r->cfg.ncpus; i++) {
        struct cpu_state *c = &r->cs[i];
        uint64_t head = __atomic_load_n(&c->ring_head, __ATOMIC_ACQUIRE), tail = c->ring_tail;
        for (; tail != head; tail++) {
            const struct spike *s = &c->ring[tail % SPIKE_RING];
            keep_spike(k, c->cpu, r->start_mono_ns + (int64_t)s->t_ns + (int64_t)s->lat_ns, s->lat_ns);
        }
        __atomic_store_n(&c->ring_tail, tail, __ATOMIC_RELEASE);
    }
}

static void sample_tel(struct soak *k, int64_t now)
{
    struct tel_sample s;
    if (win_of(k->r, now) < k->next_win)
        return;
    telemetry_read(k->r->tel, &s);
    struct wacc *a = acc_for(k, win_of(k->r, now));
    a->samples++;
    for (int z = 0; z < s.nzones; z++)
        if (s.temp_mc[z] != LLONG_MIN) {
            a->tmax[z] = s.temp_mc[z] > a->tmax[z] ? s.temp_mc[z] : a->tmax[z];
            a->tmin[z] = s.temp_mc[z] < a->tmin[z] ? s.temp_mc[z] : a->tmin[z];
        }
    if (s.throttled >= 0)
        a->throttled = (a->throttled < 0 ? 0 : a->throttled) | s.throttled;
    if (s.load1 > a->load_max)
        a->load_max = s.load1;
}

static void put_ns_or_null(FILE *f, const char *key, int have, uint64_t v)
{
    if (have)
        fprintf(f, ",\"%s\":%llu", key, (unsigned long long)v);
    else
        fprintf(f, ",\"%s\":null", key);
}

static void put_tel(struct soak *k, FILE *f, const struct wacc *a, int64_t idx, double span_s)
{
    fprintf(f, ",\"tel\":{\"samples\":%d,\"temp_max_mc\":[", a->samples);
    for (int z = 0; z < k->nzones; z++)
        a->tmax[z] == LLONG_MIN ? fprintf(f, "%snull", z ? "," : "") : fprintf(f, "%s%lld", z ? "," : "", a->tmax[z]);
    fputs("],\"temp_min_mc\":[", f);
    for (int z = 0; z < k->nzones; z++)
        a->tmin[z] == LLONG_MAX ? fprintf(f, "%snull", z ? "," : "") : fprintf(f, "%s%lld", z ? "," : "", a->tmin[z]);
    fputs("],\"throttled\":", f);
    a->throttled >= 0 ? fprintf(f, "%lld", a->throttled) : fputs("null", f);
    fputs(",\"load1_max\":", f);
    a->load_max >= 0 ? fprintf(f, "%.2f", a->load_max) : fputs("null", f);
    double rates[CPU_SETSIZE], pct, top_pct;
    char top[32];
    int got = irqstat_window(k->irq, idx, span_s, rates, &pct, &top_pct, top, sizeof top);
    fputs(",\"irq_per_s\":", f);
    for (int i = 0; i < k->ncpus; i++)
        k->cum[i].irq_rate = got & 1 ? rates[i] : -1;
    if (got & 1)
        for (int i = 0; i < k->ncpus; i++)
            fprintf(f, "%s%.1f", i ? "," : "[", rates[i]);
    fputs(got & 1 ? "]" : "null", f);
    if (got & 2) {
        fprintf(f, ",\"irq_thread_pct\":%.3f,\"irq_thread_top\":", pct);
        json_str(f, top[0] ? top : NULL);
        fprintf(f, ",\"irq_thread_top_pct\":%.3f}", top_pct);
    } else {
        fputs(",\"irq_thread_pct\":null,\"irq_thread_top\":null,\"irq_thread_top_pct\":null}", f);
    }
}

static void agg_add_cpu(struct agg_cpu *a, const struct win_slot *s)
{
    a->count += s->count;
    a->sum_ns += s->sum_ns;
    a->overruns += s->overruns;
    if (s->count && s->min_ns < a->min_ns)
        a->min_ns = s->min_ns;
    if (s->count && s->max_ns > a->max_ns)
        a->max_ns = s->max_ns;
    for (unsigned b = 0; b < HIST_BUCKETS; b++)
        a->hist[b] += s->hist[b];
}

static void agg_add(struct agg *g, int64_t key, int64_t start, int64_t end, int partial, int alert, uint64_t spikes,
                    const struct wacc *a, int nzones)
{
    if (g->key < 0) {
        g->key = key;
        g->start_ns = start;
    }
    g->end_ns = end;
    g->windows++;
    g->partial_windows += (uint64_t)partial;
    g->covered_ns += (uint64_t)(end - start);
    g->alerts += (uint64_t)alert;
    g->spikes += spikes;
    for (int z = 0; z < nzones; z++)
        if (a->tmax[z] != LLONG_MIN && a->tmax[z] > g->temp_max_mc)
            g->temp_max_mc = a->tmax[z];
    if (a->throttled >= 0)
        g->throttled = (g->throttled < 0 ? 0 : g->throttled) | a->throttled;
}

/* A boundary's wall-clock time, snapped to the multiple of the window it
 * stands for when within SNAP of it: the clocks drift apart by microseconds
 * (NTP slews one of them), which must not make 10:05:00 read 10:04:59.99.
 * A step of the wall clock is larger, and shows. */
#define SNAP_NS (50 * 1000 * 1000LL)
static int64_t snap(int64_t t, int64_t w)
{
    int64_t rem = t % w;
    return rem < SNAP_NS ? t - rem : w - rem < SNAP_NS ? t + (w - rem) : t;
}

/* Close window w: its line, the rollups, the textfile, the state. */
static void close_window(struct soak *k, int64_t w, int64_t end_mono)
{
    struct run *r = k->r;
    int64_t off = real_ns() - mono_ns();
    int64_t start_mono = r->win_origin_ns + w * wlen(r);
    if (start_mono < r->start_mono_ns)
        start_mono = r->start_mono_ns;
    if (end_mono < start_mono)
        end_mono = start_mono;
    int64_t start = start_mono + off, end = end_mono + off;
    if (start_mono == r->win_origin_ns + w * wlen(r))
        start = snap(start, wlen(r));
    if (end_mono == r->win_origin_ns + (w + 1) * wlen(r))
        end = snap(end, wlen(r));
    int partial = end_mono - start_mono < wlen(r);
    int64_t start_s = start / NSEC_PER_SEC;
    struct wacc *a = acc_for(k, w);
    char *buf = NULL, q[300];
    size_t len = 0;
    FILE *f = open_memstream(&buf, &len);

    struct journal j = { .n = 0 };
    store_roll(k, start_s - start_s % 3600, start_s - start_s % 86400, &j);
    fprintf(f, "{\"v\":1,\"life\":%s,\"n\":%lld,\"start_ns\":%lld,\"end_ns\":%lld,\"partial\":%s,\"host\":",
            json_quote(k->life, q, sizeof q), (long long)k->closed, (long long)start, (long long)end,
            partial ? "true" : "false");
    json_str(f, k->host);
    fputs(",\"kernel\":", f);
    json_str(f, k->release);
    fputs(",\"kver\":", f);
    json_str(f, k->version);
    fprintf(f, ",\"interval_ns\":%lld,\"window_s\":%d,\"cpus\":[", (long long)r->cfg.interval_ns, r->cfg.window_s);
    uint64_t max_ns = 0, spikes = 0, lost = 0;
    for (int i = 0; i < k->ncpus; i++) {
        struct cpu_state *c = &r->cs[i];
        struct win_slot *s = k->tmp;
        if (!win_read(c, w, s)) {
            memset(s, 0, sizeof *s);
            s->min_ns = UINT64_MAX;
        }
        win_free(c, w);
        int have = s->count > 0;
        fprintf(f, "%s{\"cpu\":%d,\"count\":%llu", i ? "," : "", c->cpu, (unsigned long long)s->count);
        put_ns_or_null(f, "min_ns", have, s->min_ns);
        put_ns_or_null(f, "max_ns", have, s->max_ns);
        fprintf(f, ",\"sum_ns\":%llu,\"overruns\":%llu,\"spikes\":%llu,", (unsigned long long)s->sum_ns,
                (unsigned long long)s->overruns, (unsigned long long)s->spikes);
        put_hist(f, s->hist);
        fputc('}', f);
        struct cum_cpu *cu = &k->cum[i];
        for (unsigned p = 0; p <= PROM_BUCKETS; p++)
            cu->prom[p] += s->prom[p];
        cu->count += s->count;
        cu->sum_ns += s->sum_ns;
        cu->overruns += s->overruns;
        cu->last_max_ns = s->max_ns;
        cu->last_have = have;
        agg_add_cpu(&k->hour.cpu[i], s);
        agg_add_cpu(&k->day.cpu[i], s);
        if (have && s->max_ns > max_ns)
            max_ns = s->max_ns;
        spikes += s->spikes;
        lost += __atomic_load_n(&c->wins_lost, __ATOMIC_RELAXED);
    }
    fprintf(f, "],\"spikes\":%llu,\"lost_windows\":%llu", (unsigned long long)spikes, (unsigned long long)lost);
    put_tel(k, f, a, w, (double)(end_mono - start_mono) / 1e9);
    int alert = r->cfg.alert_ns && max_ns > r->cfg.alert_ns;
    if (alert)
        put_alert(k, f, a, start, off, max_ns);
    fputs("}\n", f);
    fclose(f);

    char name[48];
    utc_name(start, "windows/%Y-%m-%d.jsonl", name, sizeof name);
    snprintf(k->cur_window_file, sizeof k->cur_window_file, "%s", name);
    if (r->cfg.echo) {
        fwrite(buf, 1, len, stdout);
        fflush(stdout);
    }
    journal_add(&j, name, buf, len);

    agg_add(&k->hour, start_s - start_s % 3600, start, end, partial, alert, spikes, a, k->nzones);
    agg_add(&k->day, start_s - start_s % 86400, start, end, partial, alert, spikes, a, k->nzones);
    /* the hour with this window, and the lines to append, on the card
     * before any of them is appended (soakjournal.c) */
    store_write_pending(k, &j);
    journal_commit(k, &j);
    if (a->samples) { /* a window too short to read the sensors (the last, cut at a stop) keeps the gauges */
        k->last_tel.nzones = k->nzones;
        for (int z = 0; z < k->nzones; z++)
            k->last_tel.temp_mc[z] = a->tmax[z];
        k->last_tel.throttled = a->throttled;
        k->last_tel_samples = a->samples;
    }
    a->win = -1;
    k->closed++;
    k->windows_total++;
    k->alerts_total += (uint64_t)alert;
    k->last_end_ns = end;
    store_state(k, 1);
    prom_write(k);
    store_enforce(k);
}

static void *soak_main(void *arg)
{
    struct run *r = arg;
    struct soak *k = r->soak;
    int64_t next = mono_ns();
    for (;;) {
        next += TICK_NS;
        struct timespec ts = { (time_t)(next / NSEC_PER_SEC), (long)(next % NSEC_PER_SEC) };
        while (clock_nanosleep(CLOCK_MONOTONIC, TIMER_ABSTIME, &ts, NULL) == EINTR)
            ;
        int stopping = __atomic_load_n(&r->writer_stop, __ATOMIC_ACQUIRE);
        int64_t now = mono_ns();
        drain(k);
        if (r->cfg.telemetry_s && now >= k->next_tel && !stopping) {
            sample_tel(k, now);
            while (k->next_tel <= now)
                k->next_tel += (int64_t)r->cfg.telemetry_s * NSEC_PER_SEC;
        }
        /* interrupts are counted from boundary to boundary */
        while (now >= r->win_origin_ns + k->irq_next * wlen(r) && !stopping)
            irqstat_sample(k->irq, k->irq_next++);
        while (!stopping && now >= r->win_origin_ns + (k->next_win + 1) * wlen(r) + SOAK_GRACE_NS) {
            close_window(k, k->next_win, r->win_origin_ns + (k->next_win + 1) * wlen(r));
            k->next_win++;
        }
        reap_rtla(k, 0);
        if (stopping)
            break;
    }
    /* The samplers have stopped: every window up to the end is final, the
     * last one partial (it ends where the measuring ended). */
    drain(k);
    int64_t last = win_of(r, r->end_mono_ns);
    if (k->irq_next <= last + 1)
        irqstat_sample(k->irq, last + 1);
    for (; k->next_win <= last; k->next_win++) {
        int64_t end = r->win_origin_ns + (k->next_win + 1) * wlen(r);
        close_window(k, k->next_win, end < r->end_mono_ns ? end : r->end_mono_ns);
    }
    reap_rtla(k, 1);
    return NULL;
}

static void read_uname(struct soak *k)
{
    struct utsname u;
    uname(&u);
    snprintf(k->host, sizeof k->host, "%s", u.nodename);
    snprintf(k->release, sizeof k->release, "%s", u.release);
    snprintf(k->version, sizeof k->version, "%s", u.version);
}

/* Before the threads: the folder, its lock, the gap and kernel events. */
const char *soak_prepare(struct run *r, int *status)
{
    struct soak *k = calloc(1, sizeof *k);
    int n = r->cfg.ncpus;
    if (!k || !(k->cum = calloc((size_t)n, sizeof *k->cum)) || !(k->hour.cpu = calloc((size_t)n, sizeof(struct agg_cpu)))
        || !(k->day.cpu = calloc((size_t)n, sizeof(struct agg_cpu))) || !(k->tmp = malloc(sizeof *k->tmp))) {
        *status = 1;
        return "out of memory";
    }
    r->soak = k;
    k->r = r;
    k->ncpus = n;
    k->start_real_ns = real_ns();
    for (int i = 0; i < WIN_SLOTS; i++)
        k->acc[i].win = -1;
    agg_reset(&k->hour, n);
    agg_reset(&k->day, n);
    read_uname(k);
    return store_open(k, status);
}

int soak_start(struct run *r, pthread_t *t)
{
    struct soak *k = r->soak;
    /* boundary k of the windows falls on a multiple of window_s in wall-clock time */
    int64_t m = mono_ns(), now = real_ns();
    r->win_origin_ns = m - now % wlen(r);
    k->next_tel = r->start_mono_ns;
    k->irq = irqstat_open(r->cfg.cpus, r->cfg.ncpus);
    irqstat_sample(k->irq, 0);
    k->irq_next = 1;
    k->nzones = 0;
    struct tel_sample s;
    telemetry_read(r->tel, &s);
    k->nzones = s.nzones;
    for (int z = 0; z < k->nzones; z++)
        k->zone_no[z] = telemetry_zone(r->tel, z, k->zone_type[z], sizeof k->zone_type[z]);
    char q1[100], q2[300], q3[140];
    store_event(k, "start\",\"host\":%s,\"kernel\":%s,\"kver\":%s,\"pid\":%d,\"interval_ns\":%lld,\"window_s\":%d,"
                   "\"priority\":%d,\"ncpus\":%d,\"alert_ns\":%llu,\"rtla\":%s,\"textfile\":%s,\"keep_days\":%d,"
                   "\"max_mb\":%d,\"probe_version\":\"%s\"",
                json_quote(k->host, q1, sizeof q1), json_quote(k->release, q3, sizeof q3),
                json_quote(k->version, q2, sizeof q2), (int)getpid(), (long long)r->cfg.interval_ns, r->cfg.window_s,
                r->cfg.priority, r->cfg.ncpus, (unsigned long long)r->cfg.alert_ns, r->cfg.rtla ? "true" : "false",
                r->cfg.textfile_dir ? "true" : "false", r->cfg.keep_days, r->cfg.max_mb, PROBE_VERSION);
    prom_write(k);
    store_enforce(k);
    return pthread_create(t, NULL, soak_main, r);
}

void soak_finish(struct run *r, pthread_t t)
{
    struct soak *k = r->soak;
    __atomic_store_n(&r->writer_stop, 1, __ATOMIC_RELEASE);
    pthread_join(t, NULL);
    /* this life's hour and day, filed now (a restart adds its own records) */
    store_file_progress(k);
    store_event(k, "stop\",\"reason\":\"%s\",\"windows\":%lld", r->end_reason ? r->end_reason : "?",
                (long long)k->closed);
    store_state(k, 0);
    k->stopped = 1;
    prom_write(k);
    irqstat_close(k->irq);
}
