package host

import (
	"context"
	"errors"
	"net"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"
)

// quietConn sends nothing anywhere and counts what the Comm writes.
type quietConn struct {
	closed chan struct{}
	once   sync.Once
	writes atomic.Int64
}

func (c *quietConn) ReadFrame(b []byte) (int, error) {
	<-c.closed
	return 0, net.ErrClosed
}

func (c *quietConn) WriteFrame(b []byte) error {
	c.writes.Add(1)
	return nil
}

func (c *quietConn) MAC() net.HardwareAddr { return net.HardwareAddr{2, 0, 0, 0, 0, 1} }
func (c *quietConn) Close() error {
	c.once.Do(func() { close(c.closed) })
	return nil
}

// An Options.Timeout the AM cannot take fails the call on the rank, with
// the range to use, before any request reaches the coordinator: unchecked,
// -1s reached the AM as timeout_ms 4294966296, 1000h as 3600000000 (both
// bad_request) and 500us as 0, silently the AM's default.
func TestTimeoutOutOfRange(t *testing.T) {
	var mu sync.Mutex
	var asked []string
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if strings.HasPrefix(r.URL.Path, "/v1/presence") {
			http.NotFound(w, r) // no presence kept: the Comm stops asking
			return
		}
		if r.Method == http.MethodGet && r.URL.Path == "/v1/ops" {
			w.Header().Set("Content-Type", "application/json")
			w.Write([]byte("{}"))
			return
		}
		mu.Lock()
		asked = append(asked, r.Method+" "+r.URL.Path)
		mu.Unlock()
		http.Error(w, "unexpected", http.StatusTeapot)
	}))
	defer srv.Close()
	conn := &quietConn{closed: make(chan struct{})}
	c, err := NewCommConn(context.Background(), Config{Rank: 0, Size: 1, Iface: "null0", Job: 1, Coordinator: srv.URL, Node: "h1"}, conn)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	for d, want := range map[time.Duration]string{
		-time.Second:           "Options.Timeout -1s is negative",
		500 * time.Microsecond: "Options.Timeout 500µs is under a millisecond",
		1000 * time.Hour:       "Options.Timeout 1000h0m0s is above the AM's limit of 10m0s",
		MaxTimeout + 1:         "above the AM's limit",
	} {
		o := &Options{Timeout: d}
		// Twice: a shape's second call would run persistent.
		for i := 0; i < 2; i++ {
			err := c.AllReduce(ctx, []float32{1}, []float32{0}, o)
			if !errors.Is(err, ErrType) || !strings.Contains(err.Error(), want) || !strings.Contains(err.Error(), "use 1ms..10m (0 = the AM's default") {
				t.Errorf("Timeout %v: %v, want ErrType saying %q and the range", d, err, want)
			}
		}
		if _, err := c.AllReduceInit([]float32{1}, []float32{0}, o); err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("AllReduceInit with Timeout %v: %v, want %q", d, err, want)
		}
		if err := c.Reduce(ctx, []float32{1}, []float32{0}, 0, o); err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("Reduce with Timeout %v: %v, want %q", d, err, want)
		}
	}
	mu.Lock()
	defer mu.Unlock()
	if len(asked) > 0 {
		t.Errorf("the coordinator was asked %v", asked)
	}
	if n := conn.writes.Load(); n > 0 {
		t.Errorf("%d frames sent", n)
	}
	// The bounds themselves pass the check.
	for _, d := range []time.Duration{0, MinTimeout, MaxTimeout, 1500 * time.Microsecond} {
		if err := CheckTimeout("Options.Timeout", d); err != nil {
			t.Errorf("Timeout %v: %v", d, err)
		}
	}
}
