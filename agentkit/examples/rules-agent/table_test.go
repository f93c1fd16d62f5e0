package main

import (
	"bufio"
	"encoding/json"
	"os"
	"path/filepath"
	"testing"
	"time"
)

func TestATeardownRemovesOnlyItsOwnRuleUnlessNaive(t *testing.T) {
	dir := t.TempDir()
	tab, err := OpenTable(dir)
	if err != nil {
		t.Fatal(err)
	}
	must := func(ok bool, err error) bool {
		if err != nil {
			t.Fatal(err)
		}
		return ok
	}
	if !must(tab.Install("10.0.0.5", "new", "p.10.0.0.5")) {
		t.Fatal("first install")
	}
	if must(tab.Install("10.0.0.5", "new", "p.10.0.0.5")) {
		t.Fatal("a repeated install changes nothing")
	}
	if must(tab.Remove("10.0.0.5", "old", "p.10.0.0.5", false)) {
		t.Fatal("a late teardown of the old holder removed the successor's rule")
	}
	if !must(tab.Remove("10.0.0.5", "old", "p.10.0.0.5", true)) {
		t.Fatal("the naive teardown removes whatever rule the IP has")
	}
	// The table outlives the process, and the log holds every change in order.
	if !must(tab.Install("10.0.0.6", "u6", "p.10.0.0.6")) {
		t.Fatal("install")
	}
	again, err := OpenTable(dir)
	if err != nil {
		t.Fatal(err)
	}
	if r := again.Rules(); len(r) != 1 || r[0] != (Rule{"10.0.0.6", "u6"}) {
		t.Fatalf("reloaded %v", r)
	}
	f, _ := os.Open(filepath.Join(dir, "events.jsonl"))
	defer f.Close()
	var kinds []string
	var removed string
	for s := bufio.NewScanner(f); s.Scan(); {
		var rec map[string]any
		if err := json.Unmarshal(s.Bytes(), &rec); err != nil {
			t.Fatal(err)
		}
		kinds = append(kinds, rec["kind"].(string))
		if rec["kind"] == "remove" {
			removed = rec["removed_uid"].(string)
		}
	}
	if len(kinds) != 3 || kinds[1] != "remove" || removed != "new" {
		t.Fatalf("log %v, removed_uid %q: the naive remove must name the rule it took out", kinds, removed)
	}
}

func TestTeardownDelays(t *testing.T) {
	if lo, hi, err := parseDelay("100ms..300ms"); err != nil || lo != 100*time.Millisecond || hi != 300*time.Millisecond {
		t.Fatalf("%v %v %v", lo, hi, err)
	}
	for _, bad := range []string{"", "x", "3s..1s", "1s..x"} {
		if _, _, err := parseDelay(bad); err == nil {
			t.Errorf("%q accepted", bad)
		}
	}
}
