package am

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"
)

// TestAbandonFailsBarrierForEveryRank: rank 0 of 3 says it abandons seq 0
// while it and rank 1 wait at the barrier. Rank 1's Begin (and rank 0's
// own, still pending) fail at once with an error naming rank 0, as does
// rank 2 arriving later; then the three meet at seq 1 and are granted.
// Without /v1/abandon rank 1 waited the barrier timeout (here 30 s).
func TestAbandonFailsBarrierForEveryRank(t *testing.T) {
	r := newRig(t, "spine-leaf", Config{BarrierTimeout: 30 * time.Second})
	q := withSessions(reqsFor(9, 0, "allreduce", "h1", "h2", "h3"), 1)
	got0, got1 := r.beginAsync(q[0]), r.beginAsync(q[1])
	waitFor(t, func() bool { return r.waiting(q[0]) == 1 && r.waiting(q[1]) == 1 })
	start := time.Now()
	res, err := r.m.Abandon(AbandonRequest{BeginRequest: q[0], Reason: "context canceled"})
	if err != nil || !res.Abandoned {
		t.Fatalf("abandon: %+v, %v", res, err)
	}
	const want = "job 9 group 1 seq 0: rank 0 (h1) cancelled its call at the barrier (context canceled)"
	check := func(who string, err error) {
		t.Helper()
		var ae *APIError
		if !errors.As(err, &ae) || ae.Code != CodeAbandoned || ae.Message != want || ae.Rank == nil || *ae.Rank != 0 {
			t.Fatalf("%s: %v, want %s: %q naming rank 0", who, err, CodeAbandoned, want)
		}
	}
	for i, ch := range []<-chan result{got0, got1} {
		select {
		case x := <-ch:
			check([]string{"rank 0's pending begin", "rank 1"}[i], x.err)
		case <-time.After(5 * time.Second):
			t.Fatalf("rank %d still waits at the barrier 5 s after rank 0 abandoned it", i)
		}
	}
	if el := time.Since(start); el > 2*time.Second {
		t.Errorf("the barrier failed %v after the abandon, want at once", el)
	}
	_, err = r.m.Begin(context.Background(), q[2])
	check("rank 2 arriving later", err)
	// A repeat is idempotent; nothing else is left waiting.
	if res, err := r.m.Abandon(AbandonRequest{BeginRequest: q[0]}); err != nil || !res.Abandoned {
		t.Fatalf("repeated abandon: %+v, %v", res, err)
	}
	if bs := r.m.Ops().Barriers; len(bs) != 0 {
		t.Errorf("barriers left: %+v", bs)
	}
	// Every rank left seq 0; seq 1 meets.
	r.grantAll(t, withSessions(reqsFor(9, 1, "allreduce", "h1", "h2", "h3"), 1))
}

// TestAbandonBeforeAnyArrival: the abandon of a seq no rank reached yet
// (a persistent collective's setup cancelled before its turn) still fails
// the ranks that come later; a granted invocation is not abandoned.
func TestAbandonBeforeAnyArrival(t *testing.T) {
	r := newRig(t, "single", Config{BarrierTimeout: 30 * time.Second})
	q := withSessions(reqsFor(10, 0, "allreduce", "h1", "h2"), 1)
	if res, err := r.m.Abandon(AbandonRequest{BeginRequest: q[1]}); err != nil || !res.Abandoned {
		t.Fatalf("abandon: %+v, %v", res, err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	_, err := r.m.Begin(ctx, q[0])
	var ae *APIError
	if !errors.As(err, &ae) || ae.Code != CodeAbandoned || !strings.Contains(ae.Message, "rank 1 (h2) cancelled its call at the barrier") {
		t.Fatalf("rank 0: %v, want the abandon naming rank 1", err)
	}
	// A new process of rank 1 (another session) starts the seq afresh.
	q2 := withSessions(reqsFor(10, 0, "allreduce", "h1", "h2"), 11)
	gs := r.grantAll(t, q2)
	if res, err := r.m.Abandon(AbandonRequest{BeginRequest: q2[0]}); err != nil || res.Abandoned {
		t.Fatalf("abandon of a granted invocation: %+v, %v, want nothing changed", res, err)
	}
	r.doneAll(gs)
}

// TestAbandonHTTP: POST /v1/abandon byte for byte as docs/protocol.md 9.8
// shows it, through the Client and raw, and the begin it fails.
func TestAbandonHTTP(t *testing.T) {
	r := newRig(t, "single", Config{BarrierTimeout: 30 * time.Second})
	srv := httptest.NewServer(r.m.Handler())
	defer srv.Close()
	post := func(path, body string) (int, string) {
		t.Helper()
		resp, err := http.Post(srv.URL+path, "application/json", bytes.NewReader([]byte(body)))
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		b, _ := io.ReadAll(resp.Body)
		return resp.StatusCode, string(b)
	}
	code, body := post("/v1/abandon", `{"job":5,"group":0,"seq":0,"rank":0,"size":2,"collective":"allreduce","root_rank":0,"input_format":"fp32","acc_policy":"kulisch","vector_len":100,"node":"h1","session":7,"reason":"context canceled"}`)
	if code != 200 || body != "{\"abandoned\":true}\n" {
		t.Fatalf("abandon: %d %q", code, body)
	}
	code, body = post("/v1/begin", `{"job":5,"group":0,"seq":0,"rank":1,"size":2,"collective":"allreduce","root_rank":0,"input_format":"fp32","acc_policy":"kulisch","vector_len":100,"node":"h2","session":9}`)
	if wantBody := `{"error":{"code":"abandoned","message":"job 5 group 0 seq 0: rank 0 (h1) cancelled its call at the barrier (context canceled)","rank":0}}` + "\n"; code != 409 || body != wantBody {
		t.Fatalf("begin after the abandon: %d %q, want 409 %q", code, body, wantBody)
	}
	if code, body = post("/v1/abandon", `{"job":5,"rank":0}`); code != 400 || !strings.Contains(body, "missing required field") {
		t.Fatalf("abandon without the begin fields: %d %q", code, body)
	}
	cl := NewClient(srv.URL)
	q := withSessions(reqsFor(6, 0, "allreduce", "h1", "h2"), 1)
	if res, err := cl.Abandon(context.Background(), AbandonRequest{BeginRequest: q[0]}); err != nil || !res.Abandoned {
		t.Fatalf("Client.Abandon: %+v, %v", res, err)
	}
}

// TestAbandonPersistentStage: rank 0 of 3 ran seq 0 on its persistent
// operation (stage persistent) while rank 1 waits at seq 0's barrier with
// another length. Rank 1 fails at once with the stage's wording, rank 0's
// reason and how the two calls differ; an unknown stage changes nothing.
func TestAbandonPersistentStage(t *testing.T) {
	r := newRig(t, "spine-leaf", Config{BarrierTimeout: 30 * time.Second})
	q := withSessions(reqsFor(9, 0, "allreduce", "h1", "h2", "h3"), 1)
	q[1].VectorLen = q[0].VectorLen + 1
	got1 := r.beginAsync(q[1])
	waitFor(t, func() bool { return r.waiting(q[1]) == 1 })
	_, err := r.m.Abandon(AbandonRequest{BeginRequest: q[0], Reason: "x", Stage: "later"})
	var ae *APIError
	if !errors.As(err, &ae) || ae.Code != CodeBadRequest || !strings.Contains(ae.Message, `stage "later"`) {
		t.Fatalf("unknown stage: %v, want bad_request naming it", err)
	}
	if r.waiting(q[1]) != 1 {
		t.Fatal("a refused abandon released rank 1")
	}
	res, err := r.m.Abandon(AbandonRequest{BeginRequest: q[0], Reason: "it ran this call as invocation 2", Stage: AbandonPersistent})
	if err != nil || !res.Abandoned {
		t.Fatalf("abandon: %+v, %v", res, err)
	}
	want := fmt.Sprintf("job 9 group 1 seq 0: rank 0 (h1) will not come to the barrier: it ran this call as invocation 2; "+
		"its call differs from rank 1's: vector_len %d vs %d (rank 0's value first)", q[0].VectorLen, q[1].VectorLen)
	select {
	case x := <-got1:
		// The calls differ: reason mismatch (the code stays abandoned).
		if !errors.As(x.err, &ae) || ae.Code != CodeAbandoned || ae.Reason != CodeMismatch || ae.Message != want {
			t.Fatalf("rank 1: %v\nwant %s, reason %s: %q", x.err, CodeAbandoned, CodeMismatch, want)
		}
	case <-time.After(5 * time.Second):
		t.Fatal("rank 1 still waits 5 s after rank 0 abandoned seq 0")
	}
	// Stage refused (a rank whose communicator could not start) reads
	// the same way, for a rank arriving later.
	q2 := withSessions(reqsFor(9, 1, "allreduce", "h1", "h2", "h3"), 1)
	if _, err := r.m.Abandon(AbandonRequest{BeginRequest: q2[2], Reason: "it could not start: no eth9", Stage: AbandonRefused}); err != nil {
		t.Fatal(err)
	}
	_, err = r.m.Begin(context.Background(), q2[0])
	if want := "job 9 group 1 seq 1: rank 2 (h3) will not come to the barrier: it could not start: no eth9"; !errors.As(err, &ae) || ae.Code != CodeAbandoned || ae.Message != want {
		t.Fatalf("rank 0 after a refused abandon: %v, want %q", err, want)
	}
}
