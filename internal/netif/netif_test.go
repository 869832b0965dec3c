package netif

import (
	"errors"
	"net"
	"strings"
	"testing"
)

func TestByName(t *testing.T) {
	all, err := net.Interfaces()
	if err != nil || len(all) == 0 {
		t.Skip("no interfaces to compare with")
	}
	ifi, err := ByName(all[0].Name)
	if err != nil || ifi.Index != all[0].Index {
		t.Fatalf("ByName(%q) = %v, %v", all[0].Name, ifi, err)
	}
	_, err = ByName("prismd-no-such0")
	if !errors.Is(err, ErrNotFound) || !strings.Contains(err.Error(), `"prismd-no-such0"`) || !strings.Contains(err.Error(), all[0].Name) {
		t.Fatalf("unknown interface: %v, want ErrNotFound listing %s", err, all[0].Name)
	}
}
