// Package metricstest holds test helpers for Prometheus exposition: the
// promtool lint that package metrics' tests run on prismd's /metrics, for
// every other exporter in the tree (the AM's) to run on theirs.
//
// It must not be imported by non-test code.
package metricstest

import (
	"bytes"
	"io"
	"net/http"
	"os"
	"os/exec"
	"strings"
	"testing"
)

// Promtool fails t unless `promtool check metrics` accepts body with no
// complaint at all (lint warnings included). A missing promtool is a
// failure, not a skip: `make deps` installs it.
func Promtool(t testing.TB, body []byte) {
	t.Helper()
	promtool, err := exec.LookPath("promtool")
	if err != nil {
		t.Fatal("promtool not found in PATH: `make deps` installs it (Debian package prometheus)")
	}
	cmd := exec.Command(promtool, "check", "metrics")
	cmd.Stdin = bytes.NewReader(body)
	out, err := cmd.CombinedOutput()
	if err != nil || len(bytes.TrimSpace(out)) != 0 {
		t.Fatalf("promtool check metrics: %v\n%s", err, out)
	}
}

// Scrape GETs url and returns the body, failing t unless the answer is 200.
func Scrape(t testing.TB, url string) []byte {
	t.Helper()
	resp, err := http.Get(url)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatal(err)
	}
	if resp.StatusCode != http.StatusOK {
		t.Fatalf("GET %s: %s\n%s", url, resp.Status, body)
	}
	return body
}

// Documented fails t for every prismd_* family body serves (its # HELP
// line) that the metrics reference at doc does not name in backquotes:
// docs/metrics.md is read by operators, and a family added without it
// was findable only in its help text.
func Documented(t testing.TB, body []byte, doc string) {
	t.Helper()
	ref, err := os.ReadFile(doc)
	if err != nil {
		t.Fatalf("metrics reference: %v", err)
	}
	for _, line := range strings.Split(string(body), "\n") {
		name, ok := strings.CutPrefix(line, "# HELP ")
		if !ok || !strings.HasPrefix(name, "prismd_") {
			continue
		}
		name, _, _ = strings.Cut(name, " ")
		if !strings.Contains(string(ref), "`"+name+"`") {
			t.Errorf("/metrics serves %s, which %s does not list", name, doc)
		}
	}
}
