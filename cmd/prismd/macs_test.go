package main

import (
	"encoding/json"
	"net/http/httptest"
	"testing"
	"time"

	"github.com/prismd/prismd/dataplane"
	"github.com/prismd/prismd/dataplane/porttest"
)

// TestMACsHandler: GET /v1/macs lists a station learned through a real RX
// goroutine on its port, and the port MACs as local entries.
func TestMACsHandler(t *testing.T) {
	dp, err := dataplane.New(dataplane.Options{MACAging: 42 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	defer dp.Close()
	p0, p1 := porttest.New("a0", porttest.MAC(1), 1500), porttest.New("a1", porttest.MAC(2), 1500)
	if err := dp.SetPorts([]dataplane.Port{p0, p1}); err != nil {
		t.Fatal(err)
	}
	station := []byte{0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0x0a, 0, 0, 0, 0, 7, 0x08, 0x06}
	p1.Inject(station)
	if _, err := p0.Wait(1, 2*time.Second); err != nil {
		t.Fatal(err)
	}
	d := &daemon{dp: dp}
	rec := httptest.NewRecorder()
	d.macs(rec, httptest.NewRequest("GET", "/v1/macs", nil))
	var got MACsResponse
	if err := json.Unmarshal(rec.Body.Bytes(), &got); err != nil {
		t.Fatalf("%v: %s", err, rec.Body.String())
	}
	want := MACsResponse{AgingSeconds: 42, Learned: 1, Local: 2, Entries: []MACEntryJSON{
		{MAC: "02:00:00:00:00:01", Port: "a0", PortIndex: 0, Local: true},
		{MAC: "02:00:00:00:00:02", Port: "a1", PortIndex: 1, Local: true},
		{MAC: "0a:00:00:00:00:07", Port: "a1", PortIndex: 1},
	}}
	if g, w := jsonOf(t, got), jsonOf(t, want); g != w {
		t.Fatalf("GET /v1/macs:\n got %s\nwant %s", g, w)
	}
	if ct := rec.Header().Get("Content-Type"); ct != "application/json" {
		t.Fatalf("Content-Type %q", ct)
	}
}

func jsonOf(t *testing.T, v any) string {
	b, err := json.Marshal(v)
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}
