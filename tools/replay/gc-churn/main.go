// gc-churn: goroutines that allocate and drop buffers, so that Go's
// garbage collector and scavenger return memory to the kernel
// (madvise) while other threads run: a real multi-threaded program
// whose runtime unmaps memory.
package main

import (
	"fmt"
	"os"
	"runtime/debug"
	"sync"
)

func main() {
	debug.SetGCPercent(50)
	var wg sync.WaitGroup
	var mu sync.Mutex
	total := 0
	for g := 0; g < 4; g++ {
		wg.Add(1)
		go func(g int) {
			defer wg.Done()
			keep := make([][]byte, 64)
			sum := 0
			for i := 0; i < 6000; i++ {
				b := make([]byte, 64<<10+(i%7)*4096)
				for j := 0; j < len(b); j += 512 {
					b[j] = byte(i + j)
				}
				keep[i%len(keep)] = b
				sum += int(b[len(b)/2])
				if i%1500 == 0 {
					debug.FreeOSMemory()
				}
			}
			mu.Lock()
			total += sum
			mu.Unlock()
		}(g)
	}
	wg.Wait()
	fmt.Fprintln(os.Stderr, "done", total)
}
