/* rtprobe command line, set-up and the run's life cycle.  Exit status:
 * 0 done (also when ended early by a signal: probe.json says so), 2 bad
 * arguments, 3 missing privileges (SCHED_FIFO/mlockall), 1 anything else. */
#include "rtprobe.h"

#include <errno.h>
#include <fcntl.h>
#include <getopt.h>
#include <sched.h>
#include <signal.h>
#include <stdarg.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#define EXIT_USAGE 2
#define EXIT_PERM 3

static void fail(int status, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    fputs("rtprobe: ", stderr);
    vfprintf(stderr, fmt, ap);
    fputc('\n', stderr);
    va_end(ap);
    exit(status);
}

static const char usage_text[] =
    "usage: rtprobe --out DIR [options]     measure wake-up latency\n"
    "       rtprobe --check [--priority N]  can this user run SCHED_FIFO + mlockall?\n"
    "       rtprobe --meta                  print the system metadata as JSON\n"
    "       rtprobe --hist-stdin            histogram of ns values on stdin (tests)\n"
    "  -i, --interval-us N    wake-up interval (default 1000)\n"
    "  -p, --priority N       RT priority 1-99 (default 90)\n"
    "      --policy fifo|rr   scheduling policy (default fifo)\n"
    "  -c, --cpus LIST        CPUs to measure, e.g. 0-3,6 (default: all allowed)\n"
    "  -d, --duration-s N     stop after N seconds (default: until a signal)\n"
    "  -l, --loops N          stop after N wake-ups per CPU\n"
    "      --spike-ns N       log wake-ups later than N ns (default interval/2, 0 off)\n"
    "      --phase together|spread  each thread starts its period as it starts, like\n"
    "                         cyclictest (default), or CPUs spread evenly over the period\n"
    "      --checkpoint-s N   rewrite probe.json every N s (default 10)\n"
    "      --telemetry-s N    sample telemetry every N s (default 1, 0 off)\n"
    "      --dma-latency-us N value held in /dev/cpu_dma_latency (default 0, -1 off)\n"
    "      --monitor          telemetry only, no measurement threads\n"
    "      --soak             soak monitor: measure until stopped, in windows kept in --state\n"
    "      --state DIR        the soak monitor's folder (windows, hours, days, events)\n"
    "      --window-s N       window length (default 300, as OSADL's farm)\n"
    "      --textfile-dir DIR also write DIR/rtforge.prom for node_exporter at each window\n"
    "      --alert-us N       keep evidence of windows whose max is over N µs\n"
    "      --rtla PATH        after an alert window, run PATH timerlat top --aa-only\n"
    "      --rtla-s N         for at most N seconds (default 30)\n"
    "      --keep-days N      windows and evidence kept N days (default 14)\n"
    "      --max-mb N         the folder's size cap in MiB (default 100)\n"
    "      --echo             also print each window's and event's line on stdout\n"
    "      --raw FILE         also write every sample (tests; bounded memory)\n"
    "      --sysroot DIR      read /sys and /proc below DIR (tests)\n";

static int64_t num(const char *opt, const char *s, int64_t lo, int64_t hi)
{
    char *end;
    errno = 0;
    long long v = strtoll(s, &end, 10);
    if (errno || end == s || *end || v < lo || v > hi)
        fail(EXIT_USAGE, "%s wants a whole number from %lld to %lld, got '%s'", opt, (long long)lo, (long long)hi, s);
    return v;
}

/* "0-3,6" -> sorted unique list; each CPU must be in the allowed mask. */
static int parse_cpus(const char *s, int **out, const cpu_set_t *allowed)
{
    int *v = calloc(CPU_SETSIZE, sizeof(int)), n = 0;
    cpu_set_t seen;
    CPU_ZERO(&seen);
    const char *p = s;
    while (*p) {
        char *end;
        long a = strtol(p, &end, 10), b = a;
        if (end == p || a < 0)
            fail(EXIT_USAGE, "--cpus wants a list like 0-3,6, got '%s'", s);
        p = end;
        if (*p == '-') {
            b = strtol(++p, &end, 10);
            if (end == p || b < a)
                fail(EXIT_USAGE, "--cpus wants a list like 0-3,6, got '%s'", s);
            p = end;
        }
        if (*p && *p != ',')
            fail(EXIT_USAGE, "--cpus wants a list like 0-3,6, got '%s'", s);
        if (*p)
            p++;
        for (long c = a; c <= b; c++) {
            if (c >= CPU_SETSIZE || !CPU_ISSET(c, allowed))
                fail(EXIT_USAGE, "CPU %ld is not online or not allowed for this process", c);
            if (!CPU_ISSET(c, &seen))
                v[n++] = (int)c;
            CPU_SET(c, &seen);
        }
    }
    if (!n)
        fail(EXIT_USAGE, "--cpus is empty");
    *out = v;
    return n;
}

static int hist_stdin(void)
{
    static uint64_t h[HIST_BUCKETS];
    unsigned long long v, count = 0, sum = 0, min = UINT64_MAX, max = 0;
    while (scanf("%llu", &v) == 1) {
        h[hist_index(v)]++;
        count++;
        sum += v;
        min = v < min ? v : min;
        max = v > max ? v : max;
    }
    printf("{\"count\":%llu,\"min_ns\":%llu,\"max_ns\":%llu,\"sum_ns\":%llu,\"buckets\":[", count, count ? min : 0, max, sum);
    for (unsigned b = 0, first = 1; b < HIST_BUCKETS; b++)
        if (h[b]) {
            printf("%s[%llu,%llu,%llu]", first ? "" : ",", (unsigned long long)hist_lo(b),
                   (unsigned long long)hist_hi(b), (unsigned long long)h[b]);
            first = 0;
        }
    puts("]}");
    return 0;
}

static int check_privileges(const struct config *cfg)
{
    struct sched_param sp = { .sched_priority = cfg->priority };
    int err = pthread_setschedparam(pthread_self(), cfg->policy, &sp);
    if (err)
        fail(EXIT_PERM, "cannot use %s priority %d: %s", cfg->policy == SCHED_RR ? "SCHED_RR" : "SCHED_FIFO",
             cfg->priority, strerror(err));
    sp.sched_priority = 0;
    pthread_setschedparam(pthread_self(), SCHED_OTHER, &sp);
    if (mlockall(MCL_CURRENT | MCL_FUTURE))
        fail(EXIT_PERM, "cannot lock memory (mlockall): %s", strerror(errno));
    munlockall();
    int fd = open("/dev/cpu_dma_latency", O_RDWR | O_CLOEXEC);
    printf("{\"sched\":true,\"mlockall\":true,\"cpu_dma_latency\":%s}\n", fd >= 0 ? "true" : "false");
    if (fd >= 0)
        close(fd);
    return 0;
}

/* Hold the PM QoS request for the whole run (it lapses when the fd closes)
 * and read back what the kernel now enforces. */
static int hold_dma_latency(struct run *r)
{
    if (r->cfg.dma_latency_us < 0)
        return -1;
    r->dma_fd = open("/dev/cpu_dma_latency", O_RDWR | O_CLOEXEC);
    int32_t v = r->cfg.dma_latency_us, back = -1;
    if (r->dma_fd < 0 || write(r->dma_fd, &v, sizeof v) != (ssize_t)sizeof v) {
        fprintf(stderr, "rtprobe: warning: cannot hold /dev/cpu_dma_latency (%s); deep C-states may add latency: run as root\n", strerror(errno));
        return -1;
    }
    if (pread(r->dma_fd, &back, sizeof back, 0) != (ssize_t)sizeof back)
        back = v;
    return back;
}

static int start_samplers(struct run *r)
{
    for (int i = 0; i < r->cfg.ncpus; i++) {
        struct cpu_state *c = &r->cs[i];
        pthread_attr_t a;
        cpu_set_t set;
        struct sched_param sp = { .sched_priority = r->cfg.priority };
        CPU_ZERO(&set);
        CPU_SET(c->cpu, &set);
        pthread_attr_init(&a);
        pthread_attr_setstacksize(&a, 256 * 1024);
        pthread_attr_setaffinity_np(&a, sizeof set, &set);
        pthread_attr_setinheritsched(&a, PTHREAD_EXPLICIT_SCHED);
        pthread_attr_setschedpolicy(&a, r->cfg.policy);
        pthread_attr_setschedparam(&a, &sp);
        int err = pthread_create(&c->thread, &a, sampler_main, c);
        pthread_attr_destroy(&a);
        if (err)
            return err;
        c->started = 1;
    }
    return 0;
}

static int all_finished(const struct run *r)
{
    for (int i = 0; i < r->cfg.ncpus; i++)
        if (!__atomic_load_n(&r->cs[i].finished, __ATOMIC_ACQUIRE))
            return 0;
    return 1;
}

static void write_raw(const struct run *r)
{
    FILE *f = file_fcreate(r->cfg.raw_path);
    if (!f)
        fail(1, "cannot write %s: %s", r->cfg.raw_path, strerror(errno));
    fputs("cpu,lat_ns\n", f);
    for (int i = 0; i < r->cfg.ncpus; i++)
        for (uint64_t k = 0; k < r->cs[i].raw_len; k++)
            fprintf(f, "%d,%llu\n", r->cs[i].cpu, (unsigned long long)r->cs[i].raw[k]);
    fclose(f);
}

/* Soak mode's options, before anything is created. */
static void check_soak(const struct config *cfg)
{
    struct stat st;
    if (!cfg->state_dir)
        fail(EXIT_USAGE, "--soak needs --state DIR (where the windows are kept)");
    if (cfg->monitor_only || cfg->raw_path || cfg->loops)
        fail(EXIT_USAGE, "--soak measures until stopped (or --duration-s): not with --monitor, --raw or --loops");
    if (cfg->textfile_dir && (stat(cfg->textfile_dir, &st) || !S_ISDIR(st.st_mode)))
        fail(EXIT_USAGE, "--textfile-dir %s is not a folder", cfg->textfile_dir);
    if (cfg->rtla && !cfg->alert_ns)
        fail(EXIT_USAGE, "--rtla analyses alert windows: give --alert-us too");
    if (cfg->rtla && access(cfg->rtla, X_OK))
        fail(EXIT_USAGE, "--rtla %s is not a program", cfg->rtla);
    if ((int64_t)cfg->window_s * NSEC_PER_SEC < 4 * cfg->interval_ns)
        fail(EXIT_USAGE, "--window-s %d holds too few wake-ups of the interval", cfg->window_s);
}

int main(int argc, char **argv)
{
    static struct run run;
    struct run *r = &run;
    struct config *cfg = &r->cfg;
    int mode_check = 0, mode_meta = 0, mode_hist = 0;
    const char *cpus_arg = NULL;
    int64_t spike = -1;
    cfg->interval_ns = 1000000;
    cfg->priority = 90;
    cfg->policy = SCHED_FIFO;
    cfg->checkpoint_s = 10;
    cfg->telemetry_s = 1;
    cfg->argc = argc;
    cfg->argv = argv;
    cfg->window_s = 300;
    cfg->rtla_s = 30;
    cfg->keep_days = 14;
    cfg->max_mb = 100;

    static const struct option opts[] = {
        { "interval-us", 1, 0, 'i' }, { "priority", 1, 0, 'p' }, { "policy", 1, 0, 'P' },
        { "cpus", 1, 0, 'c' }, { "duration-s", 1, 0, 'd' }, { "loops", 1, 0, 'l' },
        { "spike-ns", 1, 0, 's' }, { "checkpoint-s", 1, 0, 'k' }, { "telemetry-s", 1, 0, 't' },
        { "dma-latency-us", 1, 0, 'D' }, { "out", 1, 0, 'o' }, { "raw", 1, 0, 'r' },
        { "sysroot", 1, 0, 'S' }, { "monitor", 0, 0, 'm' }, { "check", 0, 0, 'C' },
        { "meta", 0, 0, 'M' }, { "hist-stdin", 0, 0, 'H' }, { "version", 0, 0, 'V' },
        { "help", 0, 0, 'h' }, { "phase", 1, 0, 'f' }, { "soak", 0, 0, 'K' }, { "state", 1, 0, 'A' },
        { "window-s", 1, 0, 'w' }, { "textfile-dir", 1, 0, 'T' }, { "alert-us", 1, 0, 'a' }, { "rtla", 1, 0, 'R' },
        { "rtla-s", 1, 0, 'x' }, { "keep-days", 1, 0, 'y' }, { "max-mb", 1, 0, 'z' }, { "echo", 0, 0, 'e' },
        { 0, 0, 0, 0 },
    };
    int o;
    while ((o = getopt_long(argc, argv, "i:p:c:d:l:h", opts, NULL)) != -1) {
        switch (o) {
        case 'i': cfg->interval_ns = num("--interval-us", optarg, 10, 10000000) * 1000; break;
        case 'p': cfg->priority = (int)num("--priority", optarg, 1, 99); break;
        case 'P':
            if (!strcmp(optarg, "fifo")) cfg->policy = SCHED_FIFO;
            else if (!strcmp(optarg, "rr")) cfg->policy = SCHED_RR;
            else fail(EXIT_USAGE, "--policy wants fifo or rr, got '%s'", optarg);
            break;
        case 'c': cpus_arg = optarg; break;
        case 'f':
            if (!strcmp(optarg, "together")) cfg->phase_spread = 0;
            else if (!strcmp(optarg, "spread")) cfg->phase_spread = 1;
            else fail(EXIT_USAGE, "--phase wants together or spread, got '%s'", optarg);
            break;
        case 'd': cfg->duration_ns = num("--duration-s", optarg, 1, 100LL * 24 * 3600) * NSEC_PER_SEC; break;
        case 'l': cfg->loops = (uint64_t)num("--loops", optarg, 1, INT64_MAX); break;
        case 's': spike = num("--spike-ns", optarg, 0, INT64_MAX); break;
        case 'k': cfg->checkpoint_s = (int)num("--checkpoint-s", optarg, 1, 3600); break;
        case 't': cfg->telemetry_s = (int)num("--telemetry-s", optarg, 0, 3600); break;
        case 'D': cfg->dma_latency_us = (int)num("--dma-latency-us", optarg, -1, 100000); break;
        case 'o': cfg->out_dir = optarg; break;
        case 'r': cfg->raw_path = optarg; break;
        case 'S': g_sysroot = optarg; break;
        case 'm': cfg->monitor_only = 1; break;
        case 'C': mode_check = 1; break;
        case 'M': mode_meta = 1; break;
        case 'H': mode_hist = 1; break;
        case 'K': cfg->soak = 1; break;
        case 'A': cfg->state_dir = optarg; break;
        case 'w': cfg->window_s = (int)num("--window-s", optarg, 1, 86400); break;
        case 'T': cfg->textfile_dir = optarg; break;
        case 'a': cfg->alert_ns = (uint64_t)num("--alert-us", optarg, 1, 10000000) * 1000; break;
        case 'R': cfg->rtla = optarg; break;
        case 'x': cfg->rtla_s = (int)num("--rtla-s", optarg, 1, 3600); break;
        case 'y': cfg->keep_days = (int)num("--keep-days", optarg, 1, 3650); break;
        case 'z': cfg->max_mb = (int)num("--max-mb", optarg, 1, 1000000); break;
        case 'e': cfg->echo = 1; break;
        case 'V': puts(PROBE_VERSION); return 0;
        case 'h': fputs(usage_text, stdout); return 0;
        default: fputs(usage_text, stderr); return EXIT_USAGE;
        }
    }
    if (optind < argc)
        fail(EXIT_USAGE, "unexpected argument '%s' (see --help)", argv[optind]);
    if (mode_hist)
        return hist_stdin();
    if (mode_check)
        return check_privileges(cfg);
    if (mode_meta) {
        struct telemetry *t = telemetry_open();
        puts(collect_meta(cfg, t, -1));
        return 0;
    }
    if (cfg->soak) {
        check_soak(cfg);
        /* --echo to a pipe whose reader left (an SSH session gone) is EPIPE,
         * not the end of months of measuring */
        signal(SIGPIPE, SIG_IGN);
    }
    else if (!cfg->out_dir)
        fail(EXIT_USAGE, "--out DIR is required (see --help)");
    if (cfg->out_dir && mkdir(cfg->out_dir, 0755) && errno != EEXIST)
        fail(EXIT_USAGE, "cannot create %s: %s", cfg->out_dir, strerror(errno));

    cpu_set_t allowed;
    sched_getaffinity(0, sizeof allowed, &allowed);
    if (cfg->monitor_only) {
        cfg->ncpus = 0;
        if (!cfg->telemetry_s)
            fail(EXIT_USAGE, "--monitor with --telemetry-s 0 would record nothing");
    } else if (cpus_arg) {
        cfg->ncpus = parse_cpus(cpus_arg, &cfg->cpus, &allowed);
    } else {
        cfg->cpus = calloc(CPU_SETSIZE, sizeof(int));
        for (int c = 0; c < CPU_SETSIZE; c++)
            if (CPU_ISSET(c, &allowed))
                cfg->cpus[cfg->ncpus++] = c;
    }
    cfg->spike_ns = spike >= 0 ? (uint64_t)spike : (uint64_t)cfg->interval_ns / 2;
    /* an alert's evidence is the window's worst spikes: log every one over it */
    if (spike < 0 && cfg->alert_ns && cfg->alert_ns < cfg->spike_ns)
        cfg->spike_ns = cfg->alert_ns;

    /* Blocked in every thread; main collects them with sigtimedwait so the
     * samplers are never interrupted and the end is always orderly. */
    sigset_t sigs;
    sigemptyset(&sigs);
    sigaddset(&sigs, SIGINT);
    sigaddset(&sigs, SIGTERM);
    sigaddset(&sigs, SIGHUP);
    pthread_sigmask(SIG_BLOCK, &sigs, NULL);

    if (cfg->ncpus && posix_memalign((void **)&r->cs, 64, sizeof(struct cpu_state) * (size_t)cfg->ncpus))
        fail(1, "out of memory");
    if (cfg->ncpus)
        memset(r->cs, 0, sizeof(struct cpu_state) * (size_t)cfg->ncpus);
    uint64_t raw_cap = cfg->loops ? cfg->loops : (uint64_t)(cfg->duration_ns / cfg->interval_ns) + 16;
    if (cfg->raw_path && (!cfg->loops && !cfg->duration_ns))
        fail(EXIT_USAGE, "--raw needs --loops or --duration-s to bound its memory");
    if (cfg->raw_path && raw_cap > 50000000ULL)
        fail(EXIT_USAGE, "--raw would hold more than 50 million samples per CPU; shorten the run");
    for (int i = 0; i < cfg->ncpus; i++) {
        struct cpu_state *c = &r->cs[i];
        c->run = r;
        c->cpu = cfg->cpus[i];
        c->index = i;
        c->tot.min_ns = UINT64_MAX;
        c->cur_sec = -1;
        for (int s = 0; s < SEC_SLOTS; s++)
            c->slots[s].sec = -1;
        if (cfg->soak) {
            if (posix_memalign((void **)&c->wins, 64, sizeof(struct win_slot) * WIN_SLOTS))
                fail(1, "out of memory");
            memset(c->wins, 0, sizeof(struct win_slot) * WIN_SLOTS); /* fault in before mlockall */
            for (int w = 0; w < WIN_SLOTS; w++)
                c->wins[w].win = -1;
        }
        if (cfg->raw_path) {
            c->raw_cap = raw_cap;
            if (!(c->raw = malloc(raw_cap * sizeof(uint64_t))))
                fail(1, "out of memory for --raw");
            memset(c->raw, 0, raw_cap * sizeof(uint64_t)); /* fault in before mlockall */
        }
    }

    r->dma_fd = -1;
    r->dma_readback_us = hold_dma_latency(r);
    r->tel = telemetry_open();
    r->meta_json = collect_meta(cfg, r->tel, r->dma_readback_us);
    if (cfg->soak) {
        int status = 1;
        const char *why = soak_prepare(r, &status);
        if (why)
            fail(status, "%s", why);
    }

    if (!cfg->monitor_only && mlockall(MCL_CURRENT | MCL_FUTURE))
        fail(EXIT_PERM, "cannot lock memory (mlockall): %s", strerror(errno));

    r->start_real_ns = real_ns();
    /* spread: a common start, far enough ahead that every thread is up
     * before its first wake-up; together: each thread starts its own period */
    int64_t stamped = mono_ns();
    r->start_mono_ns = stamped + (cfg->phase_spread ? 20 * 1000 * 1000 : 0);
    if (!cfg->soak && write_probe_json(r, "running"))
        fail(1, "cannot write %s/probe.json: %s", cfg->out_dir, strerror(errno));
    /* The run starts when its threads can.  That first file's fsync takes
     * hundreds of ms on a busy disk or an SD card, and counted in the run it
     * made an 8 s run last 8.4 s: the start moves past it (the checkpoints
     * and the final probe.json carry the start the run keeps). */
    int64_t late = mono_ns() - stamped;
    r->start_mono_ns += late;
    r->start_real_ns += late;
    pthread_t writer;
    if (cfg->soak ? soak_start(r, &writer) : writer_start(r, &writer))
        fail(1, "cannot start the writer in %s: %s", cfg->soak ? cfg->state_dir : cfg->out_dir, strerror(errno));
    int err = start_samplers(r);

    int sig = 0;
    while (!err) {
        struct timespec to = { 0, 100 * 1000 * 1000 };
        sig = sigtimedwait(&sigs, NULL, &to);
        if (sig > 0)
            break;
        if (cfg->monitor_only ? cfg->duration_ns && mono_ns() >= r->start_mono_ns + cfg->duration_ns : all_finished(r))
            break;
    }
    __atomic_store_n(&r->stop, 1, __ATOMIC_RELAXED);
    for (int i = 0; i < cfg->ncpus; i++)
        if (r->cs[i].started)
            pthread_join(r->cs[i].thread, NULL);
    /* The run ends at the last wake-up measured, not when main noticed. */
    r->end_mono_ns = mono_ns();
    if (sig <= 0 && !err && cfg->ncpus) {
        r->end_mono_ns = r->start_mono_ns;
        for (int i = 0; i < cfg->ncpus; i++)
            if (r->cs[i].last_wake_ns > r->end_mono_ns)
                r->end_mono_ns = r->cs[i].last_wake_ns;
    }
    r->end_reason = err ? "error" : sig == SIGINT ? "SIGINT" : sig == SIGTERM ? "SIGTERM" : sig == SIGHUP ? "SIGHUP"
                  : cfg->loops ? "loops" : "duration";
    if (cfg->soak) {
        soak_finish(r, writer);
    } else {
        writer_finish(r, writer);
        write_probe_json(r, err ? "failed" : sig > 0 ? "interrupted" : "done");
    }
    if (cfg->raw_path)
        write_raw(r);
    if (err == EPERM)
        fail(EXIT_PERM, "cannot start %s priority %d threads: %s", cfg->policy == SCHED_RR ? "SCHED_RR" : "SCHED_FIFO",
             cfg->priority, strerror(err));
    if (err)
        fail(1, "cannot start the measurement threads: %s", strerror(err));
    return 0;
}
