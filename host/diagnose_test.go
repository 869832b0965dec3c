package host

import (
	"context"
	"errors"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/prismd/prismd/control/am"
	"github.com/prismd/prismd/internal/testlog"
)

// A rank whose collective failed asks the AM for its diagnosis. When the AM
// cannot be reached from the rank (its runtime channel crosses the switch
// that died), the rank says so within diagnoseReach, instead of waiting the
// whole diagnosis bound (timeout + 15 s) in silence.
func TestDiagnosisUnreachableAMIsQuick(t *testing.T) { diagnoseUnreachable(t, false) }

// TestDiagnosisUnreachableAMIsQuickPersistent: the same for a call run on
// a persistent collective (the library's automatic persistence, from the
// shape's second call). Its failure path also stops the keepalive and
// tells the AM the rank will not come to the call's barrier; done one
// after the other, each waiting for the unreachable AM, they took the
// keepalive's request, the diagnosis's 3 s and the abandonment's 2 s: a
// rank cut off by a link that went down (behind its leaf's uplink) heard
// of the failure up to 12 s after its 5 s timeout.
func TestDiagnosisUnreachableAMIsQuickPersistent(t *testing.T) { diagnoseUnreachable(t, true) }

func diagnoseUnreachable(t *testing.T, persistent bool) {
	f := newMemFabric(t, "single")
	m, err := am.New(am.Config{Topology: f.topo, Conn: f.attach("h1"), RTO: 10 * time.Millisecond,
		CtlTimeout: 3 * time.Second, Logf: testlog.Until(t), DefaultTimeoutMS: 15000})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { m.Close() })
	var cut atomic.Bool
	h := m.Handler()
	stop := make(chan struct{})
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if cut.Load() {
			select { // a path that swallows the request
			case <-r.Context().Done():
			case <-stop:
			}
			return
		}
		h.ServeHTTP(w, r)
	}))
	t.Cleanup(srv.Close)
	t.Cleanup(func() { close(stop) }) // before srv.Close, which waits for handlers

	const n = 200_000
	const timeout = 500 * time.Millisecond
	rs := openRanks(t, f, srv.URL, 50, n, []string{"h1", "h2"})
	var wg sync.WaitGroup
	var calls atomic.Int64
	for _, rr := range rs {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for {
				rr.err = rr.comm.AllReduce(context.Background(), rr.send, rr.recv, &Options{Timeout: timeout})
				rr.ended = time.Now()
				if rr.err != nil || !persistent {
					return
				}
				calls.Add(1)
			}
		}()
	}
	// Once granted (persistent: once each rank has run a few calls on
	// the shape's persistent collective), the fabric loses every frame and
	// the AM stops answering.
	for deadline := time.Now().Add(20 * time.Second); ; time.Sleep(time.Millisecond) {
		if ops := m.Ops().Ops; len(ops) > 0 && ops[len(ops)-1].State == "active" && (!persistent || calls.Load() >= 8) {
			break
		}
		if time.Now().After(deadline) {
			t.Fatal("never granted")
		}
	}
	f.mu.Lock()
	f.loss, f.ctlLoss = 1, 1
	f.mu.Unlock()
	cut.Store(true)
	cutAt := time.Now()
	wg.Wait()
	for r, rr := range rs {
		var oe *OpError
		if !errors.As(rr.err, &oe) || !errors.Is(rr.err, ErrTimeout) ||
			!strings.Contains(oe.Diagnosis, "the AM did not answer within 3s") {
			t.Errorf("rank %d: %v, want a timeout whose diagnosis says the AM did not answer", r, rr.err)
		}
		t.Logf("rank %d failed %v after the cut", r, rr.ended.Sub(cutAt))
		// timeout, then up to 3 s for the AM; 1.5 s for a loaded host.
		if took := rr.ended.Sub(cutAt); took > timeout+diagnoseReach+1500*time.Millisecond {
			t.Errorf("rank %d failed %v after the cut", r, took)
		}
	}
}
