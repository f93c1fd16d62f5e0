// Command pause is the sandbox's first process for the real-node tests: it
// holds the pod's namespaces, reaps orphaned children, and exits on SIGTERM or
// SIGINT. With the argument --ignore-term it ignores both, so that only
// kubelet's SIGKILL at the end of the grace period stops it: a pod whose
// sandbox outlives its Pod object by that period. No registry is reachable,
// so the image is built locally.
package main

import (
	"os"
	"os/signal"
	"syscall"
)

func main() {
	ignoreTerm := len(os.Args) > 1 && os.Args[1] == "--ignore-term"
	ch := make(chan os.Signal, 4)
	if ignoreTerm {
		signal.Ignore(syscall.SIGTERM, syscall.SIGINT)
		signal.Notify(ch, syscall.SIGCHLD)
	} else {
		signal.Notify(ch, syscall.SIGTERM, syscall.SIGINT, syscall.SIGCHLD)
	}
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
