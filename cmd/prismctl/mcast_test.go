package main

import (
	"strings"
	"testing"

	"github.com/prismd/prismd/deploy"
)

// --receivers: hosts in order with their endpoint IDs (their position among
// the topology's hosts), spaces ignored, an unknown host named with the
// valid ones.
func TestReceiverEndpoints(t *testing.T) {
	topo, err := deploy.Load("spine-leaf")
	if err != nil {
		t.Fatal(err)
	}
	eps, err := receiverEndpoints(topo, "h2, h4")
	if err != nil || len(eps) != 2 || eps[0].Host != "h2" || eps[0].ID != 1 || eps[1].Host != "h4" || eps[1].ID != 3 {
		t.Fatalf("h2, h4: %+v %v", eps, err)
	}
	if _, err := receiverEndpoints(topo, "h2,h9"); err == nil || !strings.Contains(err.Error(), `"h9" is not a host`) ||
		!strings.Contains(err.Error(), "h1, h2, h3, h4") {
		t.Fatalf("h9: %v", err)
	}
}
