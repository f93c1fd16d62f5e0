// Command rules-agent is the example agent of the Go kit: it keeps one rule
// per leased IP of its node, holds one finalizer, and acknowledges each
// release through package ack once the rule is gone. Its flags default to
// the environment of the agent conformance contract
// (watcher-example/README.md, "Conformance").
package main

import (
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"log/slog"
	"net/http"
	"os"
	"os/signal"
	"strings"
	"syscall"
	"time"

	"k8s.io/client-go/tools/clientcmd"

	"netendpoint.dev/agentkit/client"
)

func main() {
	if err := run(); err != nil {
		slog.Error("rules-agent", "err", err)
		os.Exit(1)
	}
}

func run() error {
	node := flag.String("node", os.Getenv("NETENDPOINT_NODE"), "node served (NETENDPOINT_NODE)")
	finalizer := flag.String("finalizer", os.Getenv("NETENDPOINT_FINALIZER"), "finalizer held; empty holds none (NETENDPOINT_FINALIZER)")
	kubeconfig := flag.String("kubeconfig", os.Getenv("KUBECONFIG"), "kubeconfig; empty for in-cluster (KUBECONFIG)")
	addr := flag.String("addr", envOr("NETENDPOINT_AGENT_ADDR", "127.0.0.1:9465"), "serves /readyz and /rules (NETENDPOINT_AGENT_ADDR)")
	dir := flag.String("dir", os.Getenv("NETENDPOINT_AGENT_DIR"), "state and event log directory (NETENDPOINT_AGENT_DIR)")
	delay := flag.String("teardown-delay", envOr("NETENDPOINT_AGENT_TEARDOWN_DELAY", "0s"), "teardown delay, D or A..B (NETENDPOINT_AGENT_TEARDOWN_DELAY)")
	naive := flag.Bool("naive-ip-keyed", false, "tear down by IP alone (a broken agent)")
	flag.Parse()
	if *node == "" || *dir == "" {
		return errors.New("--node (NETENDPOINT_NODE) and --dir (NETENDPOINT_AGENT_DIR) are required")
	}
	lo, hi, err := parseDelay(*delay)
	if err != nil {
		return err
	}
	cfg, err := clientcmd.BuildConfigFromFlags("", *kubeconfig)
	if err != nil {
		return fmt.Errorf("kubeconfig: %w", err)
	}
	c, err := client.New(cfg)
	if err != nil {
		return err
	}
	table, err := OpenTable(*dir)
	if err != nil {
		return err
	}
	agent := &Agent{Client: c, Table: table, Finalizer: *finalizer, Naive: *naive, DelayMin: lo, DelayMax: hi}

	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGINT, syscall.SIGTERM)
	defer stop()
	ready := make(chan struct{})
	mux := http.NewServeMux()
	mux.HandleFunc("GET /readyz", func(w http.ResponseWriter, _ *http.Request) {
		select {
		case <-ready:
			fmt.Fprintln(w, "ok")
		default:
			http.Error(w, "not synced", http.StatusServiceUnavailable)
		}
	})
	mux.HandleFunc("GET /rules", func(w http.ResponseWriter, _ *http.Request) {
		_ = json.NewEncoder(w).Encode(table.Rules())
	})
	srv := &http.Server{Addr: *addr, Handler: mux, ReadHeaderTimeout: 5 * time.Second}
	go func() {
		if err := srv.ListenAndServe(); !errors.Is(err, http.ErrServerClosed) {
			slog.Error("http", "err", err)
			stop()
		}
	}()
	defer srv.Close()
	slog.Info("watching", "node", *node, "finalizer", *finalizer)
	return agent.Run(ctx, *node, ready)
}

func envOr(key, fallback string) string {
	if v := os.Getenv(key); v != "" {
		return v
	}
	return fallback
}

// parseDelay reads "D" or "A..B" (Go durations).
func parseDelay(s string) (time.Duration, time.Duration, error) {
	a, b, isRange := strings.Cut(s, "..")
	lo, err := time.ParseDuration(a)
	if err != nil {
		return 0, 0, fmt.Errorf("teardown delay %q: %w", s, err)
	}
	hi := lo
	if isRange {
		if hi, err = time.ParseDuration(b); err != nil || hi < lo {
			return 0, 0, fmt.Errorf("teardown delay %q: want A..B with A <= B", s)
		}
	}
	return lo, hi, nil
}
