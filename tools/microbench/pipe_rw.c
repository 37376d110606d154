/* Cost of a 100-byte pipe write plus read in one process (no wake-ups). */
#include <stdio.h>
#include <time.h>
#include <unistd.h>
int main(void) {
    int fd[2]; char buf[100] = {0}; long n = 200000;
    if (pipe(fd)) return 1;
    struct timespec a, b; clock_gettime(CLOCK_MONOTONIC, &a);
    for (long i = 0; i < n; i++) {
        if (write(fd[1], buf, sizeof buf) != sizeof buf) return 1;
        if (read(fd[0], buf, sizeof buf) != sizeof buf) return 1;
    }
    clock_gettime(CLOCK_MONOTONIC, &b);
    printf("pipe write+read of 100 B: %.3f us\n", ((b.tv_sec - a.tv_sec) * 1e9 + (b.tv_nsec - a.tv_nsec)) / n / 1000.0);
    return 0;
}
