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
