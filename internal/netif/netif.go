package netif

import (
	"errors"
	"fmt"
	"net"
	"strings"
)

// ErrNotFound is wrapped by ByName's error when no interface has the name.
var ErrNotFound = errors.New("no such network interface")

// ByName is net.InterfaceByName whose error, when the name is unknown,
// lists the interfaces this network namespace has.
func ByName(name string) (*net.Interface, error) {
	ifi, err := net.InterfaceByName(name)
	if err == nil {
		return ifi, nil
	}
	all, lerr := net.Interfaces()
	if lerr != nil || name == "" {
		return nil, fmt.Errorf("interface %q: %w", name, err)
	}
	names := make([]string, len(all))
	for i, x := range all {
		names[i] = x.Name
	}
	return nil, fmt.Errorf("interface %q: %w in this network namespace (it has: %s)", name, ErrNotFound, strings.Join(names, ", "))
}

// ErrNotEthernet is wrapped by Ethernet's error for an interface that
// cannot carry PRISM frames to anyone.
var ErrNotEthernet = errors.New("not an Ethernet interface")

// Ethernet is ByName for an interface that raw Ethernet frames are sent on
// and received from: the loopback (whose frames come straight back to the
// sender) and interfaces without a 6-byte MAC (tun, ipip, wireguard) are
// refused with what to name instead. Opening a socket on them worked and
// then every collective or forwarded frame went nowhere.
func Ethernet(name string) (*net.Interface, error) {
	ifi, err := ByName(name)
	if err != nil {
		return nil, err
	}
	switch {
	case ifi.Flags&net.FlagLoopback != 0:
		return nil, fmt.Errorf("interface %q is the loopback: %w (frames sent on it come straight back); "+
			"name a NIC, a veth end or a bond", name, ErrNotEthernet)
	case len(ifi.HardwareAddr) != 6:
		return nil, fmt.Errorf("interface %q has no Ethernet MAC (an IP tunnel?): %w; name a NIC, a veth end or a bond", name, ErrNotEthernet)
	}
	return ifi, nil
}
