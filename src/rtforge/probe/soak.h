/* The soak monitor's writer state, shared by soak.c (windows), soakstore.c
 * (the state folder: events, rollups, rotation) and promtext.c (the
 * Prometheus textfile).  Only the writer thread touches it. */
#ifndef SOAK_H
#define SOAK_H

#include "rtprobe.h"

#include <sys/types.h>

/* A window is read this long after its end: a sampler preempted between
 * reading the clock and counting must have counted by then. */
#define SOAK_GRACE_NS (2 * NSEC_PER_SEC)
#define TOP_SPIKES 20           /* spikes kept per window (the worst) */
#define RTLA_PER_DAY 12         /* analyses after alerts, at most, per UTC day */
#define HOURS_KEEP_MONTHS 13
#define EVENTS_ROTATE_BYTES (1 << 20)

struct agg_cpu {
    uint64_t count, min_ns, max_ns, sum_ns, overruns;
    uint64_t hist[HIST_BUCKETS];
};

/* An hour's or a day's windows of this monitor's life, rolled up. */
struct agg {
    int64_t key;                /* its start, unix seconds (UTC); -1: empty */
    int64_t start_ns, end_ns;   /* realtime: first window's start, last one's end */
    uint64_t windows, partial_windows, covered_ns, alerts, spikes;
    long long temp_max_mc;      /* LLONG_MIN: none read */
    long long throttled;        /* firmware flags seen (OR); -1: none */
    struct agg_cpu *cpu;
};

struct spike_rec {
    int cpu;
    int64_t wake_mono;
    uint64_t lat;
};

/* What the writer gathers while a window is open (telemetry, the worst
 * spikes), one per window slot, by the time it was taken. */
struct wacc {
    int64_t win;                /* -1: free */
    int samples;
    long long tmax[TEL_ZONES], tmin[TEL_ZONES];
    long long throttled;
    double load_max;
    int ntop;
    struct spike_rec top[TOP_SPIKES];
};

struct cum_cpu {                /* since the monitor started, for Prometheus */
    uint64_t prom[PROM_BUCKETS + 1];
    uint64_t count, sum_ns, overruns;
    uint64_t last_max_ns;
    int last_have;
    double irq_rate;            /* the last window's, < 0 unknown */
};

struct soak {
    struct run *r;
    int ncpus;
    char host[65], release[65], version[256], boot_id[40], life[64];
    int64_t start_real_ns;
    int64_t next_win;           /* the next window to close */
    int64_t irq_next;           /* the next boundary to sample interrupts at */
    int64_t closed;             /* windows closed in this life */
    int64_t next_tel;
    int nzones;
    char zone_type[TEL_ZONES][48];
    int zone_no[TEL_ZONES];
    struct irqstat *irq;
    struct wacc acc[WIN_SLOTS];
    struct cum_cpu *cum;
    uint64_t windows_total, alerts_total;
    double last_gap_s;
    int stopped;                  /* the last textfile says so: rtforge_monitor_up 0 */
    int64_t last_end_ns;        /* realtime end of the last closed window */
    struct tel_sample last_tel; /* the last window's extremes, for Prometheus */
    int last_tel_samples;
    struct agg hour, day;
    struct win_slot *tmp;       /* one slot's copy */
    char cur_window_file[64];   /* never rotated away: being written */
    pid_t rtla_pid;
    char rtla_dir[4200];
    int64_t rtla_day;
    int rtla_count;
    int lock_fd;
    int over_cap_said;
};

/* soakstore.c */
int store_path(const struct soak *k, char *buf, size_t size, const char *fmt, ...)
    __attribute__((format(printf, 4, 5)));
FILE *store_read(const struct soak *k, const char *name);
void store_event(struct soak *k, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
void store_state(struct soak *k, int running);
const char *store_open(struct soak *k, int *status);
void store_enforce(struct soak *k); /* soakrotate.c */
void agg_reset(struct agg *a, int ncpus);
void agg_line(const struct soak *k, const struct agg *a, const char *kind, FILE *f);
void put_hist(FILE *f, const uint64_t *h);
void utc_name(int64_t real_ns, const char *fmt, char *buf, size_t size);

/* soakjournal.c: the lines a window appends, written to pending.jsonl first */
#define JOURNAL_MAX 8
struct jentry {
    char file[48]; /* windows/..., hours/..., days/... */
    char *line;    /* with its newline */
    size_t len;
};
struct journal {
    struct jentry e[JOURNAL_MAX];
    int n;
};
int store_append(const struct soak *k, const char *rel, const char *line, size_t len);
void journal_add(struct journal *j, const char *file, char *line, size_t len);
void journal_free(struct journal *j);
void store_roll(struct soak *k, int64_t hour_key, int64_t day_key, struct journal *j);
int store_write_pending(struct soak *k, const struct journal *j);
void journal_commit(struct soak *k, struct journal *j);
void store_flush_pending(struct soak *k);
void store_file_progress(struct soak *k);

/* soakalert.c */
void put_alert(struct soak *k, FILE *f, struct wacc *a, int64_t start_real, int64_t off, uint64_t max_ns);
void reap_rtla(struct soak *k, int wait);

/* promtext.c */
void prom_write(struct soak *k);

#endif
