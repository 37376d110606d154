#define _GNU_SOURCE
#include <sys/mman.h>
#include <stdio.h>
#include <stdlib.h>
#include <time.h>
#include <unistd.h>
#include <sys/syscall.h>
static double now(){struct timespec t;clock_gettime(CLOCK_MONOTONIC,&t);return t.tv_sec*1e9+t.tv_nsec;}
int main(){ long n=200000; volatile char*p=mmap(0,4096,PROT_READ|PROT_WRITE,MAP_PRIVATE|MAP_ANONYMOUS,-1,0);
 double a=now(); for(long i=0;i<n;i++) syscall(SYS_getppid); double b=now(); printf("null syscall %.3f us\n",(b-a)/n/1000);
 a=now(); for(long i=0;i<n;i++){ madvise((void*)p,4096,MADV_DONTNEED);} b=now(); printf("madvise empty %.3f us\n",(b-a)/n/1000);
 a=now(); for(long i=0;i<n;i++){ madvise((void*)p,4096,MADV_DONTNEED); p[0]=1;} b=now(); printf("madvise+touch %.3f us\n",(b-a)/n/1000);
 a=now(); for(long i=0;i<n;i++){ mprotect((void*)p,4096,PROT_READ);} b=now(); printf("mprotect same %.3f us\n",(b-a)/n/1000);
 return 0;}
