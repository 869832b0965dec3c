package conformance

import (
	"bufio"
	"fmt"
	"sort"
	"strconv"
	"strings"
	"testing"
)

// Findings this package reported when it was first written: (i) the spec
// was unclear or contradicted itself, (ii) prismd differed from it. Each was
// settled (the spec or prismd changed) and its check is now an assertion
// of the settled rule; the numbers stay as the subtests' labels.
const (
	fExampleFields = 1  // (i) 12: examples' prose omits field values the hex encodes
	fStage64       = 2  // (i) 4: "1 114 bytes" for a 64-binding STAGE; the tables give 1 098
	fDropLabels    = 3  // (i)/(ii) 10: drop metric not named; prismd's labels differ from the spec's reasons
	fMaxMTU        = 4  // (ii) 5.3: Max MTU 9000 on ports of MTU 1500
	fAMEndpoints   = 5  // (i) 5 vs 9.5: the AM's CONTROL endpoints 0xFFFE or 0
	fCredits       = 6  // (i) 7: what Byte Credits count, and credits before the first PROGRESS
	fAfterRelease  = 7  // (i) 5: COMPLETE of a released identity: BAD_STATE/NONE or OK/RELEASED
	fBindingDetail = 8  // (i) 5.1 vs 5.2: INVALID_BINDING Detail = the binding's offset or the failing field's
	fOverlapFails  = 9  // (i) 7: does a PROGRESS INVALID (overlap) fail the receiver's context
	fStagedMissing = 10 // (i) 5.2: Missing Stream / From of a STAGED context
	fCapsPastEnd   = 11 // (ii) 5.3: CAPS_QUERY past the last page is not ACK INVALID
	fReleaseStaged = 12 // (ii) 5: RELEASE of a STAGED context is accepted
	fTimerProgress = 13 // (ii) 7: no timer-driven PROGRESS to an incomplete, silent stream
	fMissingStream = 15 // (ii) 5.2: Missing Stream is the stream missing the lowest element, not the lowest-numbered stream
	fStaleData     = 14 // (i) 3 vs 7: DATA of a lower generation: silent stale_generation drop or UNKNOWN_OPERATION
)

// finding runs a named subtest that fails when !ok: each was first written
// as a finding (the spec unclear, or prismd differing from it) and is now
// an assertion of what docs/protocol.md says after the finding was settled.
func finding(t *testing.T, name string, n int, ok bool, format string, a ...any) {
	t.Helper()
	t.Run(name, func(t *testing.T) {
		if !ok {
			t.Errorf("(finding %d) %s", n, fmt.Sprintf(format, a...))
		}
	})
}

// specDrops is the count of drop reason r as section 10's table says
// prismd counts it: bad_endpoint under the binding check that failed,
// duplicate in the duplicates counter, everything else under its own
// reason label.
func specDrops(text, r string) float64 {
	switch r {
	case "bad_endpoint":
		n := drops(text, r)
		for _, sub := range []string{"unknown_stream", "wrong_port", "wrong_mac", "wrong_endpoint"} {
			n += series(text, `prismd_engine_drops_total{reason="`+sub+`"}`)
		}
		return n
	case "duplicate":
		return series(text, "prismd_engine_duplicates_total") + series(text, `prismd_bitmap_events_total{event="duplicate"}`)
	}
	return drops(text, r)
}

// series is the value of one series (name and labels exactly as exposed).
func series(text, name string) float64 {
	for _, l := range strings.Split(text, "\n") {
		if strings.HasPrefix(l, name+" ") {
			v, err := strconv.ParseFloat(strings.TrimSpace(l[len(name):]), 64)
			if err == nil {
				return v
			}
		}
	}
	return 0
}

// dropSeries returns every sample of a metric family whose name contains
// "drop", keyed by the whole series (name and labels).
func dropSeries(text string) map[string]float64 {
	m := map[string]float64{}
	sc := bufio.NewScanner(strings.NewReader(text))
	sc.Buffer(make([]byte, 1<<20), 1<<20)
	for sc.Scan() {
		l := sc.Text()
		if strings.HasPrefix(l, "#") || !strings.Contains(l, "drop") && !strings.Contains(l, "reason=") && !strings.Contains(l, "duplicate") {
			continue
		}
		i := strings.LastIndexByte(l, ' ')
		if i < 0 {
			continue
		}
		v, err := strconv.ParseFloat(l[i+1:], 64)
		if err != nil {
			continue
		}
		m[l[:i]] = v
	}
	return m
}

// dropDiff lists the drop series that changed between two scrapes.
func dropDiff(before, after string) string {
	b, a := dropSeries(before), dropSeries(after)
	var r []string
	for k, v := range a {
		if d := v - b[k]; d != 0 {
			r = append(r, fmt.Sprintf("%s +%g", k, d))
		}
	}
	sort.Strings(r)
	if len(r) == 0 {
		return "(no drop counter changed)"
	}
	return strings.Join(r, ", ")
}
