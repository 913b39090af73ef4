// A Go program linked with cgo (so it is dynamically linked, starts through __libc_start_main
// and can be preloaded into): goroutines burn CPU on small stacks; with an argument,
// runtime/pprof's CPU profile (its own SIGPROF) runs meanwhile. The Go runtime requires every
// signal handler to run on the signal stack (SA_ONSTACK).
package main

// #include <stdlib.h>
import "C"

import (
	"fmt"
	"os"
	"runtime/pprof"
	"sync"
)

//go:noinline
func work(n int) int {
	s := 0
	for i := 0; i < n; i++ {
		s += i ^ (s >> 3)
	}
	return s
}

func main() {
	C.free(C.malloc(16))
	profile := len(os.Args) > 1
	if profile {
		f, err := os.Create(os.DevNull)
		if err != nil {
			panic(err)
		}
		if err := pprof.StartCPUProfile(f); err != nil {
			panic(err)
		}
	}
	results := make([]int, 64)
	var wg sync.WaitGroup
	for g := 0; g < 64; g++ {
		wg.Add(1)
		go func(g int) {
			defer wg.Done()
			results[g] = work(3000000 + g)
		}(g)
	}
	wg.Wait()
	if profile {
		pprof.StopCPUProfile()
	}
	sum := 0
	for _, r := range results {
		sum ^= r
	}
	fmt.Printf("go ok %d\n", sum)
}
