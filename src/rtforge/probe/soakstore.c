/* The soak monitor's state folder: what survives the probe, a reboot and
 * months of running, in bounded space.
 *
 *   windows/YYYY-MM-DD.jsonl  one line per closed window (UTC day of its start)
 *   hours/YYYY-MM.jsonl       the windows rolled into hours, days/YYYY.jsonl into days
 *   pending.jsonl             the hour and the day in progress, and what a window is about
 *                             to append (replaced atomically: soakjournal.c)
 *   events.jsonl              start, stop, gap, kernel, alert, timerlat, rotated, over_cap
 *   evidence/<UTC start>/     an alert window's worst spikes (and rtla's analysis)
 *   state                     "key value" lines: this life, for the next start and `status`
 *   lock                      flock()ed by the monitor writing here, holds its pid
 *
 * Every file is opened without following a symbolic link (O_NOFOLLOW): the
 * folder is root's, and a link planted in it must not redirect a write.
 * Rotation: windows and evidence older than --keep-days go, hours after
 * HOURS_KEEP_MONTHS months; over --max-mb the oldest go first (windows,
 * evidence, hours, old events, days), never the files being written. */
#include "soak.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <stdarg.h>
#include <stdlib.h>
#include <string.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

int store_path(const struct soak *k, char *buf, size_t size, const char *fmt, ...)
{
    char rel[1024];
    va_list ap;
    va_start(ap, fmt);
    int n = vsnprintf(rel, sizeof rel, fmt, ap);
    va_end(ap);
    if (n < 0 || (size_t)n >= sizeof rel)
        return -1;
    n = snprintf(buf, size, "%s/%s", k->r->cfg.state_dir, rel);
    return n < 0 || (size_t)n >= size ? -1 : 0;
}

void utc_name(int64_t real_ns, const char *fmt, char *buf, size_t size)
{
    time_t t = (time_t)(real_ns / NSEC_PER_SEC);
    struct tm tm;
    gmtime_r(&t, &tm);
    strftime(buf, size, fmt, &tm);
}

/* ---- events -------------------------------------------------------------- */
void store_event(struct soak *k, const char *fmt, ...)
{
    char *buf = NULL;
    size_t len = 0;
    FILE *f = open_memstream(&buf, &len);
    fprintf(f, "{\"event\":\"");
    va_list ap;
    va_start(ap, fmt);
    vfprintf(f, fmt, ap); /* the caller's fmt starts with the event's name" */
    va_end(ap);
    fprintf(f, ",\"t_ns\":%lld,\"life\":", (long long)real_ns());
    json_str(f, k->life);
    fputs("}\n", f);
    fclose(f);
    char path[4200];
    struct stat st;
    if (!store_path(k, path, sizeof path, "events.jsonl") && !lstat(path, &st) && st.st_size > EVENTS_ROTATE_BYTES) {
        char old[4200];
        if (!store_path(k, old, sizeof old, "events.1.jsonl"))
            rename(path, old);
    }
    store_append(k, "events.jsonl", buf, len);
    if (k->r->cfg.echo) { /* the foreground run shows the start, gaps, kernel changes */
        fwrite(buf, 1, len, stdout);
        fflush(stdout);
    }
    free(buf);
}

/* ---- this life's state, and the last one's -------------------------------- */
static void state_value(FILE *f, const char *key, const char *v)
{
    fprintf(f, "%s ", key);
    for (const char *p = v; *p; p++)
        fputc(*p == '\n' || *p == '\r' ? ' ' : *p, f);
    fputc('\n', f);
}

void store_state(struct soak *k, int running)
{
    char *buf = NULL;
    size_t len = 0;
    FILE *f = open_memstream(&buf, &len);
    state_value(f, "life", k->life);
    fprintf(f, "pid %d\n", (int)getpid());
    state_value(f, "host", k->host);
    state_value(f, "boot_id", k->boot_id);
    state_value(f, "release", k->release);
    state_value(f, "version", k->version);
    fprintf(f, "started_ns %lld\nlast_end_ns %lld\nwindows %lld\nrunning %d\nwindow_s %d\ninterval_ns %lld\n",
            (long long)k->start_real_ns, (long long)k->last_end_ns, (long long)k->closed, running,
            k->r->cfg.window_s, (long long)k->r->cfg.interval_ns);
    fclose(f);
    write_atomic(k->r->cfg.state_dir, "state", buf, len);
    free(buf);
}

struct prev {
    int found, running;
    char life[64], boot_id[40], release[65], version[256];
    long long last_end_ns;
};

/* A file of the folder, for reading, never through a link; NULL if none */
FILE *store_read(const struct soak *k, const char *name)
{
    char path[4200];
    if (store_path(k, path, sizeof path, "%s", name))
        return NULL;
    int fd = open(path, O_RDONLY | O_CLOEXEC | O_NOFOLLOW);
    FILE *f = fd >= 0 ? fdopen(fd, "r") : NULL;
    if (!f && fd >= 0)
        close(fd);
    return f;
}

static void read_prev(const struct soak *k, struct prev *p)
{
    char line[512];
    memset(p, 0, sizeof *p);
    FILE *f = store_read(k, "state");
    if (!f)
        return;
    while (fgets(line, sizeof line, f)) {
        line[strcspn(line, "\n")] = 0;
        char *v = strchr(line, ' ');
        if (!v)
            continue;
        *v++ = 0;
        if (!strcmp(line, "life")) snprintf(p->life, sizeof p->life, "%s", v);
        else if (!strcmp(line, "boot_id")) snprintf(p->boot_id, sizeof p->boot_id, "%s", v);
        else if (!strcmp(line, "release")) snprintf(p->release, sizeof p->release, "%s", v);
        else if (!strcmp(line, "version")) snprintf(p->version, sizeof p->version, "%s", v);
        else if (!strcmp(line, "last_end_ns")) p->last_end_ns = strtoll(v, NULL, 10);
        else if (!strcmp(line, "running")) p->running = atoi(v);
    }
    fclose(f);
    p->found = p->life[0] != 0;
}

/* ---- rollups ------------------------------------------------------------- */
void agg_reset(struct agg *a, int ncpus)
{
    a->key = -1;
    a->start_ns = a->end_ns = 0;
    a->windows = a->partial_windows = a->covered_ns = a->alerts = a->spikes = 0;
    a->temp_max_mc = LLONG_MIN;
    a->throttled = -1;
    memset(a->cpu, 0, sizeof *a->cpu * (size_t)ncpus);
    for (int i = 0; i < ncpus; i++)
        a->cpu[i].min_ns = UINT64_MAX;
}

/* Runs of consecutive bucket indices, [first, count, count, ...]: a window's
 * histogram in a fifth of the room of [lo, hi, count] triples.  A run goes
 * on over up to 3 empty buckets (a zero costs 2 bytes, a new run about 8). */
void put_hist(FILE *f, const uint64_t *h)
{
    int open = 0;
    unsigned last = 0;
    fputs("\"h\":[", f);
    for (unsigned b = 0; b < HIST_BUCKETS; b++) {
        if (!h[b])
            continue;
        if (open && b - last <= 4) {
            for (unsigned z = last + 1; z < b; z++)
                fputs(",0", f);
            fprintf(f, ",%llu", (unsigned long long)h[b]);
        } else {
            fprintf(f, "%s[%u,%llu", open ? "]," : "", b, (unsigned long long)h[b]);
            open = 1;
        }
        last = b;
    }
    fputs(open ? "]]" : "]", f);
}

void agg_line(const struct soak *k, const struct agg *a, const char *kind, FILE *f)
{
    fprintf(f, "{\"%s\":%lld,\"life\":", kind, (long long)a->key);
    json_str(f, k->life);
    fputs(",\"host\":", f);
    json_str(f, k->host);
    fputs(",\"kernel\":", f);
    json_str(f, k->release);
    fputs(",\"kver\":", f);
    json_str(f, k->version);
    fprintf(f, ",\"start_ns\":%lld,\"end_ns\":%lld,\"windows\":%llu,\"partial_windows\":%llu,\"covered_ns\":%llu,"
               "\"alerts\":%llu,\"spikes\":%llu,\"temp_max_mc\":",
            (long long)a->start_ns, (long long)a->end_ns, (unsigned long long)a->windows,
            (unsigned long long)a->partial_windows, (unsigned long long)a->covered_ns,
            (unsigned long long)a->alerts, (unsigned long long)a->spikes);
    if (a->temp_max_mc != LLONG_MIN)
        fprintf(f, "%lld", a->temp_max_mc);
    else
        fputs("null", f);
    fputs(",\"throttled\":", f);
    if (a->throttled >= 0)
        fprintf(f, "%lld", a->throttled);
    else
        fputs("null", f);
    fputs(",\"cpus\":[", f);
    for (int i = 0; i < k->ncpus; i++) {
        const struct agg_cpu *c = &a->cpu[i];
        fprintf(f, "%s{\"cpu\":%d,\"count\":%llu,\"min_ns\":", i ? "," : "", k->r->cfg.cpus[i],
                (unsigned long long)c->count);
        if (c->count)
            fprintf(f, "%llu,\"max_ns\":%llu", (unsigned long long)c->min_ns, (unsigned long long)c->max_ns);
        else
            fputs("null,\"max_ns\":null", f);
        fprintf(f, ",\"sum_ns\":%llu,\"overruns\":%llu,", (unsigned long long)c->sum_ns,
                (unsigned long long)c->overruns);
        put_hist(f, c->hist);
        fputc('}', f);
    }
    fputs("]}\n", f);
}

/* ---- opening the folder ---------------------------------------------------- */
static int read_line_file(const char *path, char *buf, size_t size)
{
    if (read_text(path, buf, size) < 0)
        return -1;
    buf[strcspn(buf, "\n")] = 0;
    return 0;
}

/* Create the folder, take its lock, and record how this start follows the
 * last one: a gap (from its last window's end), a reboot (another boot id),
 * a kernel change (uname -r or -v).  NULL, or why not (and an exit status). */
const char *store_open(struct soak *k, int *status)
{
    static char err[1400];
    const char *dir = k->r->cfg.state_dir;
    static const char *subs[] = { "", "/windows", "/hours", "/days", "/evidence" };
    /* the folder is root's alone: others' files in it would be read as ours, and the probe writes there as root */
    if (mkdir(dir, 0755) && errno != EEXIST) {
        snprintf(err, sizeof err, "cannot create %.500s: %s", dir, strerror(errno));
        *status = 2;
        return err;
    }
    char why[1200];
    if (owned_dir(dir, why, sizeof why)) {
        snprintf(err, sizeof err, "cannot use the monitor's folder: %s", why);
        *status = 2;
        return err;
    }
    for (unsigned i = 0; i < sizeof subs / sizeof *subs; i++) {
        char p[4200];
        snprintf(p, sizeof p, "%s%s", dir, subs[i]);
        struct stat st;
        if ((mkdir(p, 0755) && errno != EEXIST) || lstat(p, &st) || !S_ISDIR(st.st_mode)) {
            snprintf(err, sizeof err, "cannot use %.500s as the monitor's folder: %s", p,
                     errno ? strerror(errno) : "not a folder");
            *status = 2;
            return err;
        }
    }
    char path[4200];
    store_path(k, path, sizeof path, "lock");
    k->lock_fd = file_open(path, O_RDWR | O_CREAT);
    if (k->lock_fd < 0) {
        snprintf(err, sizeof err, "cannot open %.500s: %s", path, strerror(errno));
        *status = 2;
        return err;
    }
    if (flock(k->lock_fd, LOCK_EX | LOCK_NB)) {
        char pid[32] = "?";
        ssize_t n = pread(k->lock_fd, pid, sizeof pid - 1, 0);
        pid[n > 0 ? n : 1] = 0;
        pid[strcspn(pid, "\n")] = 0;
        snprintf(err, sizeof err, "another monitor (pid %s) is writing %.500s", pid, dir);
        *status = 4;
        return err;
    }
    char pid[32];
    int n = snprintf(pid, sizeof pid, "%d\n", (int)getpid());
    if (ftruncate(k->lock_fd, 0) || pwrite(k->lock_fd, pid, (size_t)n, 0) != n) {
        snprintf(err, sizeof err, "cannot write %.500s: %s", path, strerror(errno));
        *status = 2;
        return err;
    }

    if (read_line_file("/proc/sys/kernel/random/boot_id", k->boot_id, sizeof k->boot_id))
        snprintf(k->boot_id, sizeof k->boot_id, "unknown");
    snprintf(k->life, sizeof k->life, "%.8s-%lld", k->boot_id, (long long)(k->start_real_ns / NSEC_PER_SEC));
    struct prev p;
    read_prev(k, &p);
    store_flush_pending(k);
    if (p.found) {
        int reboot = strcmp(p.boot_id, k->boot_id) != 0;
        char q1[100], q2[100], q3[140];
        /* clean: the last life recorded its stop; otherwise it crashed or lost power */
        store_event(k, "gap\",\"from_ns\":%lld,\"to_ns\":%lld,\"seconds\":%.3f,\"reboot\":%s,\"clean\":%s,"
                       "\"boot_id_before\":%s,\"boot_id\":%s,\"life_before\":%s",
                    p.last_end_ns, (long long)k->start_real_ns,
                    (double)(k->start_real_ns - p.last_end_ns) / 1e9, reboot ? "true" : "false",
                    p.running ? "false" : "true", json_quote(p.boot_id, q1, sizeof q1),
                    json_quote(k->boot_id, q2, sizeof q2), json_quote(p.life, q3, sizeof q3));
        k->last_gap_s = (double)(k->start_real_ns - p.last_end_ns) / 1e9;
        if (strcmp(p.release, k->release) || strcmp(p.version, k->version)) {
            char *b = NULL;
            size_t len = 0;
            FILE *f = open_memstream(&b, &len);
            fputs("{\"release\":", f);
            json_str(f, p.release);
            fputs(",\"version\":", f);
            json_str(f, p.version);
            fputs("},\"to\":{\"release\":", f);
            json_str(f, k->release);
            fputs(",\"version\":", f);
            json_str(f, k->version);
            fputc('}', f);
            fclose(f);
            store_event(k, "kernel\",\"from\":%s", b);
            free(b);
        }
    }
    k->last_end_ns = k->start_real_ns;
    store_state(k, 1);
    return NULL;
}

