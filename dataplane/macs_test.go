package dataplane_test

import (
	"fmt"
	"testing"
	"time"

	"github.com/prismd/prismd/dataplane"
	"github.com/prismd/prismd/dataplane/porttest"
)

// TestMACTableListing drives stations through real RX goroutines and checks
// the listing row by row: learned entries on their ingress port with their
// age, local MACs flagged, sorted by port then MAC, aged entries gone.
func TestMACTableListing(t *testing.T) {
	var clk fakeClock
	clk.add(1000 * time.Second)
	node := [6]byte{0x02, 0xee, 0, 0, 0, 1}
	d, ports := setup(t, 3, dataplane.Options{MACAging: 10 * time.Second, Clock: clk.now, NodeMAC: &node})
	send := func(in int, src [6]byte) { t.Helper(); flood(t, ports, in, src) }
	send(1, hostB)
	send(0, hostC)
	send(0, hostA)
	clk.add(4 * time.Second)
	send(2, hostC) // moves hostC to port 2, age 0

	local := func(i int) dataplane.MACEntry {
		return dataplane.MACEntry{MAC: porttest.MAC(byte(0x10 + i)), Port: i, PortName: fmt.Sprintf("p%d", i), Local: true}
	}
	want := []dataplane.MACEntry{
		local(0),
		{MAC: hostA, Port: 0, PortName: "p0", Age: 4 * time.Second},
		local(1),
		{MAC: hostB, Port: 1, PortName: "p1", Age: 4 * time.Second},
		local(2),
		{MAC: hostC, Port: 2, PortName: "p2"},
		{MAC: node, Port: -1, Local: true},
	}
	check := func(want []dataplane.MACEntry) {
		t.Helper()
		got := d.MACTable()
		if fmt.Sprint(got) != fmt.Sprint(want) {
			t.Fatalf("MACTable:\n got %+v\nwant %+v", got, want)
		}
	}
	check(want)

	// hostA and hostB were last seen 11s ago: older than the 10s aging.
	clk.add(7 * time.Second)
	check([]dataplane.MACEntry{local(0), local(1), local(2), {MAC: hostC, Port: 2, PortName: "p2", Age: 7 * time.Second}, want[6]})
	if n := d.Stats().MACEntries; n != 1 {
		t.Fatalf("Stats().MACEntries = %d, listing has 1 learned entry", n)
	}
}

// TestMACTableKeptAcrossPortRemoval: removing one port used to flush every
// learned station (the table holds port indices), so a reload that dropped
// an unused port flooded all traffic until each station spoke again. The
// stations of the ports that stay keep their port, at its new index, and
// their age; those of the removed port are forgotten.
func TestMACTableKeptAcrossPortRemoval(t *testing.T) {
	var clk fakeClock
	clk.add(1000 * time.Second)
	d, ports := setup(t, 3, dataplane.Options{MACAging: 60 * time.Second, Clock: clk.now})
	send := func(in int, src [6]byte) { t.Helper(); flood(t, ports, in, src) }
	send(0, hostA)
	send(1, hostB)
	send(2, hostC)
	clk.add(3 * time.Second)
	// p1 goes: p2 becomes index 1.
	if err := d.SetPorts([]dataplane.Port{ports[0], ports[2]}); err != nil {
		t.Fatal(err)
	}
	var learned []string
	for _, e := range d.MACTable() {
		if !e.Local {
			learned = append(learned, fmt.Sprintf("%x@%d/%s/%v", e.MAC, e.Port, e.PortName, e.Age))
		}
	}
	want := []string{fmt.Sprintf("%x@0/p0/3s", hostA), fmt.Sprintf("%x@1/p2/3s", hostC)}
	if fmt.Sprint(learned) != fmt.Sprint(want) {
		t.Fatalf("learned after removing p1: %v, want %v (hostB's port is gone)", learned, want)
	}
}

// flood sends a broadcast from src in on port in and waits until every
// other port has sent it out: the dataplane has learned src on in.
func flood(t *testing.T, ports []*porttest.Port, in int, src [6]byte) {
	t.Helper()
	ports[in].Inject(eth(bcast, src, 0x0806))
	for o := range ports {
		if o != in {
			if _, err := ports[o].Wait(1, 2*time.Second); err != nil {
				t.Fatal(err)
			}
		}
	}
}
