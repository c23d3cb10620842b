/* The soak monitor's bounded storage (see soakstore.c for the folder):
 * windows and evidence older than --keep-days are removed, hours after
 * HOURS_KEEP_MONTHS months, and over --max-mb the oldest go first --
 * windows, then evidence, hours, the older events, days -- never a file
 * being written.  Each removal is an event ("rotated"); a cap that even
 * this cannot meet is said once ("over_cap").  Checked after every window:
 * a few directory reads. */
#include "soak.h"

#include <dirent.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

struct entry {
    char rel[160];
    long long bytes;
    int dir;
};

static long long tree_bytes(const char *path, int *is_dir)
{
    struct stat st;
    if (lstat(path, &st))
        return 0;
    *is_dir = S_ISDIR(st.st_mode);
    if (!*is_dir)
        return S_ISREG(st.st_mode) ? (long long)st.st_size : 0;
    long long sum = 0;
    DIR *d = opendir(path);
    struct dirent *e;
    while (d && (e = readdir(d))) {
        char p[4400];
        if (e->d_name[0] == '.' || snprintf(p, sizeof p, "%s/%s", path, e->d_name) >= (int)sizeof p)
            continue;
        if (!lstat(p, &st) && S_ISREG(st.st_mode))
            sum += (long long)st.st_size;
    }
    if (d)
        closedir(d);
    return sum;
}

static int cmp_entry(const void *a, const void *b)
{
    return strcmp(((const struct entry *)a)->rel, ((const struct entry *)b)->rel);
}

/* The entries of sub (sorted: their names sort by age), only names the
 * monitor writes: a file someone else put here counts, but is never removed. */
static int list(const struct soak *k, const char *sub, struct entry **out, long long *foreign)
{
    char dir[4200];
    store_path(k, dir, sizeof dir, "%s", sub);
    DIR *d = opendir(dir);
    int n = 0, cap = 0;
    struct dirent *e;
    *out = NULL;
    while (d && (e = readdir(d))) {
        const char *s = e->d_name;
        if (!strcmp(s, ".") || !strcmp(s, ".."))
            continue;
        char p[4500];
        int is_dir = 0;
        snprintf(p, sizeof p, "%s/%.255s", dir, s);
        long long bytes = tree_bytes(p, &is_dir);
        if (strlen(s) > 40 || strspn(s, "0123456789-TZ.jsonl") != strlen(s) || s[0] < '0' || s[0] > '9') {
            *foreign += bytes;
            continue;
        }
        if (n == cap) {
            cap = cap ? cap * 2 : 64;
            struct entry *m = realloc(*out, sizeof **out * (size_t)cap);
            if (!m)
                break;
            *out = m;
        }
        snprintf((*out)[n].rel, sizeof (*out)[n].rel, "%s/%s", sub, s);
        (*out)[n].bytes = bytes;
        (*out)[n++].dir = is_dir;
    }
    if (d)
        closedir(d);
    if (n)
        qsort(*out, (size_t)n, sizeof **out, cmp_entry);
    return n;
}

static void remove_entry(struct soak *k, const struct entry *e, const char *why)
{
    char p[4200];
    store_path(k, p, sizeof p, "%s", e->rel);
    if (e->dir) {
        DIR *d = opendir(p);
        struct dirent *de;
        while (d && (de = readdir(d)))
            if (de->d_name[0] != '.')
                unlinkat(dirfd(d), de->d_name, 0);
        if (d)
            closedir(d);
        if (rmdir(p))
            return;
    } else if (unlink(p)) {
        return;
    }
    store_event(k, "rotated\",\"removed\":\"%s\",\"bytes\":%lld,\"why\":\"%s\"", e->rel, e->bytes, why);
}

void store_enforce(struct soak *k)
{
    static const char *order[] = { "windows", "evidence", "hours", "days" };
    struct entry *lists[4];
    int counts[4];
    long long total = 0, foreign = 0;
    char cur_hour[32], cur_day[32], cutoff[32], month_cut[32];
    int64_t now = real_ns();
    utc_name(k->hour.key >= 0 ? k->hour.key * NSEC_PER_SEC : now, "hours/%Y-%m.jsonl", cur_hour, sizeof cur_hour);
    utc_name(k->day.key >= 0 ? k->day.key * NSEC_PER_SEC : now, "days/%Y.jsonl", cur_day, sizeof cur_day);
    utc_name(now - (int64_t)k->r->cfg.keep_days * 86400 * NSEC_PER_SEC, "%Y-%m-%d", cutoff, sizeof cutoff);
    utc_name(now - (int64_t)HOURS_KEEP_MONTHS * 31 * 86400 * NSEC_PER_SEC, "hours/%Y-%m", month_cut, sizeof month_cut);
    for (int i = 0; i < 4; i++) {
        counts[i] = list(k, order[i], &lists[i], &foreign);
        for (int j = 0; j < counts[i]; j++) {
            struct entry *e = &lists[i][j];
            const char *name = strchr(e->rel, '/') + 1;
            int busy = !strcmp(e->rel, k->cur_window_file) || !strcmp(e->rel, cur_hour) || !strcmp(e->rel, cur_day);
            /* by age: windows and evidence older than --keep-days, hours older than the months kept */
            if (!busy && ((i < 2 && strncmp(name, cutoff, 10) < 0) || (i == 2 && strcmp(e->rel, month_cut) < 0))) {
                remove_entry(k, e, "age");
                e->bytes = -1;
            } else {
                total += e->bytes;
            }
        }
    }
    static const char *loose[] = { "events.jsonl", "events.1.jsonl", "pending.jsonl", "state", "lock" };
    for (unsigned i = 0; i < sizeof loose / sizeof *loose; i++) {
        char p[4200];
        int is_dir;
        store_path(k, p, sizeof p, "%s", loose[i]);
        total += tree_bytes(p, &is_dir);
    }
    total += foreign;
    long long cap = (long long)k->r->cfg.max_mb << 20;
    for (int i = 0; i < 4 && total > cap; i++) {
        if (i == 3) { /* before the days: the older events */
            char p[4200];
            int is_dir;
            store_path(k, p, sizeof p, "events.1.jsonl");
            long long b = tree_bytes(p, &is_dir);
            if (b && !unlink(p))
                total -= b;
        }
        for (int j = 0; j < counts[i] && total > cap; j++) {
            struct entry *e = &lists[i][j];
            if (e->bytes < 0 || !strcmp(e->rel, k->cur_window_file) || !strcmp(e->rel, cur_hour) ||
                !strcmp(e->rel, cur_day))
                continue;
            remove_entry(k, e, "cap");
            total -= e->bytes;
        }
    }
    if (total > cap && !k->over_cap_said) {
        store_event(k, "over_cap\",\"bytes\":%lld,\"cap_bytes\":%lld", total, cap);
        k->over_cap_said = 1;
    }
    for (int i = 0; i < 4; i++)
        free(lists[i]);
}
