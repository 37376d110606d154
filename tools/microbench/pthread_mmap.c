// An approximation of Vitaly Kuznetsov's pthread_mmap benchmark as tlbsim models it
// (workload pthread-mmap): 8 threads x 100 rounds of mmap, write every 4 KiB
// page, munmap, over 256 MiB in total. THP=1 in the environment asks for
// huge pages (madvise MADV_HUGEPAGE). Build: cc -O2 -pthread pthread_mmap.c
// Usage: [THP=1] ./a.out [total MiB]
#define _GNU_SOURCE
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <sys/mman.h>
#include <time.h>
static long rounds = 100, threads = 8; static size_t bytes;
static void *body(void *a) { (void)a;
  for (long r = 0; r < rounds; r++) {
    char *p = mmap(NULL, bytes, PROT_READ|PROT_WRITE, MAP_PRIVATE|MAP_ANONYMOUS, -1, 0);
    if (p == MAP_FAILED) { perror("mmap"); exit(1); }
    if (getenv("THP")) madvise(p, bytes, MADV_HUGEPAGE);
    for (size_t o = 0; o < bytes; o += 4096) p[o] = 1;
    munmap(p, bytes);
  }
  return NULL; }
int main(int argc, char **argv) {
  size_t total = (argc > 1 ? atol(argv[1]) : 256) << 20;
  bytes = total / threads;
  struct timespec t0, t1; clock_gettime(CLOCK_MONOTONIC, &t0);
  pthread_t t[64]; for (long i = 0; i < threads; i++) pthread_create(&t[i], NULL, body, NULL);
  for (long i = 0; i < threads; i++) pthread_join(t[i], NULL);
  clock_gettime(CLOCK_MONOTONIC, &t1);
  printf("%.3f s\n", (t1.tv_sec - t0.tv_sec) + (t1.tv_nsec - t0.tv_nsec) / 1e9);
}
