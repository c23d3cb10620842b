/* nqueens: count the solutions of the N-queens problem with T threads, as a
 * CPU throughput benchmark (`rtforge bench cpu`).  C99 + pthreads, nothing
 * else, so it cross-builds statically for any board like the probe.
 *
 * The search tree is cut at its first two rows: each placement of the first
 * two queens is one task, and threads take the next task from a shared
 * counter until none is left.  N*N small tasks (not N big ones, one per
 * first-row column) keep 4 threads evenly busy to the end; a mutex around
 * the counter costs nothing next to a task and keeps this plain C99.
 *
 * Output, one JSON line on stdout:
 *   {"n":12,"threads":4,"solutions":14200,"tasks":110,"elapsed_ns":...,"cpu_ns":...}
 * elapsed_ns is CLOCK_MONOTONIC from before the first thread starts to after
 * the last one ends (the solve only: no start-up, no printing); cpu_ns is
 * the process's CPU time over the same span, so cpu_ns/elapsed_ns says how
 * many CPUs actually worked.
 *
 * Exit status: 0 solved, 2 bad arguments, 1 anything else; 3 when stdout's
 * reader went away mid-solve (see watchdog below). */
#define _POSIX_C_SOURCE 200809L

#include <errno.h>
#include <poll.h>
#include <pthread.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#define MAX_N 24          /* 64-bit counts and 32-bit masks are plenty */
#define MAX_THREADS 1024
#define EXIT_USAGE 2
#define EXIT_ORPHANED 3

static unsigned g_n, g_all;   /* board size, mask of its N columns */
static unsigned g_depth;      /* rows placed per task: 2 (1 when N == 1) */
static unsigned g_ntasks;     /* N^depth candidate prefixes */
static unsigned g_next_task;
static pthread_mutex_t g_lock = PTHREAD_MUTEX_INITIALIZER;

struct worker {
    pthread_t tid;
    uint64_t solutions;
    unsigned tasks;           /* valid prefixes this thread solved */
};

/* Classic bitboard backtracking: cols, and the two diagonal directions
 * shifted one column per row, are the squares attacked in this row. */
static uint64_t solve(unsigned cols, unsigned ld, unsigned rd)
{
    if (cols == g_all)
        return 1;
    uint64_t count = 0;
    unsigned free_ = g_all & ~(cols | ld | rd);
    while (free_) {
        unsigned bit = free_ & -free_;
        free_ ^= bit;
        count += solve(cols | bit, (ld | bit) << 1, (rd | bit) >> 1);
    }
    return count;
}

/* Place the first g_depth queens as task k says (its base-N digits are the
 * columns); -1 when two of them attack each other. */
static int64_t solve_task(unsigned k)
{
    unsigned cols = 0, ld = 0, rd = 0;
    for (unsigned row = 0; row < g_depth; row++) {
        unsigned bit = 1u << (k % g_n);
        k /= g_n;
        if (bit & (cols | ld | rd))
            return -1;
        cols |= bit;
        ld = ((ld | bit) << 1) & g_all;
        rd = (rd | bit) >> 1;
    }
    return (int64_t)solve(cols, ld, rd);
}

static void *work(void *arg)
{
    struct worker *w = arg;
    for (;;) {
        pthread_mutex_lock(&g_lock);
        unsigned k = g_next_task++;
        pthread_mutex_unlock(&g_lock);
        if (k >= g_ntasks)
            return NULL;
        int64_t n = solve_task(k);
        if (n >= 0) {
            w->solutions += (uint64_t)n;
            w->tasks++;
        }
    }
}

/* When rtforge (or the SSH session carrying us) goes away, the pipe that is
 * our stdout loses its reader; poll() then reports POLLERR.  Without this a
 * solve started over SSH would run on after Ctrl-C or a dropped connection,
 * since sshd does not signal a command that has no terminal. */
static void *watchdog(void *arg)
{
    (void)arg;
    for (;;) {
        struct pollfd p = {.fd = STDOUT_FILENO, .events = 0};
        int r = poll(&p, 1, -1);
        if (r > 0)
            _exit(EXIT_ORPHANED);   /* only POLLERR/POLLHUP/POLLNVAL can be set */
        if (r < 0 && errno != EINTR)
            return NULL;
    }
}

static void start_watchdog(void)
{
    struct stat st;
    if (fstat(STDOUT_FILENO, &st) || !(S_ISFIFO(st.st_mode) || S_ISSOCK(st.st_mode)))
        return;  /* a file or terminal: nothing to watch */
    pthread_t tid;
    pthread_attr_t attr;
    pthread_attr_init(&attr);
    pthread_attr_setdetachstate(&attr, PTHREAD_CREATE_DETACHED);
    pthread_attr_setstacksize(&attr, 64 * 1024);
    if (pthread_create(&tid, &attr, watchdog, NULL))
        fputs("nqueens: warning: no watchdog thread; an interrupted solve runs to its end\n", stderr);
    pthread_attr_destroy(&attr);
}

static long arg_num(const char *opt, const char *s, long lo, long hi)
{
    char *end;
    errno = 0;
    long v = s ? strtol(s, &end, 10) : 0;
    if (!s || errno || end == s || *end || v < lo || v > hi) {
        fprintf(stderr, "nqueens: %s wants a whole number from %ld to %ld, got '%s'\n", opt, lo, hi, s ? s : "");
        exit(EXIT_USAGE);
    }
    return v;
}

static int64_t ns(clockid_t clk)
{
    struct timespec t;
    clock_gettime(clk, &t);
    return (int64_t)t.tv_sec * 1000000000 + t.tv_nsec;
}

int main(int argc, char **argv)
{
    long n = 12, nthreads = 1;
    for (int i = 1; i < argc; i++) {
        const char *value = i + 1 < argc ? argv[i + 1] : NULL;
        if (!strcmp(argv[i], "--n"))
            n = arg_num("--n", value, 1, MAX_N), i++;
        else if (!strcmp(argv[i], "--threads"))
            nthreads = arg_num("--threads", value, 1, MAX_THREADS), i++;
        else if (!strcmp(argv[i], "--help")) {
            puts("usage: nqueens [--n N] [--threads T]   count N-queens solutions (default N=12, T=1), print JSON");
            return 0;
        } else {
            fprintf(stderr, "nqueens: unknown argument '%s' (try --help)\n", argv[i]);
            return EXIT_USAGE;
        }
    }
    g_n = (unsigned)n;
    g_all = (1u << g_n) - 1;
    g_depth = g_n >= 2 ? 2 : 1;
    g_ntasks = g_depth == 2 ? g_n * g_n : g_n;

    struct worker *w = calloc((size_t)nthreads, sizeof *w);
    if (!w) {
        fputs("nqueens: out of memory\n", stderr);
        return 1;
    }
    start_watchdog();

    int64_t t0 = ns(CLOCK_MONOTONIC), c0 = ns(CLOCK_PROCESS_CPUTIME_ID);
    for (long i = 0; i < nthreads; i++) {
        int err = pthread_create(&w[i].tid, NULL, work, &w[i]);
        if (err) {
            fprintf(stderr, "nqueens: cannot start thread %ld of %ld: %s\n", i + 1, nthreads, strerror(err));
            return 1;
        }
    }
    uint64_t solutions = 0;
    unsigned tasks = 0;
    for (long i = 0; i < nthreads; i++) {
        pthread_join(w[i].tid, NULL);
        solutions += w[i].solutions;
        tasks += w[i].tasks;
    }
    int64_t elapsed = ns(CLOCK_MONOTONIC) - t0, cpu = ns(CLOCK_PROCESS_CPUTIME_ID) - c0;

    printf("{\"n\":%u,\"threads\":%ld,\"solutions\":%llu,\"tasks\":%u,\"elapsed_ns\":%lld,\"cpu_ns\":%lld}\n",
           g_n, nthreads, (unsigned long long)solutions, tasks, (long long)elapsed, (long long)cpu);
    free(w);
    return fflush(stdout) ? 1 : 0;
}
