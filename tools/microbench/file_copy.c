/* unixbench fstime's copy loop (kdlucas/byte-unixbench, src/fstime.c,
 * c_test): read(bufsize) from one file and write(bufsize) to another,
 * rewinding both at max_blocks KiB; the page cache holds both files.
 * Also the read-only and write-only loops, to split the cost between
 * the two calls. Prints ns per call for bufsize 256, 1024 and 4096
 * (unixbench's fsbuffer, fstime and fsdisk), and a null system call.
 * Build: cc -O2 -o file_copy file_copy.c; run in a directory on the file
 * system to measure (unixbench runs in its ./tmp). */
#define _GNU_SOURCE
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <sys/syscall.h>
#include <unistd.h>

static double now(void) {
  struct timespec t;
  clock_gettime(CLOCK_MONOTONIC, &t);
  return t.tv_sec * 1e9 + t.tv_nsec;
}

static char buf[8192];

static void fill(int fd, long bytes, int bs) {
  lseek(fd, 0, SEEK_SET);
  for (long i = 0; i < bytes / bs; i++)
    if (write(fd, buf, bs) != bs) { perror("write"); exit(1); }
}

int main(int argc, char **argv) {
  const int sizes[3][2] = {{256, 500}, {1024, 2000}, {4096, 8000}};
  long calls = argc > 1 ? atol(argv[1]) : 2000000;
  memset(buf, 0x5a, sizeof buf);
  /* the null system call, to subtract: the model charges it apart */
  double a0 = now();
  for (long i = 0; i < calls; i++) syscall(SYS_getppid);
  printf("null syscall %.0f ns\n", (now() - a0) / calls);
  for (int s = 0; s < 3; s++) {
    int bs = sizes[s][0];
    long bytes = (long)sizes[s][1] * 1024, per = bytes / bs;
    int f = open("fc-dummy0", O_RDWR | O_CREAT | O_TRUNC, 0600);
    int g = open("fc-dummy1", O_RDWR | O_CREAT | O_TRUNC, 0600);
    if (f < 0 || g < 0) { perror("open"); return 1; }
    fill(f, bytes, bs);
    fill(g, bytes, bs);
    fsync(f);
    fsync(g);
    /* read only */
    lseek(f, 0, SEEK_SET);
    double a = now();
    for (long i = 0; i < calls; i++) {
      if (i % per == 0) lseek(f, 0, SEEK_SET);
      if (read(f, buf, bs) != bs) { perror("read"); return 1; }
    }
    double r = (now() - a) / calls;
    /* write only (overwrites cached pages) */
    a = now();
    for (long i = 0; i < calls; i++) {
      if (i % per == 0) lseek(g, 0, SEEK_SET);
      if (write(g, buf, bs) != bs) { perror("write"); return 1; }
    }
    double w = (now() - a) / calls;
    /* copy, as c_test */
    a = now();
    for (long i = 0; i < calls; i++) {
      if (i % per == 0) { lseek(f, 0, SEEK_SET); lseek(g, 0, SEEK_SET); }
      if (read(f, buf, bs) != bs || write(g, buf, bs) != bs) { perror("copy"); return 1; }
    }
    double c = (now() - a) / calls;
    printf("bufsize %4d: read %.0f ns, write %.0f ns, copy (read+write) %.0f ns, %.0f KBps\n",
           bs, r, w, c, bs / 1024.0 / (c * 1e-9));
    close(f);
    close(g);
    unlink("fc-dummy0");
    unlink("fc-dummy1");
  }
  return 0;
}
