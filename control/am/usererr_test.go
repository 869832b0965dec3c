package am

import (
	"context"
	"errors"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/prismd/prismd/internal/netif"
)

// A --coordinator that answers but is not an AM (a prismd's metrics port)
// got a bare "HTTP 404: 404 page not found".
func TestClientNotAnAM(t *testing.T) {
	srv := httptest.NewServer(http.NotFoundHandler())
	defer srv.Close()
	_, err := NewClient(srv.URL).Ops(context.Background())
	if err == nil || !strings.Contains(err.Error(), "HTTP 404") || !strings.Contains(err.Error(), "is --coordinator the AM's --listen address") || !strings.Contains(err.Error(), "run it in a host's namespace") {
		t.Fatalf("err %v, want the status and the hint", err)
	}
}

// prismctl am --iface eth7 said "route ip+net: no such network interface";
// a rank's flag says which interfaces there are, and the AM's now does too.
func TestOpenConnUnknownInterface(t *testing.T) {
	_, err := OpenConn("prismd-no-such0")
	if !errors.Is(err, netif.ErrNotFound) || !strings.Contains(err.Error(), "(it has: lo") {
		t.Fatalf("err %v, want netif.ErrNotFound listing the interfaces", err)
	}
	if _, err := OpenConn("lo"); !errors.Is(err, netif.ErrNotEthernet) {
		t.Fatalf("loopback: err %v, want netif.ErrNotEthernet", err)
	}
}
