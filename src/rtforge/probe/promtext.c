/* The soak monitor's figures for Prometheus, in node_exporter's textfile
 * collector format (the text exposition format), rewritten atomically at
 * every window: a temp file in the same folder (mkstemp's name, safefile.c),
 * then rename, so a scrape never reads half a file (node_exporter reads
 * only *.prom).  At the stop the last file says so (rtforge_monitor_up 0).
 *
 * Base units (seconds, celsius), one series per measured CPU (label cpu).
 * The histogram is cumulative since this monitor started, counted exactly
 * at the le bounds (prom_le_ns, in the samplers), so rate() and
 * histogram_quantile() work on it; a restart resets it, which rate() and
 * increase() handle as any counter reset. */
#include "soak.h"

#include <limits.h>
#include <stdlib.h>
#include <string.h>

#define PFX "rtforge_"

static void head(FILE *f, const char *name, const char *type, const char *help)
{
    fprintf(f, "# HELP " PFX "%s %s\n# TYPE " PFX "%s %s\n", name, help, name, type);
}

/* A label value: backslash, double quote and newline escaped. */
static void label(FILE *f, const char *v)
{
    fputc('"', f);
    for (; *v; v++) {
        if (*v == '\\' || *v == '"')
            fputc('\\', f);
        if (*v == '\n')
            fputs("\\n", f);
        else
            fputc(*v, f);
    }
    fputc('"', f);
}

/* ns as seconds, exactly (no float rounding of a 64-bit count). */
static void seconds(FILE *f, uint64_t ns)
{
    fprintf(f, "%llu.%09llu", (unsigned long long)(ns / NSEC_PER_SEC), (unsigned long long)(ns % NSEC_PER_SEC));
}

static void le_text(char *buf, size_t size, uint64_t ns)
{
    /* decimal seconds, trailing zeros dropped: 0.000005, 0.0001, 0.1 */
    snprintf(buf, size, "%llu.%09llu", (unsigned long long)(ns / NSEC_PER_SEC),
             (unsigned long long)(ns % NSEC_PER_SEC));
    size_t n = strlen(buf);
    while (n > 2 && buf[n - 1] == '0' && buf[n - 2] != '.')
        buf[--n] = 0;
}

static const struct {
    int bit;
    const char *flag;
} FLAGS[] = { { 0, "under_voltage" }, { 1, "arm_freq_capped" }, { 2, "throttled" }, { 3, "soft_temp_limit" } };

void prom_write(struct soak *k)
{
    const struct run *r = k->r;
    if (!r->cfg.textfile_dir)
        return;
    char *buf = NULL;
    size_t len = 0;
    FILE *f = open_memstream(&buf, &len);
    int n = k->ncpus;

    /* what a stopped monitor leaves: a file that says it stopped, not the last figures standing for live ones */
    head(f, "monitor_up", "gauge", "1 while the monitor measures; 0 once it stopped (the figures are its last).");
    fprintf(f, PFX "monitor_up %d\n", !k->stopped);
    head(f, "window_max_latency_seconds", "gauge", "Worst wake-up latency in the last closed window, per CPU.");
    for (int i = 0; i < n; i++)
        if (k->cum[i].last_have) {
            fprintf(f, PFX "window_max_latency_seconds{cpu=\"%d\"} ", r->cfg.cpus[i]);
            seconds(f, k->cum[i].last_max_ns);
            fputc('\n', f);
        }
    head(f, "latency_seconds", "histogram", "Wake-up latency (wake time - expected time) since the monitor started.");
    for (int i = 0; i < n; i++) {
        uint64_t cum = 0;
        char le[40];
        for (int p = 0; p <= PROM_BUCKETS; p++) {
            cum += k->cum[i].prom[p];
            if (p < PROM_BUCKETS)
                le_text(le, sizeof le, prom_le_ns[p]);
            fprintf(f, PFX "latency_seconds_bucket{cpu=\"%d\",le=\"%s\"} %llu\n", r->cfg.cpus[i],
                    p < PROM_BUCKETS ? le : "+Inf", (unsigned long long)cum);
        }
        fprintf(f, PFX "latency_seconds_sum{cpu=\"%d\"} ", r->cfg.cpus[i]);
        seconds(f, k->cum[i].sum_ns);
        fprintf(f, "\n" PFX "latency_seconds_count{cpu=\"%d\"} %llu\n", r->cfg.cpus[i],
                (unsigned long long)k->cum[i].count);
    }
    head(f, "samples_total", "counter", "Wake-ups measured since the monitor started.");
    for (int i = 0; i < n; i++)
        fprintf(f, PFX "samples_total{cpu=\"%d\"} %llu\n", r->cfg.cpus[i], (unsigned long long)k->cum[i].count);
    head(f, "overruns_total", "counter", "Periods missed entirely (a wake-up later than a whole interval).");
    for (int i = 0; i < n; i++)
        fprintf(f, PFX "overruns_total{cpu=\"%d\"} %llu\n", r->cfg.cpus[i], (unsigned long long)k->cum[i].overruns);
    head(f, "interrupts_per_second", "gauge", "Interrupts a measured CPU took per second in the last window.");
    for (int i = 0; i < n; i++)
        if (k->cum[i].irq_rate >= 0)
            fprintf(f, PFX "interrupts_per_second{cpu=\"%d\"} %.1f\n", r->cfg.cpus[i], k->cum[i].irq_rate);
    head(f, "windows_total", "counter", "Windows closed since the monitor started.");
    fprintf(f, PFX "windows_total %llu\n", (unsigned long long)k->windows_total);
    head(f, "alert_windows_total", "counter", "Windows whose max crossed the alert threshold.");
    fprintf(f, PFX "alert_windows_total %llu\n", (unsigned long long)k->alerts_total);
    head(f, "window_seconds", "gauge", "The length of a window.");
    fprintf(f, PFX "window_seconds %d\n", r->cfg.window_s);
    head(f, "interval_seconds", "gauge", "The wake-up period measured.");
    fputs(PFX "interval_seconds ", f);
    seconds(f, (uint64_t)r->cfg.interval_ns);
    fputc('\n', f);
    if (r->cfg.alert_ns) {
        head(f, "alert_threshold_seconds", "gauge", "A window whose max is over this keeps its evidence.");
        fputs(PFX "alert_threshold_seconds ", f);
        seconds(f, r->cfg.alert_ns);
        fputc('\n', f);
    }
    if (k->closed) {
        head(f, "window_end_timestamp_seconds", "gauge", "When the last closed window ended (Unix time).");
        fputs(PFX "window_end_timestamp_seconds ", f);
        seconds(f, (uint64_t)k->last_end_ns);
        fputc('\n', f);
    }
    head(f, "start_timestamp_seconds", "gauge", "When this monitor started measuring (Unix time).");
    fputs(PFX "start_timestamp_seconds ", f);
    seconds(f, (uint64_t)k->start_real_ns);
    fputc('\n', f);
    head(f, "last_gap_seconds", "gauge", "The time not measured before this start (0: the first start).");
    fprintf(f, PFX "last_gap_seconds %.3f\n", k->last_gap_s > 0 ? k->last_gap_s : 0.0);
    head(f, "kernel_info", "gauge", "The kernel measured (uname -r and -v): a change marks a new kernel.");
    fputs(PFX "kernel_info{release=", f);
    label(f, k->release);
    fputs(",version=", f);
    label(f, k->version);
    fputs("} 1\n", f);
    int temps = 0;
    for (int z = 0; z < k->last_tel.nzones && k->last_tel_samples; z++)
        if (k->last_tel.temp_mc[z] != LLONG_MIN) {
            if (!temps++)
                head(f, "temperature_celsius", "gauge", "The hottest reading of each thermal zone in the last window that read it.");
            fprintf(f, PFX "temperature_celsius{zone=\"%d\",type=", k->zone_no[z]);
            label(f, k->zone_type[z]);
            fprintf(f, "} %.3f\n", (double)k->last_tel.temp_mc[z] / 1000.0);
        }
    if (k->last_tel_samples && k->last_tel.throttled >= 0) {
        head(f, "throttled", "gauge", "Raspberry Pi firmware flags seen in the last window that read them (1: at least once).");
        for (unsigned i = 0; i < sizeof FLAGS / sizeof *FLAGS; i++)
            fprintf(f, PFX "throttled{flag=\"%s\"} %d\n", FLAGS[i].flag, (int)((k->last_tel.throttled >> FLAGS[i].bit) & 1));
    }
    fclose(f);
    if (write_atomic(r->cfg.textfile_dir, "rtforge.prom", buf, len))
        fprintf(stderr, "rtprobe: warning: cannot write %s/rtforge.prom\n", r->cfg.textfile_dir);
    free(buf);
}
