// Seed 004's microbenchmarks and the IPI cost they hinge on, measured on the
// development host (an x86 KVM guest). Build: cc -O2 -pthread x86_flush.c
// Usage: ./a.out [iterations]   (needs CPUs 0 and 1)
//  local    madvise(DONTNEED) one page; touch it                (one CPU)
//  migrate  the same, then sched_setaffinity to the other CPU   (seed 004)
//  hop      sched_setaffinity to the other CPU only
//  ipi      local, while a second thread of the process spins on CPU 1, so
//           every madvise flush IPIs it: (ipi - local) = flush IPI round trip
#define _GNU_SOURCE
#include <pthread.h>
#include <sched.h>
#include <stdio.h>
#include <stdlib.h>
#include <sys/mman.h>
#include <time.h>

static double now_us(void) {
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return t.tv_sec * 1e6 + t.tv_nsec / 1e3;
}

static void pin(int cpu) {
    cpu_set_t s;
    CPU_ZERO(&s);
    CPU_SET(cpu, &s);
    if (sched_setaffinity(0, sizeof s, &s)) {
        perror("sched_setaffinity");
        exit(1);
    }
}

static volatile int stop;
static void *spin(void *arg) {
    (void)arg;
    pin(1);
    while (!stop)
        ;
    return NULL;
}

static double run(char *p, long n, int migrate, int madv) {
    int cpu = 0;
    pin(0);
    double t0 = now_us();
    for (long i = 0; i < n; i++) {
        if (madv) {
            madvise(p, 4096, MADV_DONTNEED);
            p[0] = 1;
        }
        if (migrate) {
            cpu ^= 1;
            pin(cpu);
        }
    }
    return (now_us() - t0) / n;
}

int main(int argc, char **argv) {
    long n = argc > 1 ? atol(argv[1]) : 200000;
    char *p = mmap(NULL, 4096, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    p[0] = 1;
    run(p, n / 10, 0, 1); // warm up
    printf("local   %.3f us/iter\n", run(p, n, 0, 1));
    printf("migrate %.3f us/iter\n", run(p, n, 1, 1));
    printf("hop     %.3f us/iter\n", run(p, n, 1, 0));
    pthread_t t;
    pthread_create(&t, NULL, spin, NULL);
    struct timespec d = {0, 50000000};
    nanosleep(&d, NULL);
    printf("ipi     %.3f us/iter\n", run(p, n, 0, 1));
    stop = 1;
    pthread_join(t, NULL);
    return 0;
}
