package main

import (
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"sync"
	"time"
)

// Rule is one entry of the dataplane table: the address and the UID of the
// lease it was installed for. Keying by UID as well as IP is what lets a
// teardown tell its own rule from a successor's.
type Rule struct {
	IP  string `json:"ip"`
	UID string `json:"uid"`
}

// Table is an in-memory rule table, persisted in dir so that it outlives
// the process as a kernel table would, with an event log of every change.
type Table struct {
	mu    sync.Mutex
	rules map[string]string // ip -> uid
	dir   string
	seq   uint64
	log   *os.File
}

// OpenTable loads the table kept in dir (if any) and opens its event log.
func OpenTable(dir string) (*Table, error) {
	t := &Table{rules: map[string]string{}, dir: dir}
	if raw, err := os.ReadFile(filepath.Join(dir, "state.json")); err == nil {
		var rules []Rule
		if err := json.Unmarshal(raw, &rules); err != nil {
			return nil, fmt.Errorf("state.json: %w", err)
		}
		for _, r := range rules {
			t.rules[r.IP] = r.UID
		}
	} else if !os.IsNotExist(err) {
		return nil, err
	}
	t.seq = uint64(time.Now().UnixNano()) // increasing across restarts
	f, err := os.OpenFile(filepath.Join(dir, "events.jsonl"), os.O_CREATE|os.O_APPEND|os.O_WRONLY, 0o644)
	if err != nil {
		return nil, err
	}
	t.log = f
	return t, nil
}

// Install sets the rule of ip to uid. It reports false when it was there.
func (t *Table) Install(ip, uid, name string) (bool, error) {
	t.mu.Lock()
	defer t.mu.Unlock()
	prev, had := t.rules[ip]
	if had && prev == uid {
		return false, nil
	}
	t.rules[ip] = uid
	rec := map[string]any{"kind": "add", "ip": ip, "uid": uid, "name": name}
	if had {
		rec["replaced_uid"] = prev
	}
	return true, t.commit(rec)
}

// Remove takes out the rule of ip when it belongs to uid, or whatever rule
// ip has when naive (the bug the conformance suite must catch).
func (t *Table) Remove(ip, uid, name string, naive bool) (bool, error) {
	t.mu.Lock()
	defer t.mu.Unlock()
	cur, had := t.rules[ip]
	if !had || (!naive && cur != uid) {
		return false, nil
	}
	delete(t.rules, ip)
	return true, t.commit(map[string]any{"kind": "remove", "ip": ip, "uid": uid, "name": name, "removed_uid": cur})
}

// Rules is a copy of the table.
func (t *Table) Rules() []Rule {
	t.mu.Lock()
	defer t.mu.Unlock()
	out := make([]Rule, 0, len(t.rules))
	for ip, uid := range t.rules {
		out = append(out, Rule{ip, uid})
	}
	return out
}

// commit persists the table, then logs the change (called with mu held).
func (t *Table) commit(rec map[string]any) error {
	rules := make([]Rule, 0, len(t.rules))
	for ip, uid := range t.rules {
		rules = append(rules, Rule{ip, uid})
	}
	raw, _ := json.Marshal(rules)
	tmp := filepath.Join(t.dir, "state.json.tmp")
	if err := os.WriteFile(tmp, raw, 0o644); err != nil {
		return err
	}
	if err := os.Rename(tmp, filepath.Join(t.dir, "state.json")); err != nil {
		return err
	}
	t.seq++
	rec["seq"], rec["ts"] = t.seq, time.Now().UTC().Format(time.RFC3339Nano)
	line, _ := json.Marshal(rec)
	_, err := t.log.Write(append(line, '\n'))
	return err
}
