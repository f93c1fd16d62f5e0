// Command pause is the sandbox's first process for the real-node tests: it
// holds the pod's namespaces, reaps orphaned children, and exits on SIGTERM or
// SIGINT. No registry is reachable, so the image is built locally.
package main

import (
	"os"
	"os/signal"
	"syscall"
)

func main() {
	ch := make(chan os.Signal, 4)
	signal.Notify(ch, syscall.SIGTERM, syscall.SIGINT, syscall.SIGCHLD)
	for sig := range ch {
		if sig != syscall.SIGCHLD {
			return
		}
		reap()
	}
}

// reap collects every exited child without blocking.
func reap() {
	for {
		var status syscall.WaitStatus
		pid, err := syscall.Wait4(-1, &status, syscall.WNOHANG, nil)
		if pid <= 0 || err != nil {
			return
		}
	}
}
