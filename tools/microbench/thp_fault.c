/* Cost of one transparent-huge-page fault (allocate and clear 2 MiB) on
 * this host, for the thp_fault_ns profile parameter (docs/model.md).
 * Maps a 2 MiB-aligned region with MADV_HUGEPAGE, writes one byte per
 * 2 MiB and times each first write; checks AnonHugePages grew, so the
 * faults really were huge. Usage: thp_fault [MiB per round] [rounds] */
#define _GNU_SOURCE
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <time.h>

static double now_ns(void)
{
	struct timespec t;
	clock_gettime(CLOCK_MONOTONIC, &t);
	return t.tv_sec * 1e9 + t.tv_nsec;
}

static long anon_huge_kb(void)
{
	FILE *f = fopen("/proc/self/smaps_rollup", "r");
	char line[256];
	long kb = -1;
	if (!f)
		return -1;
	while (fgets(line, sizeof(line), f))
		if (sscanf(line, "AnonHugePages: %ld kB", &kb) == 1)
			break;
	fclose(f);
	return kb;
}

int main(int argc, char **argv)
{
	size_t mib = argc > 1 ? strtoul(argv[1], NULL, 0) : 256;
	int rounds = argc > 2 ? atoi(argv[2]) : 20;
	size_t huge = 2UL << 20, len = mib << 20;
	double total = 0;
	long faults = 0;
	for (int r = 0; r < rounds; r++) {
		char *raw = mmap(NULL, len + huge, PROT_READ | PROT_WRITE,
				 MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
		if (raw == MAP_FAILED) {
			perror("mmap");
			return 1;
		}
		char *p = (char *)(((unsigned long)raw + huge - 1) & ~(huge - 1));
		if (madvise(p, len, MADV_HUGEPAGE)) {
			perror("madvise(MADV_HUGEPAGE)");
			return 1;
		}
		for (size_t off = 0; off < len; off += huge) {
			double t0 = now_ns();
			p[off] = 1;
			total += now_ns() - t0;
			faults++;
		}
		if (r == 0)
			printf("AnonHugePages after the first round: %ld kB (%zu MiB written)\n",
			       anon_huge_kb(), mib);
		munmap(raw, len + huge);
	}
	printf("%ld huge faults, %.1f us each (allocate + clear 2 MiB + map)\n",
	       faults, total / faults / 1e3);
	return 0;
}
