package e2e

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/vishvananda/netlink"

	"github.com/prismd/prismd/control/am"
	"github.com/prismd/prismd/host"
)

// setLink takes node's eth0 down or up, inside its namespace.
func (e *env) setLink(node string, up bool) {
	e.t.Helper()
	e.setIface(node, "eth0", up)
}

// setIface takes node's interface iface down or up, inside its namespace.
func (e *env) setIface(node, iface string, up bool) {
	e.t.Helper()
	if err := e.lab.Do(node, func() error {
		l, err := netlink.LinkByName(iface)
		if err != nil {
			return err
		}
		if up {
			return netlink.LinkSetUp(l)
		}
		return netlink.LinkSetDown(l)
	}); err != nil {
		e.t.Fatalf("%s %s up=%v: %v", node, iface, up, err)
	}
}

// afterGrant runs f once the AM granted job's operation, plus settle (so
// that every rank holds its grant).
func (e *env) afterGrant(job uint64, settle time.Duration, f func()) {
	e.t.Helper()
	for deadline := time.Now().Add(30 * time.Second); time.Now().Before(deadline); time.Sleep(time.Millisecond) {
		for _, op := range e.m.Ops().Ops {
			if op.Op.Job == job && op.State != "setup" {
				time.Sleep(settle)
				f()
				return
			}
		}
	}
	e.t.Fatalf("job %d was never granted", job)
}

// TestLinkFlap: a rank's link goes down during a collective. Down for less
// than the operation's timeout, the collective rides it out (the rank's
// socket reports ENETDOWN once; lost frames are retransmitted) and is
// exact. Down for good, every rank fails within the timeout: the rank on
// the dead link says its interface went down, the others name it. The
// same when it is the switch's end that goes down: the rank's interface
// stays up without carrier, its frames vanish without an error, and the
// rank's timeout says the interface has no carrier. In both cases the
// leaf's port has no carrier, so the other ranks' errors name the lost
// link (Failure Cause LINK_DOWN), not a rank. A leaf's uplink cut leaves
// its ranks without the AM: they name the cause from the leaf's PROGRESS
// FAILED.
func TestLinkFlap(t *testing.T) {
	const (
		lost23 = "node l2 lost its link to rank 2 (h3)"
		lostL2 = "failed: node s1 lost its link to subtree l2; node s1 is FAILED"
		cutL2  = "leaf l2 reports the operation FAILED; it began at l2: a switch's port toward a peer went down (LINK_DOWN)"
	)
	e := up(t, "spine-leaf", "h1", am.Config{})
	hosts := []string{"h1", "h2", "h3", "h4"}
	const timeout = 4 * time.Second
	vec := n(2_000_000, 8_000_000)

	cs := e.comms(31, hosts...)
	done := make(chan *result)
	go func() { done <- collective(cs, "allreduce", 0, vec, 31, &host.Options{Timeout: timeout}) }()
	e.afterGrant(31, 50*time.Millisecond, func() {
		e.setLink("h3", false)
		time.Sleep(600 * time.Millisecond)
		e.setLink("h3", true)
	})
	r := <-done
	r.check(t, "allreduce", 0)
	t.Logf("flap of 600 ms ridden out: collective took %v, rank 2 retransmitted %d DATA frames",
		r.took.Round(time.Millisecond), r.stats[2].Retransmits)

	// Down for good: h3's own interface, then the leaf's port to h3 (l2:p2),
	// which leaves h3's eth0 up without carrier.
	for _, c := range []struct {
		job         uint64
		what        string
		node, iface string
		wants       [4]string     // in each rank's error
		slack       time.Duration // past the timeout
	}{
		// Either way l2's port to h3 has no carrier (a veth whose peer
		// is down has none): l2 fails LINK_DOWN and the AM names the
		// link, not a rank that stopped.
		{32, "h3's eth0 down", "h3", "eth0", [4]string{lost23, lost23, "interface eth0 went down", lost23}, killSlack},
		{33, "the switch's end (l2:p2) down", "l2", "p2", [4]string{lost23, lost23, "interface eth0 has no carrier", lost23}, killSlack},
		// A leaf's uplink: s1 and l2 both fail LINK_DOWN at the timeout
		// (s1's longer bound for a switch peer does not apply behind a
		// dead port). The AM reaches l2 only over that link, so it says
		// l2 is cut off once one CONTROL timeout (2 s) passed without
		// its answer (its ABORT then gets 300 ms); h3 and h4 cannot
		// reach the AM at all, and end after the library's 3 s wait for
		// it. Before, s1 failed a quarter timeout later, the AM waited
		// a second CONTROL timeout for l2's ABORT, and the slack here
		// was 8 s more.
		// h3 and h4 learn why from l2's PROGRESS FAILED alone (its
		// Failure Cause and Hops): l2's own port went down.
		{34, "the leaf's uplink (l2:p1) down", "l2", "p1", [4]string{lostL2, lostL2, cutL2, cutL2}, killSlack + 3*time.Second},
	} {
		cs = e.comms(c.job, hosts...)
		go func() { done <- collective(cs, "allreduce", 0, vec, c.job, &host.Options{Timeout: timeout}) }()
		var downAt time.Time
		var whileDown string // l2's /metrics 300 ms after its own port went down
		var scrapeErr error
		e.afterGrant(c.job, 50*time.Millisecond, func() {
			e.setIface(c.node, c.iface, false)
			downAt = time.Now()
			if c.node == "l2" {
				// The switch's own port: prismd_port_up says it is down
				// (its link watcher hears netlink within milliseconds).
				time.Sleep(300 * time.Millisecond)
				ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
				whileDown, scrapeErr = e.lab.Metrics(ctx, "l2")
				cancel()
			}
		})
		r = <-done
		took := time.Since(downAt)
		e.setIface(c.node, c.iface, true)
		if c.node == "l2" {
			if scrapeErr != nil {
				t.Errorf("%s: l2 /metrics while down: %v", c.what, scrapeErr)
			} else if up := sumSeries(t, whileDown, "prismd_port_up", `port="`+c.iface+`"`); up != 0 {
				t.Errorf("%s: l2's prismd_port_up{port=%q} was %v while the port was down, want 0", c.what, c.iface, up)
			}
		}
		for i, err := range r.errs {
			var oe *host.OpError
			want := c.wants[i]
			if err == nil || !errors.As(err, &oe) || !strings.Contains(err.Error(), want) || strings.Contains(err.Error(), "stopped contributing") {
				t.Errorf("%s: rank %d: %v, want an error with %q", c.what, i, err, want)
				continue
			}
			t.Logf("%s: rank %d: %v", c.what, i, err)
		}
		if took > timeout+c.slack {
			t.Errorf("%s: ranks failed %v after it; the bound is the timeout (%v) plus %v", c.what, took, timeout, c.slack)
		}
	}
	// Every port is back up, and each one this test took down (or whose
	// peer it took down) counted at least a change down and one up:
	// l2:p2 went without carrier three times (h3's flap, h3's eth0, its
	// own set down), l2:p1 was set down once.
	time.Sleep(300 * time.Millisecond)
	m := scrape(t, e.lab, "l2")
	for port, least := range map[string]float64{"p1": 2, "p2": 6} {
		if up := sumSeries(t, m, "prismd_port_up", `port="`+port+`"`); up != 1 {
			t.Errorf("l2's prismd_port_up{port=%q} is %v after the link came back, want 1", port, up)
		}
		if n := sumSeries(t, m, "prismd_port_link_changes_total", `port="`+port+`"`); n < least {
			t.Errorf("l2's prismd_port_link_changes_total{port=%q} is %v, want at least %v", port, n, least)
		}
	}
}
