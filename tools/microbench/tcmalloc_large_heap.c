/*
 * The loop of gperftools' large_heap_fragmentation_unittest (seed 000's
 * "tcmalloc" experiment), written out for the host measurement behind the
 * eMAG/host slowdown (docs/model.md, "Host-derived kernel costs"): three
 * passes of malloc+free of 100 MB .. 500 MB in 20,000-byte steps, checking
 * tcmalloc's heap size after each. Links against the system's libtcmalloc.
 *
 *   gcc -O2 -o /tmp/tcm tools/microbench/tcmalloc_large_heap.c -ltcmalloc
 *   perf stat -r 10 -e task-clock /tmp/tcm
 */
#include <gperftools/malloc_extension_c.h>
#include <stdio.h>
#include <stdlib.h>

int main(void)
{
	unsigned long iterations = 0;
	for (int pass = 1; pass <= 3; pass++) {
		size_t size = 100UL * 1024 * 1024;
		while (size < 500UL * 1024 * 1024) {
			void *p = malloc(size);
			free(p);
			size += 20000;
			size_t heap = (size_t)-1;
			MallocExtension_GetNumericProperty("generic.heap_size", &heap);
			if (heap >= 1UL << 30) {
				fprintf(stderr, "heap size %zu >= 1 GiB\n", heap);
				return 1;
			}
			iterations++;
		}
	}
	printf("PASS %lu iterations\n", iterations);
	return 0;
}
