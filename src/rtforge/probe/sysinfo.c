/* What the run was measured on (collected once, before the run, so it
 * survives a crash) and what the board did while it ran (telemetry, sampled
 * by the non-RT writer).  Every path goes through sys_path() so tests can
 * point the probe at a fixture tree of a Raspberry Pi's /sys and /proc
 * (--sysroot). */
#include "rtprobe.h"

#include <dirent.h>
#include <fcntl.h>
#include <limits.h>
#include <stdlib.h>
#include <string.h>
#include <sys/utsname.h>
#include <unistd.h>

const char *g_sysroot = "";

static const char *sys_path(char *buf, size_t size, const char *fmt, int n)
{
    char rel[512];
    snprintf(rel, sizeof rel, fmt, n);
    snprintf(buf, size, "%s%s", g_sysroot, rel);
    return buf;
}

/* Read a small text file, strip trailing whitespace; -1 when unreadable. */
int read_text(const char *path, char *buf, size_t size)
{
    int fd = open(path, O_RDONLY | O_CLOEXEC);
    if (fd < 0)
        return -1;
    ssize_t n = read(fd, buf, size - 1);
    close(fd);
    if (n < 0)
        return -1;
    buf[n] = 0;
    /* device-tree strings are NUL-terminated; stop there */
    n = (ssize_t)strlen(buf);
    while (n > 0 && (buf[n - 1] == '\n' || buf[n - 1] == ' ' || buf[n - 1] == '\t'))
        buf[--n] = 0;
    return (int)n;
}

static void kv_text(FILE *f, const char *key, const char *fmt, int n)
{
    char p[600], v[4096];
    fprintf(f, ",\"%s\":", key);
    json_str(f, read_text(sys_path(p, sizeof p, fmt, n), v, sizeof v) >= 0 ? v : NULL);
}

static void kv_int(FILE *f, const char *key, const char *fmt, int n)
{
    char p[600], v[64];
    fprintf(f, ",\"%s\":", key);
    if (read_text(sys_path(p, sizeof p, fmt, n), v, sizeof v) > 0)
        fprintf(f, "%lld", strtoll(v, NULL, 0));
    else
        fputs("null", f);
}

/* First value of "key : value" in /proc/cpuinfo. */
static void cpuinfo_field(FILE *f, const char *jkey, const char *key)
{
    char p[600], line[512];
    FILE *ci = fopen(sys_path(p, sizeof p, "/proc/cpuinfo", 0), "r");
    fprintf(f, ",\"%s\":", jkey);
    while (ci && fgets(line, sizeof line, ci)) {
        char *colon = strchr(line, ':');
        if (!colon || strncmp(line, key, strlen(key)) || (line[strlen(key)] != ' ' && line[strlen(key)] != '\t'))
            continue;
        char *v = colon + 1;
        while (*v == ' ')
            v++;
        v[strcspn(v, "\n")] = 0;
        json_str(f, v);
        fclose(ci);
        return;
    }
    if (ci)
        fclose(ci);
    fputs("null", f);
}

/* Highest CPU number + 1, from the (possibly fixture) tree: "0-3" -> 4. */
static int cpu_count(void)
{
    static const char *files[] = { "/sys/devices/system/cpu/possible", "/sys/devices/system/cpu/online" };
    char p[600], v[256];
    for (int i = 0; i < 2; i++) {
        if (read_text(sys_path(p, sizeof p, files[i], 0), v, sizeof v) <= 0)
            continue;
        char *last = v + strlen(v);
        while (last > v && (last[-1] >= '0' && last[-1] <= '9'))
            last--;
        if (*last)
            return atoi(last) + 1;
    }
    return (int)sysconf(_SC_NPROCESSORS_CONF);
}

/* ---- telemetry ----------------------------------------------------------- */
#define MAX_COLS 256
struct telemetry {
    int nzones, zone_no[MAX_COLS], zone_fd[MAX_COLS];
    int nfreq, freq_cpu[MAX_COLS], freq_fd[MAX_COLS];
    int throttled_fd, loadavg_fd;
};

static int cmp_int(const void *a, const void *b)
{
    return *(const int *)a - *(const int *)b;
}

struct telemetry *telemetry_open(void)
{
    struct telemetry *t = calloc(1, sizeof *t);
    char p[600];
    DIR *d = opendir(sys_path(p, sizeof p, "/sys/class/thermal", 0));
    struct dirent *e;
    while (d && (e = readdir(d)) && t->nzones < MAX_COLS)
        if (!strncmp(e->d_name, "thermal_zone", 12))
            t->zone_no[t->nzones++] = atoi(e->d_name + 12);
    if (d)
        closedir(d);
    qsort(t->zone_no, (size_t)t->nzones, sizeof(int), cmp_int);
    for (int i = 0; i < t->nzones; i++)
        t->zone_fd[i] = open(sys_path(p, sizeof p, "/sys/class/thermal/thermal_zone%d/temp", t->zone_no[i]), O_RDONLY | O_CLOEXEC);
    int ncpu = cpu_count();
    for (int cpu = 0; cpu < ncpu && t->nfreq < MAX_COLS; cpu++) {
        int fd = open(sys_path(p, sizeof p, "/sys/devices/system/cpu/cpu%d/cpufreq/scaling_cur_freq", cpu), O_RDONLY | O_CLOEXEC);
        if (fd >= 0) {
            t->freq_cpu[t->nfreq] = cpu;
            t->freq_fd[t->nfreq++] = fd;
        }
    }
    /* Raspberry Pi firmware driver: hex bitmask, same bits as
     * `vcgencmd get_throttled`.  Newer kernels WARN_ONCE on the first read;
     * collect_meta() reads it before the run so that lands outside it. */
    t->throttled_fd = open(sys_path(p, sizeof p, "/sys/devices/platform/soc/soc:firmware/get_throttled", 0), O_RDONLY | O_CLOEXEC);
    t->loadavg_fd = open(sys_path(p, sizeof p, "/proc/loadavg", 0), O_RDONLY | O_CLOEXEC);
    return t;
}

/* sysfs attributes regenerate on a read at offset 0: keep the fd open. */
static int pread_text(int fd, char *buf, size_t size)
{
    if (fd < 0)
        return -1;
    ssize_t n = pread(fd, buf, size - 1, 0);
    if (n <= 0)
        return -1;
    buf[n] = 0;
    return (int)n;
}

static void int_array(FILE *f, const char *key, const int *fds, int n, int base)
{
    char v[64];
    fprintf(f, ",\"%s\":[", key);
    for (int i = 0; i < n; i++) {
        if (i)
            fputc(',', f);
        if (pread_text(fds[i], v, sizeof v) > 0)
            fprintf(f, "%lld", strtoll(v, NULL, base));
        else
            fputs("null", f);
    }
    fputc(']', f);
}

void telemetry_sample(struct telemetry *t, FILE *f, double t_s)
{
    char v[128];
    fprintf(f, "{\"t_s\":%.3f", t_s);
    int_array(f, "temp_mc", t->zone_fd, t->nzones, 10);
    int_array(f, "freq_khz", t->freq_fd, t->nfreq, 10);
    fputs(",\"throttled\":", f);
    if (pread_text(t->throttled_fd, v, sizeof v) > 0)
        fprintf(f, "%lld", strtoll(v, NULL, 16));
    else
        fputs("null", f);
    fputs(",\"load1\":", f);
    if (pread_text(t->loadavg_fd, v, sizeof v) > 0)
        fprintf(f, "%.2f", strtod(v, NULL));
    else
        fputs("null", f);
    fputs("}\n", f);
}

void telemetry_read(struct telemetry *t, struct tel_sample *s)
{
    char v[128];
    s->nzones = t->nzones < TEL_ZONES ? t->nzones : TEL_ZONES;
    for (int i = 0; i < s->nzones; i++)
        s->temp_mc[i] = pread_text(t->zone_fd[i], v, sizeof v) > 0 ? strtoll(v, NULL, 10) : LLONG_MIN;
    s->throttled = pread_text(t->throttled_fd, v, sizeof v) > 0 ? strtoll(v, NULL, 16) : -1;
    s->load1 = pread_text(t->loadavg_fd, v, sizeof v) > 0 ? strtod(v, NULL) : -1;
}

/* Zone i's number, and its type in type (empty when unreadable). */
int telemetry_zone(const struct telemetry *t, int i, char *type, size_t size)
{
    char p[600];
    if (read_text(sys_path(p, sizeof p, "/sys/class/thermal/thermal_zone%d/type", t->zone_no[i]), type, size) < 0)
        type[0] = 0;
    return t->zone_no[i];
}

void telemetry_close(struct telemetry *t)
{
    for (int i = 0; i < t->nzones; i++)
        if (t->zone_fd[i] >= 0)
            close(t->zone_fd[i]);
    for (int i = 0; i < t->nfreq; i++)
        close(t->freq_fd[i]);
    if (t->throttled_fd >= 0)
        close(t->throttled_fd);
    if (t->loadavg_fd >= 0)
        close(t->loadavg_fd);
    free(t);
}

/* ---- metadata ------------------------------------------------------------ */
char *collect_meta(const struct config *cfg, const struct telemetry *t, int dma_readback_us)
{
    char *buf = NULL;
    size_t len = 0;
    FILE *f = open_memstream(&buf, &len);
    struct utsname u;
    uname(&u);
    fputs("{\"uname\":{\"sysname\":", f);
    json_str(f, u.sysname);
    fputs(",\"nodename\":", f);
    json_str(f, u.nodename);
    fputs(",\"release\":", f);
    json_str(f, u.release);
    fputs(",\"version\":", f);
    json_str(f, u.version);
    fputs(",\"machine\":", f);
    json_str(f, u.machine);
    fputc('}', f);
    kv_text(f, "cmdline", "/proc/cmdline", 0);
    kv_int(f, "realtime", "/sys/kernel/realtime", 0);
    kv_text(f, "sched_preempt", "/sys/kernel/debug/sched/preempt", 0);
    kv_text(f, "board_model", "/proc/device-tree/model", 0);
    cpuinfo_field(f, "cpu_model", "model name");
    cpuinfo_field(f, "cpu_part", "CPU part");
    cpuinfo_field(f, "hardware", "Hardware");
    kv_text(f, "online_cpus", "/sys/devices/system/cpu/online", 0);
    kv_text(f, "isolated_cpus", "/sys/devices/system/cpu/isolated", 0);
    kv_text(f, "nohz_full", "/sys/devices/system/cpu/nohz_full", 0);
    kv_int(f, "sched_rt_runtime_us", "/proc/sys/kernel/sched_rt_runtime_us", 0);
    kv_int(f, "sched_rt_period_us", "/proc/sys/kernel/sched_rt_period_us", 0);
    kv_text(f, "clocksource", "/sys/devices/system/clocksource/clocksource0/current_clocksource", 0);
    kv_text(f, "loadavg", "/proc/loadavg", 0);
    kv_text(f, "throttled_hex", "/sys/devices/platform/soc/soc:firmware/get_throttled", 0);
    fputs(",\"cpufreq\":[", f);
    int ncpu = cpu_count();
    int first = 1;
    for (int cpu = 0; cpu < ncpu; cpu++) {
        char p[600], gov[64];
        if (read_text(sys_path(p, sizeof p, "/sys/devices/system/cpu/cpu%d/cpufreq/scaling_governor", cpu), gov, sizeof gov) < 0)
            continue;
        fprintf(f, "%s{\"cpu\":%d,\"governor\":", first ? "" : ",", cpu);
        first = 0;
        json_str(f, gov);
        kv_int(f, "cur_khz", "/sys/devices/system/cpu/cpu%d/cpufreq/scaling_cur_freq", cpu);
        kv_int(f, "min_khz", "/sys/devices/system/cpu/cpu%d/cpufreq/cpuinfo_min_freq", cpu);
        kv_int(f, "max_khz", "/sys/devices/system/cpu/cpu%d/cpufreq/cpuinfo_max_freq", cpu);
        fputc('}', f);
    }
    fputs("],\"thermal_zones\":[", f);
    for (int i = 0; i < t->nzones; i++) {
        char p[600], ty[128];
        fprintf(f, "%s{\"zone\":%d,\"type\":", i ? "," : "", t->zone_no[i]);
        json_str(f, read_text(sys_path(p, sizeof p, "/sys/class/thermal/thermal_zone%d/type", t->zone_no[i]), ty, sizeof ty) >= 0 ? ty : NULL);
        fputc('}', f);
    }
    fputs("],\"freq_cpus\":[", f);
    for (int i = 0; i < t->nfreq; i++)
        fprintf(f, "%s%d", i ? "," : "", t->freq_cpu[i]);
    fputs("],\"argv\":[", f);
    for (int i = 0; i < cfg->argc; i++) {
        if (i)
            fputc(',', f);
        json_str(f, cfg->argv[i]);
    }
    fputs("],\"cpu_dma_latency_us\":", f);
    if (dma_readback_us >= 0)
        fprintf(f, "%d", dma_readback_us);
    else
        fputs("null", f);
    fprintf(f, ",\"probe_version\":\"%s\",\"sysroot\":", PROBE_VERSION);
    json_str(f, g_sysroot);
    fputc('}', f);
    fclose(f);
    return buf;
}
