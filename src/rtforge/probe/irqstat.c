/* Interrupt telemetry for the per-second series: how many interrupts each
 * measured CPU took in that second (/proc/interrupts, every row summed:
 * device IRQs, the local timer -- the samplers' own wake-ups among them --
 * and IPIs) and how much CPU time the threaded IRQ handlers used (irq/N-name
 * kernel threads, utime + stime from /proc/PID/stat), with the busiest one
 * named.  On PREEMPT_RT nearly every device handler is such a thread, so a
 * latency spike next to a busy irq/ thread names its driver.
 *
 * Sampled by the non-RT writer at each second boundary of the run; the
 * difference between two samples is that second's.  Kept in a small ring
 * because the series is written two seconds behind the samplers. */
#include "rtprobe.h"

#include <ctype.h>
#include <dirent.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#define IRQ_SLOTS 8
#define COMM_MAX 32

struct ithread {
    int pid;
    unsigned long long ticks;
    char comm[COMM_MAX];
};

struct irq_slot {
    int64_t sec;                /* -1: empty */
    int have_irqs;
    unsigned long long *irqs;   /* per measured CPU */
    double thread_pct, top_pct; /* % of one CPU */
    char top[COMM_MAX];
};

struct irqstat {
    int ncpus;
    const int *cpus;
    unsigned long long *cur, *prev; /* per measured CPU, totals */
    int have_prev_irqs;
    struct ithread *threads, *prev_threads;
    int nthreads, nprev, cap, prev_cap;
    int have_prev_threads;
    long clk_tck;
    struct irq_slot slots[IRQ_SLOTS];
};

struct irqstat *irqstat_open(const int *cpus, int ncpus)
{
    struct irqstat *s = calloc(1, sizeof *s);
    if (!s)
        return NULL;
    s->ncpus = ncpus;
    s->cpus = cpus;
    s->cur = calloc((size_t)ncpus, sizeof *s->cur);
    s->prev = calloc((size_t)ncpus, sizeof *s->prev);
    s->clk_tck = sysconf(_SC_CLK_TCK);
    int ok = s->cur && s->prev;
    for (int i = 0; i < IRQ_SLOTS; i++) {
        s->slots[i].sec = -1;
        s->slots[i].irqs = calloc((size_t)ncpus, sizeof *s->slots[i].irqs);
        ok = ok && s->slots[i].irqs;
    }
    if (!ok) {
        irqstat_close(s);
        return NULL;
    }
    return s;
}

/* Per measured CPU, the sum of every row of /proc/interrupts.  Its header
 * names the columns (online CPUs only: an offline CPU has none). */
static int read_interrupts(struct irqstat *s)
{
    char path[600];
    snprintf(path, sizeof path, "%s/proc/interrupts", g_sysroot);
    FILE *f = fopen(path, "r");
    if (!f)
        return -1;
    char *line = NULL;
    size_t cap = 0;
    int ok = -1;
    int *col_of = NULL; /* measured CPU index -> column, -1 absent */
    int ncols = 0;
    if (getline(&line, &cap, f) > 0 && (col_of = malloc((size_t)s->ncpus * sizeof *col_of))) {
        for (int i = 0; i < s->ncpus; i++)
            col_of[i] = -1;
        for (char *p = line; (p = strstr(p, "CPU")); p += 3, ncols++)
            for (int i = 0; i < s->ncpus; i++)
                if (atoi(p + 3) == s->cpus[i])
                    col_of[i] = ncols;
        memset(s->cur, 0, (size_t)s->ncpus * sizeof *s->cur);
        unsigned long long *row = calloc((size_t)ncols + 1, sizeof *row);
        while (row && getline(&line, &cap, f) > 0) {
            char *p = strchr(line, ':');
            if (!p)
                continue;
            p++;
            int n = 0;
            while (n < ncols) {
                char *end;
                while (*p == ' ')
                    p++;
                if (!isdigit((unsigned char)*p))
                    break; /* ERR:, MIS: have one number; the rest is the chip and name */
                row[n++] = strtoull(p, &end, 10);
                p = end;
            }
            if (n < ncols)
                continue;
            for (int i = 0; i < s->ncpus; i++)
                if (col_of[i] >= 0)
                    s->cur[i] += row[col_of[i]];
        }
        ok = row ? 0 : -1;
        free(row);
    }
    free(col_of);
    free(line);
    fclose(f);
    return ok;
}

/* Every irq/ thread's CPU time so far. */
static int read_threads(struct irqstat *s)
{
    char path[600];
    snprintf(path, sizeof path, "%s/proc", g_sysroot);
    DIR *d = opendir(path);
    if (!d)
        return -1;
    s->nthreads = 0;
    struct dirent *e;
    while ((e = readdir(d))) {
        if (!isdigit((unsigned char)e->d_name[0]))
            continue;
        char p[600], buf[1024];
        snprintf(p, sizeof p, "%s/proc/%.64s/stat", g_sysroot, e->d_name);
        if (read_text(p, buf, sizeof buf) <= 0)
            continue;
        char *open = strchr(buf, '('), *close = strrchr(buf, ')');
        if (!open || !close || close < open || strncmp(open + 1, "irq/", 4))
            continue;
        /* after ") ": state(3) ... utime(14) stime(15) */
        unsigned long long ut = 0, st = 0;
        char *q = close + 2;
        for (int field = 3; field < 14 && q; field++)
            q = strchr(q, ' ') ? strchr(q, ' ') + 1 : NULL;
        if (!q || sscanf(q, "%llu %llu", &ut, &st) != 2)
            continue;
        if (s->nthreads == s->cap) {
            int ncap = s->cap ? s->cap * 2 : 64;
            struct ithread *t = realloc(s->threads, (size_t)ncap * sizeof *t);
            if (!t)
                break;
            s->threads = t;
            s->cap = ncap;
        }
        struct ithread *t = &s->threads[s->nthreads++];
        t->pid = atoi(e->d_name);
        t->ticks = ut + st;
        size_t len = (size_t)(close - open - 1);
        if (len >= COMM_MAX)
            len = COMM_MAX - 1;
        memcpy(t->comm, open + 1, len);
        t->comm[len] = 0;
    }
    closedir(d);
    return 0;
}

/* Sample at the start of second sec of the run: what came since the last
 * sample is second sec - 1's. */
void irqstat_sample(struct irqstat *s, int64_t sec)
{
    struct irq_slot *sl = &s->slots[(sec - 1 + IRQ_SLOTS) % IRQ_SLOTS];
    int have_irqs = read_interrupts(s) == 0;
    int have_threads = read_threads(s) == 0;
    sl->sec = sec - 1;
    sl->have_irqs = have_irqs && s->have_prev_irqs;
    for (int i = 0; sl->have_irqs && i < s->ncpus; i++)
        sl->irqs[i] = s->cur[i] >= s->prev[i] ? s->cur[i] - s->prev[i] : 0;
    sl->thread_pct = sl->top_pct = -1;
    sl->top[0] = 0;
    if (have_threads && s->have_prev_threads && s->clk_tck > 0) {
        unsigned long long sum = 0, top = 0;
        for (int i = 0; i < s->nthreads; i++) {
            const struct ithread *t = &s->threads[i];
            unsigned long long d = 0;
            for (int j = 0; j < s->nprev; j++)
                if (s->prev_threads[j].pid == t->pid) {
                    d = t->ticks >= s->prev_threads[j].ticks ? t->ticks - s->prev_threads[j].ticks : 0;
                    break;
                }
            sum += d;
            if (d > top) {
                top = d;
                memcpy(sl->top, t->comm, COMM_MAX);
            }
        }
        sl->thread_pct = 100.0 * (double)sum / (double)s->clk_tck;
        sl->top_pct = 100.0 * (double)top / (double)s->clk_tck;
    }
    if (have_irqs) {
        memcpy(s->prev, s->cur, (size_t)s->ncpus * sizeof *s->cur);
        s->have_prev_irqs = 1;
    }
    if (have_threads) { /* swap: the current list becomes the previous one */
        struct ithread *t = s->prev_threads;
        int c = s->prev_cap;
        s->prev_threads = s->threads;
        s->prev_cap = s->cap;
        s->nprev = s->nthreads;
        s->threads = t;
        s->cap = c;
        s->have_prev_threads = 1;
    }
}

/* The fields of second sec for its series line; null when not sampled. */
void irqstat_write(const struct irqstat *s, FILE *f, int64_t sec)
{
    const struct irq_slot *sl = s ? &s->slots[sec % IRQ_SLOTS] : NULL;
    int here = sl && sl->sec == sec;
    fputs(",\"irqs\":", f);
    if (here && sl->have_irqs) {
        for (int i = 0; i < s->ncpus; i++)
            fprintf(f, "%s%llu", i ? "," : "[", sl->irqs[i]);
        fputc(']', f);
    } else {
        fputs("null", f);
    }
    if (here && sl->thread_pct >= 0) {
        fprintf(f, ",\"irq_thread_pct\":%.2f,\"irq_thread_top\":", sl->thread_pct);
        json_str(f, sl->top[0] ? sl->top : NULL);
        fprintf(f, ",\"irq_thread_top_pct\":%.2f", sl->top_pct);
    } else {
        fputs(",\"irq_thread_pct\":null,\"irq_thread_top\":null,\"irq_thread_top_pct\":null", f);
    }
}

/* The soak monitor samples at window boundaries (slot idx holds the span
 * since the previous sample): rates over span_s, not one second's counts. */
int irqstat_window(const struct irqstat *s, int64_t idx, double span_s, double *per_cpu, double *thread_pct,
                   double *top_pct, char *top, size_t top_size)
{
    const struct irq_slot *sl = s ? &s->slots[idx % IRQ_SLOTS] : NULL;
    int got = 0;
    *thread_pct = *top_pct = -1;
    top[0] = 0;
    if (!sl || sl->sec != idx || span_s <= 0)
        return 0;
    if (sl->have_irqs) {
        for (int i = 0; i < s->ncpus; i++)
            per_cpu[i] = (double)sl->irqs[i] / span_s;
        got |= 1;
    }
    if (sl->thread_pct >= 0) {
        *thread_pct = sl->thread_pct / span_s;
        *top_pct = sl->top_pct / span_s;
        snprintf(top, top_size, "%s", sl->top);
        got |= 2;
    }
    return got;
}

void irqstat_close(struct irqstat *s)
{
    if (!s)
        return;
    for (int i = 0; i < IRQ_SLOTS; i++)
        free(s->slots[i].irqs);
    free(s->cur);
    free(s->prev);
    free(s->threads);
    free(s->prev_threads);
    free(s);
}
