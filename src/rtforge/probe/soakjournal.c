/* What a closed window changes in the monitor's folder, so that a kill or
 * a power loss at any point files every window and every hour exactly once.
 *
 * A window adds a line to windows/, and may close an hour and a day (a line
 * each in hours/ and days/); the hour and day in progress live in
 * pending.jsonl.  Those are four writes, and a crash between two of them
 * used to leave an hour one window short (window filed, pending not yet
 * rewritten) or an hour filed twice (rolled hour appended, pending still
 * holding it).  So pending.jsonl is also a journal, replaced atomically
 * *before* the appends:
 *
 *   {"file":"hours/2026-11.jsonl","line":{...}}   a line about to be appended
 *   {"file":"windows/2026-11-28.jsonl","line":{...}}
 *   {"hour":...}  {"day":...}                    the hour and day in progress,
 *                                                with this window in them
 *
 * The next start (and the stop) replays it: each line is appended unless its
 * file already ends with it.  Every line names its life, number or key and
 * times, so "already there" cannot be mistaken. */
#include "soak.h"

#include <errno.h>
#include <fcntl.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

static int write_all(int fd, const char *buf, size_t len)
{
    size_t off = 0;
    while (off < len) {
        ssize_t n = write(fd, buf + off, len - off);
        if (n <= 0)
            return -1;
        off += (size_t)n;
    }
    return 0;
}

int store_append(const struct soak *k, const char *rel, const char *line, size_t len)
{
    char path[4200];
    if (store_path(k, path, sizeof path, "%s", rel))
        return -1;
    int fd = file_open(path, O_WRONLY | O_APPEND | O_CREAT);
    if (fd < 0)
        return -1;
    /* a window is a record of months: on the card before the next one */
    int rc = !write_all(fd, line, len) && !fsync(fd) ? 0 : -1;
    close(fd);
    return rc;
}

void journal_add(struct journal *j, const char *file, char *line, size_t len)
{
    if (j->n == JOURNAL_MAX) { /* not reached: a window, an hour, a day */
        free(line);
        return;
    }
    struct jentry *e = &j->e[j->n++];
    snprintf(e->file, sizeof e->file, "%s", file);
    e->line = line;
    e->len = len;
}

void journal_free(struct journal *j)
{
    for (int i = 0; i < j->n; i++)
        free(j->e[i].line);
    j->n = 0;
}

static void roll_one(struct soak *k, struct agg *a, const char *kind, int64_t key, struct journal *j)
{
    if (a->key < 0 || a->key == key)
        return;
    char *buf = NULL, name[32];
    size_t len = 0;
    FILE *f = open_memstream(&buf, &len);
    agg_line(k, a, kind, f);
    fclose(f);
    utc_name(a->key * NSEC_PER_SEC, *kind == 'h' ? "hours/%Y-%m.jsonl" : "days/%Y.jsonl", name, sizeof name);
    journal_add(j, name, buf, len);
    agg_reset(a, k->ncpus);
}

void store_roll(struct soak *k, int64_t hour_key, int64_t day_key, struct journal *j)
{
    roll_one(k, &k->hour, "hour", hour_key, j);
    roll_one(k, &k->day, "day", day_key, j);
}

static void progress_lines(struct soak *k, FILE *f)
{
    if (k->hour.key >= 0)
        agg_line(k, &k->hour, "hour", f);
    if (k->day.key >= 0)
        agg_line(k, &k->day, "day", f);
}

/* pending.jsonl: the journal's lines, then the hour and day in progress.
 * If it cannot be written (a full card), it goes: an older journal would
 * file its window again at the next start. */
int store_write_pending(struct soak *k, const struct journal *j)
{
    static int said;
    char *buf = NULL, path[4200];
    size_t len = 0;
    FILE *f = open_memstream(&buf, &len);
    for (int i = 0; i < j->n; i++) {
        fprintf(f, "{\"file\":\"%s\",\"line\":", j->e[i].file);
        fwrite(j->e[i].line, 1, j->e[i].len - 1, f); /* without its newline */
        fputs("}\n", f);
    }
    progress_lines(k, f);
    fclose(f);
    int rc = write_atomic(k->r->cfg.state_dir, "pending.jsonl", buf, len);
    free(buf);
    if (rc && !store_path(k, path, sizeof path, "pending.jsonl")) {
        if (!said++)
            fprintf(stderr, "rtprobe: warning: cannot write %s: %s\n", path, strerror(errno));
        unlink(path);
    }
    return rc;
}

void journal_commit(struct soak *k, struct journal *j)
{
    for (int i = 0; i < j->n; i++)
        if (store_append(k, j->e[i].file, j->e[i].line, j->e[i].len))
            fprintf(stderr, "rtprobe: warning: cannot append to %s/%s: %s\n", k->r->cfg.state_dir, j->e[i].file,
                    strerror(errno));
    journal_free(j);
}

/* ---- replay --------------------------------------------------------------- */
/* Only the names the probe gives its files (9 is any digit): nothing read
 * back from a file decides where a write goes. */
static int our_name(const char *s, size_t n)
{
    static const char *forms[] = { "windows/9999-99-99.jsonl", "hours/9999-99.jsonl", "days/9999.jsonl" };
    for (unsigned f = 0; f < sizeof forms / sizeof *forms; f++) {
        const char *p = forms[f];
        size_t i = 0;
        while (i < n && p[i] && (p[i] == '9' ? s[i] >= '0' && s[i] <= '9' : s[i] == p[i]))
            i++;
        if (i == n && !p[i])
            return 1;
    }
    return 0;
}

/* Where a file's whole lines end: after its last newline (a power loss can
 * leave a line's end unwritten, or zeros). */
static off_t whole_end(int fd, off_t end)
{
    char buf[4096];
    while (end > 0) {
        size_t n = end < (off_t)sizeof buf ? (size_t)end : sizeof buf;
        if (pread(fd, buf, n, end - (off_t)n) != (ssize_t)n)
            return -1;
        for (size_t i = n; i > 0; i--)
            if (buf[i - 1] == '\n')
                return end - (off_t)n + (off_t)i;
        end -= (off_t)n;
    }
    return 0;
}

/* Append e[0..n) (lines of one file, in order) but those its whole lines
 * already end with: a replay after a replay, or after the appends were
 * made.  0, or -1 (errno) if they could not all be written. */
static int append_once(const struct soak *k, struct jentry *e, int n)
{
    char path[4200];
    struct stat st;
    if (store_path(k, path, sizeof path, "%s", e[0].file))
        return -1;
    int fd = file_open(path, O_RDWR | O_APPEND | O_CREAT);
    off_t size = fd < 0 || fstat(fd, &st) ? -1 : whole_end(fd, st.st_size);
    if (size < 0) {
        if (fd >= 0)
            close(fd);
        return -1;
    }
    int done = 0;
    for (int j = n; j > 0 && !done; j--) {
        size_t total = 0;
        for (int i = 0; i < j; i++)
            total += e[i].len;
        if ((off_t)total > size)
            continue;
        off_t at = size - (off_t)total;
        char c = '\n', *tail = malloc(total);
        int same = tail && (at == 0 || pread(fd, &c, 1, at - 1) == 1) && c == '\n' &&
                   pread(fd, tail, total, at) == (ssize_t)total;
        for (size_t i = 0, off = 0; same && (int)i < j; off += e[i].len, i++)
            same = !memcmp(tail + off, e[i].line, e[i].len);
        free(tail);
        done = same ? j : 0;
    }
    /* a line cut by a power loss stays a bad line of its own */
    int rc = size < st.st_size ? write_all(fd, "\n", 1) : 0;
    for (int i = done; i < n && !rc; i++)
        rc = write_all(fd, e[i].line, e[i].len);
    rc = rc || fsync(fd) ? -1 : 0;
    int saved = errno;
    close(fd);
    errno = saved;
    return rc;
}

/* Append the journal's lines, each file's in order, each once: 0 or -1. */
static int file_lines(const struct soak *k, struct journal *j)
{
    int done[JOURNAL_MAX] = { 0 }, rc = 0;
    for (int i = 0; i < j->n; i++) {
        struct jentry same[JOURNAL_MAX];
        int m = 0;
        for (int t = i; t < j->n; t++)
            if (!done[t] && !strcmp(j->e[t].file, j->e[i].file)) {
                same[m++] = j->e[t];
                done[t] = 1;
            }
        if (m && append_once(k, same, m)) {
            fprintf(stderr, "rtprobe: warning: cannot file the monitor's records in %s/%s: %s\n",
                    k->r->cfg.state_dir, j->e[i].file, strerror(errno));
            rc = -1;
        }
    }
    return rc;
}

static void remove_pending(const struct soak *k)
{
    char path[4200];
    if (store_path(k, path, sizeof path, "pending.jsonl") || unlink(path))
        return;
    int dfd = open(k->r->cfg.state_dir, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
    if (dfd >= 0) { /* gone for good before the next line is written */
        fsync(dfd);
        close(dfd);
    }
}

static void replay_line(struct journal *j, char *line, size_t n)
{
    long long key;
    char name[32];
    if (n < 2 || line[n - 1] != '\n')
        return; /* cut off: not a record */
    if (!strncmp(line, "{\"file\":\"", 9)) {
        char *file = line + 9, *q = memchr(file, '"', n - 9);
        if (!q || !our_name(file, (size_t)(q - file)) || strncmp(q, "\",\"line\":{", 10) || line[n - 2] != '}')
            return;
        *q = 0;
        size_t len = (size_t)(line + n - 2 - (q + 9)); /* the record, without the wrapper's } */
        char *rec = malloc(len + 1);
        if (!rec)
            return;
        memcpy(rec, q + 9, len);
        rec[len] = '\n';
        journal_add(j, file, rec, len + 1);
        return;
    }
    int hour = sscanf(line, "{\"hour\":%lld,", &key) == 1;
    if (!hour && sscanf(line, "{\"day\":%lld,", &key) != 1)
        return;
    utc_name(key * NSEC_PER_SEC, hour ? "hours/%Y-%m.jsonl" : "days/%Y.jsonl", name, sizeof name);
    char *rec = malloc(n);
    if (rec) {
        memcpy(rec, line, n);
        journal_add(j, name, rec, n);
    }
}

/* At a start: file what the last life left in pending.jsonl (the readers
 * merge the records of one hour or day from several lives).  Kept if a
 * line could not be written: the next start tries again. */
void store_flush_pending(struct soak *k)
{
    char *line = NULL;
    size_t cap = 0;
    struct journal j = { .n = 0 };
    FILE *f = store_read(k, "pending.jsonl");
    if (!f)
        return;
    ssize_t n;
    while ((n = getline(&line, &cap, f)) > 0)
        replay_line(&j, line, (size_t)n);
    free(line);
    fclose(f);
    if (!file_lines(k, &j))
        remove_pending(k);
    journal_free(&j);
}

/* At the stop: this life's hour and day in progress, filed from memory (a
 * crash before pending.jsonl goes finds them already filed). */
void store_file_progress(struct soak *k)
{
    struct journal j = { .n = 0 };
    char *buf = NULL;
    size_t len = 0;
    FILE *f = open_memstream(&buf, &len);
    progress_lines(k, f);
    fclose(f);
    for (char *p = buf, *nl; p < buf + len && (nl = memchr(p, '\n', (size_t)(buf + len - p))); p = nl + 1)
        replay_line(&j, p, (size_t)(nl + 1 - p));
    free(buf);
    if (!file_lines(k, &j))
        remove_pending(k);
    journal_free(&j);
}
