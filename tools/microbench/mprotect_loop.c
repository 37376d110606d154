#include <sys/mman.h>
#include <stdio.h>
#include <stdlib.h>
#include <time.h>
int main(int argc,char**argv){ long n=argc>1?atol(argv[1]):100000; volatile char *p=mmap(0,4096,PROT_READ|PROT_WRITE,MAP_PRIVATE|MAP_ANONYMOUS,-1,0); p[0]=1;
struct timespec a,b; clock_gettime(CLOCK_MONOTONIC,&a);
for(long i=0;i<n;i++){ mprotect((void*)p,4096,PROT_READ); (void)p[0]; mprotect((void*)p,4096,PROT_READ|PROT_WRITE); p[0]=i; }
clock_gettime(CLOCK_MONOTONIC,&b); printf("%.3f us/iter\n",((b.tv_sec-a.tv_sec)*1e9+(b.tv_nsec-a.tv_nsec))/n/1000.0); return 0;}
