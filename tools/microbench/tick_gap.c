/* Cost of one timer tick interrupt, seen from a busy user loop.
 *
 * Pins itself to one CPU, spins reading the TSC for SECONDS, and records
 * every gap between two consecutive reads longer than THRESH_NS: each is
 * an interrupt (or, in a VM, the hypervisor) taking the CPU away. It reads
 * that CPU's "LOC: Local timer interrupts" from /proc/interrupts before
 * and after. Other interrupts (function-call IPIs, the hypervisor's own
 * work) make gaps too, so the ticks are told apart by their period: every
 * tick falls at the same phase of the tick period (1/HZ, PERIOD_NS; Linux
 * aligns tick_sched_timer to jiffies), so the gaps that start within
 * +-WINDOW of the most common phase are the ticks. It prints the
 * distribution of all gaps and of the tick gaps: the median tick gap is
 * the cost of one tick, entry to exit, as the interrupted program sees it.
 *
 * gcc -O2 -o /tmp/tick_gap tools/microbench/tick_gap.c
 * /tmp/tick_gap [cpu] [seconds] [thresh_ns] [period_ns]
 */
#define _GNU_SOURCE
#include <sched.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <math.h>
#include <time.h>
#include <x86intrin.h>

static long loc_count(int cpu) {
    FILE *f = fopen("/proc/interrupts", "r");
    char line[4096];
    long v = -1;
    if (!f) return -1;
    while (fgets(line, sizeof line, f)) {
        char *p = line;
        while (*p == ' ') p++;
        if (strncmp(p, "LOC:", 4)) continue;
        p += 4;
        for (int c = 0; c <= cpu; c++) v = strtol(p, &p, 10);
        break;
    }
    fclose(f);
    return v;
}

static double now_ns(void) {
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return t.tv_sec * 1e9 + t.tv_nsec;
}

static int cmp(const void *a, const void *b) {
    double x = *(const double *)a, y = *(const double *)b;
    return (x > y) - (x < y);
}

static void summary(const char *what, double *g, size_t n) {
    double sum = 0;
    qsort(g, n, sizeof *g, cmp);
    for (size_t i = 0; i < n; i++) sum += g[i];
    printf("%s: %zu gaps", what, n);
    if (n)
        printf(", ns: p25 %.0f  median %.0f  p75 %.0f  p90 %.0f  mean %.0f  max %.0f",
               g[n / 4], g[n / 2], g[3 * n / 4], g[9 * n / 10], sum / n, g[n - 1]);
    printf("\n");
}

#define BIN_NS 2000.0
#define WINDOW_NS 4000.0

int main(int argc, char **argv) {
    int cpu = argc > 1 ? atoi(argv[1]) : 1;
    double secs = argc > 2 ? atof(argv[2]) : 5;
    double thresh = argc > 3 ? atof(argv[3]) : 300;
    double period = argc > 4 ? atof(argv[4]) : 4e6; /* HZ=250 */
    cpu_set_t set;
    CPU_ZERO(&set);
    CPU_SET(cpu, &set);
    if (sched_setaffinity(0, sizeof set, &set)) { perror("sched_setaffinity"); return 1; }
    /* TSC ticks per ns, over 100 ms. */
    double t0 = now_ns();
    unsigned long long c0 = __rdtsc();
    while (now_ns() - t0 < 1e8) {}
    double per_ns = (__rdtsc() - c0) / (now_ns() - t0);
    size_t cap = 1 << 22, n = 0;
    double *gaps = malloc(cap * sizeof *gaps);
    unsigned long long *at = malloc(cap * sizeof *at);
    long loc0 = loc_count(cpu);
    unsigned long long end = __rdtsc() + (unsigned long long)(secs * 1e9 * per_ns);
    unsigned long long limit = (unsigned long long)(thresh * per_ns);
    double m0 = now_ns();
    unsigned long long start = __rdtsc(), prev = start;
    for (;;) {
        unsigned long long t = __rdtsc();
        if (t - prev > limit && n < cap) { gaps[n] = t - prev; at[n++] = prev - start; }
        prev = t;
        if (t > end) break;
    }
    double m1 = now_ns();
    per_ns = (prev - start) / (m1 - m0); /* over the whole run */
    long loc1 = loc_count(cpu);
    /* Phase of each gap's start within the tick period, in BIN_NS bins. */
    size_t bins = (size_t)(period / BIN_NS) + 1, best = 0;
    size_t *hist = calloc(bins, sizeof *hist);
    for (size_t i = 0; i < n; i++) {
        gaps[i] /= per_ns;
        double ph = fmod(m0 + at[i] / per_ns, period);
        hist[(size_t)(ph / BIN_NS)]++;
    }
    for (size_t b = 0; b < bins; b++) if (hist[b] > hist[best]) best = b;
    double centre = (best + 0.5) * BIN_NS;
    double *ticks = malloc(n * sizeof *ticks);
    size_t nt = 0;
    for (size_t i = 0; i < n; i++) {
        double d = fabs(fmod(m0 + at[i] / per_ns, period) - centre);
        if (d > period / 2) d = period - d;
        if (d <= WINDOW_NS) ticks[nt++] = gaps[i];
    }
    printf("cpu %d, %.1f s: %ld local timer interrupts (%.0f/s); phase of the ticks %.0f us\n",
           cpu, secs, loc1 - loc0, (loc1 - loc0) / secs, centre / 1000);
    summary("all gaps", gaps, n);
    summary("tick gaps", ticks, nt);
    return 0;
}
