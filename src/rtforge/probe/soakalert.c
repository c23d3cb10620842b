/* A soak window over --alert-us keeps its evidence, in the state folder
 * beside the windows: its worst spikes (spikes.csv: CPU, wall-clock time,
 * latency) and, when rtla is given (the host checked the kernel's timerlat
 * tracer and rtla's auto-analysis first), rtla timerlat's analysis of the
 * next wake-up over the threshold (timerlat.out, timerlat.status).  The
 * spike that made the alert has passed when its window closes; rtla can only
 * catch one like it, which is what a recurring spike does. */
#include "soak.h"

#include <errno.h>
#include <fcntl.h>
#include <signal.h>
#include <spawn.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

extern char **environ;

static int cmp_spike(const void *a, const void *b)
{
    uint64_t x = ((const struct spike_rec *)a)->lat, y = ((const struct spike_rec *)b)->lat;
    return x < y ? 1 : x > y ? -1 : 0;
}

/* After an alert window: rtla timerlat's auto-analysis of the next wake-up
 * over the threshold, for --rtla-s at most, one at a time and at most
 * RTLA_PER_DAY a day (each is a tracer set-up and a timer per CPU). */
static const char *start_rtla(struct soak *k, const char *dir, int64_t day)
{
    const struct config *cfg = &k->r->cfg;
    if (!cfg->rtla)
        return "off";
    if (k->rtla_pid > 0)
        return "busy";
    if (day != k->rtla_day) {
        k->rtla_day = day;
        k->rtla_count = 0;
    }
    if (k->rtla_count >= RTLA_PER_DAY)
        return "limit";
    char us[32], cpus[4096] = "", prio[16], dur[16], out[4300];
    snprintf(us, sizeof us, "%llu", (unsigned long long)((cfg->alert_ns + 999) / 1000));
    for (int i = 0, n = 0; i < cfg->ncpus && n < (int)sizeof cpus - 12; i++)
        n += snprintf(cpus + n, sizeof cpus - (size_t)n, "%s%d", i ? "," : "", cfg->cpus[i]);
    snprintf(prio, sizeof prio, "f:%d", cfg->priority > 1 ? cfg->priority - 1 : 1);
    snprintf(dur, sizeof dur, "%ds", cfg->rtla_s);
    snprintf(out, sizeof out, "%s/timerlat.out", dir);
    char *argv[] = { (char *)cfg->rtla, "timerlat", "top", "--aa-only", us, "--dump-tasks", "-c", cpus,
                     "-P", prio, "-d", dur, NULL };
    posix_spawn_file_actions_t fa;
    posix_spawnattr_t at;
    sigset_t none;
    sigemptyset(&none);
    posix_spawn_file_actions_init(&fa);
    /* the evidence folder is new (mkdir above): the file is too */
    posix_spawn_file_actions_addopen(&fa, 1, out, O_WRONLY | O_CREAT | O_EXCL | O_NOFOLLOW, 0644);
    posix_spawn_file_actions_adddup2(&fa, 1, 2);
    posix_spawnattr_init(&at);
    /* every signal is blocked in the probe's threads; rtla must see SIGINT */
    posix_spawnattr_setsigmask(&at, &none);
    posix_spawnattr_setflags(&at, POSIX_SPAWN_SETSIGMASK);
    int err = posix_spawn(&k->rtla_pid, cfg->rtla, &fa, &at, argv, environ);
    posix_spawn_file_actions_destroy(&fa);
    posix_spawnattr_destroy(&at);
    if (err) {
        k->rtla_pid = 0;
        return "failed";
    }
    snprintf(k->rtla_dir, sizeof k->rtla_dir, "%s", dir);
    k->rtla_count++;
    return "running";
}

void reap_rtla(struct soak *k, int wait)
{
    int st;
    if (k->rtla_pid <= 0)
        return;
    if (wait) {
        kill(k->rtla_pid, SIGINT);
        for (int i = 0; i < 30 && waitpid(k->rtla_pid, &st, WNOHANG) == 0; i++)
            usleep(100000);
        if (waitpid(k->rtla_pid, &st, WNOHANG) == 0) {
            kill(k->rtla_pid, SIGKILL);
            waitpid(k->rtla_pid, &st, 0);
        }
    } else if (waitpid(k->rtla_pid, &st, WNOHANG) <= 0) {
        return;
    }
    int code = WIFEXITED(st) ? WEXITSTATUS(st) : 128 + WTERMSIG(st);
    char q[300], p[4400];
    snprintf(p, sizeof p, "%s/timerlat.status", k->rtla_dir);
    FILE *f = file_fcreate(p);
    if (f) {
        fprintf(f, "%d\n", code);
        fclose(f);
    }
    const char *rel = strstr(k->rtla_dir, "/evidence/");
    store_event(k, "timerlat\",\"evidence\":%s,\"status\":%d", json_quote(rel ? rel + 1 : "", q, sizeof q), code);
    k->rtla_pid = 0;
}

/* The alert's evidence: the window's worst spikes as CSV, rtla if it can. */
void put_alert(struct soak *k, FILE *f, struct wacc *a, int64_t start_real, int64_t off, uint64_t max_ns)
{
    char stamp[40], rel[80], dir[4200];
    utc_name(start_real, "%Y-%m-%dT%H%M%SZ", stamp, sizeof stamp);
    snprintf(rel, sizeof rel, "evidence/%s", stamp);
    store_path(k, dir, sizeof dir, "%s", rel);
    for (int n = 2; mkdir(dir, 0755) && n < 100; n++) { /* a restart within the same second */
        snprintf(rel, sizeof rel, "evidence/%s-%d", stamp, n);
        store_path(k, dir, sizeof dir, "%s", rel);
    }
    qsort(a->top, (size_t)a->ntop, sizeof *a->top, cmp_spike);
    char csv[4300];
    snprintf(csv, sizeof csv, "%s/spikes.csv", dir);
    FILE *c = file_fcreate(csv);
    if (c) {
        fputs("cpu,time_ns,lat_ns\n", c);
        for (int i = 0; i < a->ntop; i++)
            fprintf(c, "%d,%lld,%llu\n", a->top[i].cpu, (long long)(a->top[i].wake_mono + off),
                    (unsigned long long)a->top[i].lat);
        fclose(c);
    }
    const char *rtla = start_rtla(k, dir, start_real / NSEC_PER_SEC / 86400);
    fprintf(f, ",\"alert\":{\"threshold_ns\":%llu,\"max_ns\":%llu,\"evidence\":\"%s\",\"timerlat\":\"%s\",\"top\":[",
            (unsigned long long)k->r->cfg.alert_ns, (unsigned long long)max_ns, rel, rtla);
    for (int i = 0; i < a->ntop && i < 5; i++)
        fprintf(f, "%s[%d,%lld,%llu]", i ? "," : "", a->top[i].cpu, (long long)(a->top[i].wake_mono + off),
                (unsigned long long)a->top[i].lat);
    fputs("]}", f);
    char q[100];
    store_event(k, "alert\",\"evidence\":\"%s\",\"max_ns\":%llu,\"window_start_ns\":%lld,\"kernel\":%s", rel,
                (unsigned long long)max_ns, (long long)start_real, json_quote(k->release, q, sizeof q));
}

