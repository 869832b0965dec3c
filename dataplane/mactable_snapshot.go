// This file owns the MAC table listing (GET /v1/macs, prismctl show macs):
// a snapshot read with the RX goroutines' own atomic loads, so listing a
// full table never stalls forwarding.

package dataplane

import (
	"slices"
	"time"
)

// MACEntry is one row of Dataplane.MACTable.
type MACEntry struct {
	MAC [6]byte
	// Port is the index of the port the MAC was learned on or, for a local
	// MAC, the port it belongs to; -1 for the node MAC, which belongs to no
	// port.
	Port int
	// PortName is the name of port Port ("" for the node MAC).
	PortName string
	// Age is the time since the MAC was last seen, in whole seconds (the
	// table's resolution); 0 for local MACs.
	Age time.Duration
	// Local marks the switch's own MACs (port MACs and the node MAC): they
	// are never learned and never age; frames to them are not bridged.
	Local bool
}

// MACTable returns the live (not aged out) learned entries and the local
// MACs, sorted by port index (the node MAC last), local entries first
// within a port, then by MAC. It takes no lock the forwarding path takes:
// the learned entries are read slot by slot with atomic loads (see
// macTable.each for what a concurrent learn may or may not show).
func (d *Dataplane) MACTable() []MACEntry {
	s := d.snap.Load()
	tab := d.table.Load()
	now := d.nowSec()
	var out []MACEntry
	for j, k := range s.local {
		if slices.Contains(s.local[:j], k) {
			continue // the node MAC may repeat a port MAC
		}
		e := MACEntry{MAC: macOf(k), Port: -1, Local: true}
		for i, ps := range s.ports {
			if ps.mac == k {
				e.Port, e.PortName = i, ps.port.Name()
				break
			}
		}
		out = append(out, e)
	}
	tab.each(now, s.aging, func(k uint64, port int, seen uint32) {
		// An index from before a port-set change (the table is flushed on
		// one, but an RX goroutine may still finish a batch with the old
		// index) forwards nowhere; do not list it either.
		if port < 0 || port >= len(s.ports) {
			return
		}
		out = append(out, MACEntry{MAC: macOf(k), Port: port, PortName: s.ports[port].port.Name(),
			Age: time.Duration(now-seen) * time.Second})
	})
	slices.SortFunc(out, func(a, b MACEntry) int {
		pa, pb := uint(a.Port), uint(b.Port) // -1 sorts last
		if pa != pb {
			if pa < pb {
				return -1
			}
			return 1
		}
		if a.Local != b.Local {
			if a.Local {
				return -1
			}
			return 1
		}
		return slices.Compare(a.MAC[:], b.MAC[:])
	})
	return out
}

// MACAging returns the aging time in force, rounded up to whole seconds
// (the table's resolution).
func (d *Dataplane) MACAging() time.Duration {
	return time.Duration(d.snap.Load().aging) * time.Second
}
