/* rtprobe: the latency sampler that runs on the board.
 *
 * Same method as cyclictest (SCHED_FIFO thread per CPU, mlockall,
 * /dev/cpu_dma_latency, clock_nanosleep(TIMER_ABSTIME), latency = wake time -
 * expected time) so numbers are comparable, but it keeps what cyclictest
 * throws away: a histogram that never overflows, whole missed periods,
 * timestamped spikes, a per-second series and telemetry.
 *
 * Threads: one RT sampler per measured CPU (sampler.c) and one non-RT writer
 * (writer.c) that owns every file and every slow read.  The only shared state
 * is below; each field has exactly one writing thread.
 */
#ifndef RTPROBE_H
#define RTPROBE_H

#define _GNU_SOURCE
/* 64-bit file offsets and inode numbers on 32-bit boards too: without it
 * readdir() fails with EOVERFLOW on a file system with 64-bit inodes (btrfs,
 * XFS, an overlay), and the monitor's folder would look empty. */
#define _FILE_OFFSET_BITS 64
#include <pthread.h>
#include <stdint.h>
#include <stdio.h>
#include <sys/types.h>

#define PROBE_VERSION "1.0"
/* probe.json layout; bump when a field changes meaning (history in
 * rtforge/results/raw/probe.py). */
#define PROBE_FORMAT 1

#define NSEC_PER_SEC 1000000000LL

/* ---- histogram (hist.c) -------------------------------------------------
 * Log-linear: exact below 2^SUB_BITS ns, then 64 buckets per power of two,
 * so a bucket is at most 1/64 (1.6 %) of its lower bound wide and every
 * uint64 value has a bucket: the histogram cannot overflow. */
#define HIST_SUB_BITS 7
#define HIST_BUCKETS (128 + 57 * 64)

unsigned hist_index(uint64_t v);
uint64_t hist_lo(unsigned idx);
uint64_t hist_hi(unsigned idx); /* inclusive */

/* ---- soak windows (sampler.c fills them, soak.c closes them) ------------
 * In soak mode each sampler also counts its wake-ups into the window of its
 * wake time, in a ring of WIN_SLOTS slots: the writer reads a window once it
 * is GRACE past its end and then frees the slot (win = -1), long before the
 * sampler comes back to it WIN_SLOTS - 1 windows later.  prom[] counts the
 * wake-ups per Prometheus bucket exactly (integer ns against prom_le_ns[]),
 * so the exported histogram is not an approximation of the log-linear one. */
#define WIN_SLOTS 4
#define PROM_BUCKETS 24            /* finite le bounds; prom[PROM_BUCKETS] is +Inf */
extern const uint64_t prom_le_ns[PROM_BUCKETS];

struct win_slot {
    int64_t win;                   /* window number held; -1 = free */
    uint64_t seq;                  /* odd while the sampler writes */
    uint64_t count, min_ns, max_ns, sum_ns, overruns, spikes;
    uint64_t prom[PROM_BUCKETS + 1];
    uint64_t hist[HIST_BUCKETS];
};

/* ---- shared per-CPU state ------------------------------------------------ */

/* Totals guarded by a sequence counter: the sampler bumps seq to odd, updates,
 * bumps to even; the writer copies and retries if seq moved.  This keeps the
 * sampler wait-free and gives the writer a consistent snapshot for
 * checkpoints (count always equals the histogram's sum). */
struct totals {
    uint64_t count, min_ns, max_ns, sum_ns, overruns;
    uint64_t hist[HIST_BUCKETS];
};

/* One slot per second, ring of SEC_SLOTS; the writer reads a second only
 * after the sampler has moved two seconds past it. */
#define SEC_SLOTS 64
struct sec_slot {
    int64_t sec;          /* -1 = never used */
    uint64_t max_ns, count, overruns;
};

/* Spikes: single-producer single-consumer ring, drained by the writer. */
#define SPIKE_RING 4096
struct spike {
    uint64_t t_ns;   /* expected wake time, relative to the run start */
    uint64_t lat_ns;
};

struct run;
struct __attribute__((aligned(64))) cpu_state {
    struct run *run;
    int cpu;
    int index;              /* position in cfg.cpus */
    pthread_t thread;
    int started;
    /* written by the sampler */
    uint64_t seq;
    struct totals tot;
    struct sec_slot slots[SEC_SLOTS];
    struct spike ring[SPIKE_RING];
    uint64_t ring_head;     /* producer index */
    uint64_t spikes_total, spikes_dropped;
    int64_t cur_sec;        /* latest second with a sample, -1 before */
    int64_t last_wake_ns;   /* set when the sampler exits */
    int finished;
    /* written by the writer, on its own cache line */
    uint64_t ring_tail __attribute__((aligned(64)));
    /* soak mode: WIN_SLOTS windows (NULL otherwise) */
    struct win_slot *wins;
    int64_t cur_win;
    uint64_t wins_lost;     /* windows the writer was too late to read */
    /* optional raw sample log for tests (--raw) */
    uint64_t *raw;
    uint64_t raw_cap, raw_len;
};

/* ---- configuration and run -------------------------------------------- */
struct config {
    int64_t interval_ns;
    int priority;
    int policy;             /* SCHED_FIFO or SCHED_RR */
    int *cpus;
    int ncpus;
    int64_t duration_ns;    /* 0 = no limit */
    uint64_t loops;         /* per thread, 0 = no limit */
    uint64_t spike_ns;      /* 0 = off */
    int checkpoint_s;
    int telemetry_s;        /* 0 = off */
    int dma_latency_us;     /* value held in /dev/cpu_dma_latency, -1 = don't */
    const char *out_dir;
    const char *raw_path;
    int monitor_only;
    int phase_spread;       /* 1: CPUs woken spread over the period; 0: each
                             * thread starts its period when it starts, as
                             * cyclictest's do (they wake nearly together) */
    int argc;
    char **argv;
    /* soak mode (--soak): windows into state_dir, see soak.c */
    int soak;
    const char *state_dir;
    int window_s;
    const char *textfile_dir;
    uint64_t alert_ns;      /* 0 = no alerts */
    const char *rtla;       /* rtla to run after an alert window, NULL = none */
    int rtla_s;
    int keep_days;
    int max_mb;
    int echo;               /* each window's line also on stdout */
};

struct run {
    struct config cfg;
    struct cpu_state *cs;   /* cfg.ncpus entries */
    int64_t start_mono_ns;  /* first expected wake is start + interval */
    int64_t start_real_ns;
    int stop;               /* set by main on signal; read by samplers */
    int writer_stop;        /* set by main once the samplers are joined */
    int64_t end_mono_ns;    /* set when the run ends */
    const char *end_reason;
    int dma_fd;
    int dma_readback_us;    /* -1 unknown */
    char *meta_json;        /* rendered once before the run */
    struct telemetry *tel;  /* owned by the writer during the run */
    int64_t win_origin_ns;  /* soak: monotonic time of window boundary 0 */
    struct soak *soak;      /* soak: the writer's state (soak.c) */
};

/* sampler.c */
void *sampler_main(void *arg);
void totals_snapshot(struct cpu_state *c, struct totals *out);

/* writer.c */
int writer_start(struct run *r, pthread_t *t);
void writer_finish(struct run *r, pthread_t t);
int write_probe_json(struct run *r, const char *state);

/* sysinfo.c */
struct telemetry;
extern const char *g_sysroot;
char *collect_meta(const struct config *cfg, const struct telemetry *t, int dma_readback_us);
struct telemetry *telemetry_open(void);
void telemetry_sample(struct telemetry *t, FILE *f, double t_s);
void telemetry_close(struct telemetry *t);
int read_text(const char *path, char *buf, size_t size);

/* irqstat.c: interrupts per CPU and irq/ threads' CPU use, per second */
struct irqstat;
struct irqstat *irqstat_open(const int *cpus, int ncpus);
void irqstat_sample(struct irqstat *s, int64_t sec);
void irqstat_write(const struct irqstat *s, FILE *f, int64_t sec);
void irqstat_close(struct irqstat *s);

/* soak.c: the writer of soak mode; soak_prepare runs before the threads */
struct soak;
const char *soak_prepare(struct run *r, int *status);
int soak_start(struct run *r, pthread_t *t);
void soak_finish(struct run *r, pthread_t t);
int win_read(struct cpu_state *c, int64_t w, struct win_slot *out);
void win_free(struct cpu_state *c, int64_t w);

/* telemetry as numbers (sysinfo.c), for the soak monitor's extremes */
#define TEL_ZONES 16
struct tel_sample {
    int nzones;
    long long temp_mc[TEL_ZONES];  /* LLONG_MIN: unreadable */
    long long throttled;           /* -1: no firmware flags */
    double load1;                  /* < 0: unknown */
};
void telemetry_read(struct telemetry *t, struct tel_sample *s);
int telemetry_zone(const struct telemetry *t, int i, char *type, size_t size);

/* irqstat.c, over a window: interrupts per second per CPU and the irq/
 * threads' CPU use (% of one CPU); 0 when the window was not sampled */
int irqstat_window(const struct irqstat *s, int64_t idx, double span_s, double *per_cpu, double *thread_pct,
                   double *top_pct, char *top, size_t top_size);

/* jsonw.c */
void json_str(FILE *f, const char *s);
const char *json_quote(const char *s, char *out, size_t size);

/* util */
int64_t mono_ns(void);
int64_t real_ns(void);

/* safefile.c: every file the probe creates or writes */
int write_atomic(const char *dir, const char *name, const char *data, size_t len);
int file_create(const char *path, mode_t mode);
FILE *file_fcreate(const char *path);
int file_open(const char *path, int flags); /* an existing or new regular file (O_CREAT in flags) */
int owned_dir(const char *dir, char *why, size_t size);

#endif
