// A Go program linked with cgo (dynamically linked, started through __libc_start_main, so the
// recorder's preload enters it): 64 goroutines burn CPU on small goroutine stacks; with an
// argument, runtime/pprof's CPU profile (Go's own SIGPROF handler, from setitimer) runs meanwhile.
// Go requires every signal handler to run on the signal stack (SA_ONSTACK).
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
	f, _ := os.Create(os.DevNull)
	if len(os.Args) > 1 {
		pprof.StartCPUProfile(f)
	}
	var wg sync.WaitGroup
	for g := 0; g < 64; g++ {
		wg.Add(1)
		go func(g int) { defer wg.Done(); fmt.Sprint(work(20000000 + g)) }(g)
	}
	wg.Wait()
	if len(os.Args) > 1 {
		pprof.StopCPUProfile()
	}
	fmt.Println("go ok")
	// The C library's exit, not Go's exit_group: atexit handlers run, the recorder's among them,
	// so the recording is finished with every sample taken (however short the run).
	C.exit(0)
}
