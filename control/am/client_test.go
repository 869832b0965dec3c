package am

import (
	"context"
	"errors"
	"net"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync/atomic"
	"testing"
	"time"
)

// TestClientBoundedByRetryFor: a coordinator whose socket takes the
// connection and never answers (a stopped AM) fails a request that is not
// a begin within RetryFor (plus an attempt's least time), and does not
// retry it for ever; before, it waited for as long as the caller's
// context, with context.Background() for good.
func TestClientBoundedByRetryFor(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	go func() {
		var held []net.Conn // read nothing, answer nothing
		for {
			c, err := ln.Accept()
			if err != nil {
				for _, h := range held {
					h.Close()
				}
				return
			}
			held = append(held, c)
		}
	}()
	c := NewClient(ln.Addr().String())
	c.RetryFor = 500 * time.Millisecond
	start := time.Now()
	_, err = c.Ops(context.Background())
	el := time.Since(start)
	if !errors.Is(err, ErrUnreachable) || !strings.Contains(err.Error(), "no answer to GET /v1/ops") {
		t.Fatalf("Ops: %v, want ErrUnreachable saying nothing answered", err)
	}
	if el > 3*time.Second {
		t.Errorf("Ops gave up after %v, want about RetryFor (500ms) or the least attempt (1s)", el)
	}
}

// TestClientPermanentErrors: errors no retry mends fail at once with the
// fix: an https:// coordinator that speaks plain HTTP (the AM does), and a
// URL with another scheme.
func TestClientPermanentErrors(t *testing.T) {
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Write([]byte(`{"ops":[]}`))
	}))
	defer srv.Close()
	for _, tc := range []struct{ url, want string }{
		{strings.Replace(srv.URL, "http://", "https://", 1), "write the coordinator as http://"},
		{strings.Replace(srv.URL, "http://", "ftp://", 1), "write the coordinator as http://HOST:PORT"},
	} {
		c := NewClient(tc.url)
		start := time.Now()
		_, err := c.Ops(context.Background())
		if !errors.Is(err, ErrUnreachable) || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%s: %v, want ErrUnreachable with %q", tc.url, err, tc.want)
		}
		if el := time.Since(start); el > time.Second {
			t.Errorf("%s: failed after %v, want at once (no retry)", tc.url, el)
		}
	}
	if _, err := NewClient(srv.URL).Ops(context.Background()); err != nil {
		t.Errorf("plain http: %v", err)
	}
}

// TestClientSaysRefused: a coordinator address where nothing listens is
// reported as that, after the retry period, not as "no answer".
func TestClientSaysRefused(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := ln.Addr().String()
	ln.Close() // nothing listens there now
	c := NewClient("http://" + addr)
	c.RetryFor = 300 * time.Millisecond
	_, err = c.Ops(context.Background())
	if !errors.Is(err, ErrUnreachable) || !strings.Contains(err.Error(), "connection refused") || !strings.Contains(err.Error(), "nothing listens there") {
		t.Fatalf("Ops: %v, want ErrUnreachable saying the connection was refused", err)
	}
}

// TestBeginRetriedAfterHeldConnectionBreaks: a begin the AM held at its
// barrier for longer than RetryFor, whose connection then broke (a lossy
// network, a proxy), is sent again rather than given up: the AM was there.
func TestBeginRetriedAfterHeldConnectionBreaks(t *testing.T) {
	var calls atomic.Int32
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if calls.Add(1) == 1 {
			time.Sleep(400 * time.Millisecond) // held at the barrier
			hj, _ := w.(http.Hijacker)
			conn, _, err := hj.Hijack()
			if err == nil {
				conn.Close() // the connection breaks: the client reads EOF
			}
			return
		}
		w.Write([]byte(`{"id":"1-0-1-0-1"}`))
	}))
	defer srv.Close()
	c := NewClient(srv.URL)
	c.RetryFor = 300 * time.Millisecond
	g, err := c.Begin(context.Background(), BeginRequest{Job: 1, Size: 1, Collective: "allreduce", InputFormat: "fp32", VectorLen: 1, Node: "h1"})
	if err != nil || g.ID != "1-0-1-0-1" || calls.Load() != 2 {
		t.Fatalf("begin: %+v %v after %d requests, want the grant of the second", g, err, calls.Load())
	}
}
