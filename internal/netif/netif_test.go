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

// The loopback exists in every network namespace and can never be a switch
// port or a rank's interface.
func TestEthernetRefusesLoopback(t *testing.T) {
	lo, err := net.InterfaceByName("lo")
	if err != nil {
		t.Skip("no lo here")
	}
	_, err = Ethernet(lo.Name)
	if !errors.Is(err, ErrNotEthernet) || !strings.Contains(err.Error(), "loopback") {
		t.Fatalf("Ethernet(lo) = %v, want ErrNotEthernet naming the loopback", err)
	}
	if _, err := Ethernet("prismd-no-such0"); !errors.Is(err, ErrNotFound) {
		t.Fatalf("unknown interface: %v, want ErrNotFound", err)
	}
	all, _ := net.Interfaces()
	for _, ifi := range all {
		if ifi.Flags&net.FlagLoopback == 0 && len(ifi.HardwareAddr) == 6 {
			if got, err := Ethernet(ifi.Name); err != nil || got.Index != ifi.Index {
				t.Fatalf("Ethernet(%q) = %v, %v", ifi.Name, got, err)
			}
			return
		}
	}
}
