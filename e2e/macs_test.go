package e2e

import (
	"net"
	"testing"

	"github.com/vishvananda/netlink"

	"github.com/prismd/prismd/control/am"
	"github.com/prismd/prismd/deploy"
)

// givenMACs is spine-leaf with MACs of the operator's own on every switch
// and switch port and on one host, as a lab of real NICs would have: the
// AM addressed nodes and ports by the MACs it derived from names alone, so
// such a network could not be driven (CAPS_QUERY to a MAC no switch had,
// then DATA to a port MAC nobody answered, flooded as transit).
const givenMACs = `name: gm
mtu: 1500
topology:
  nodes:
    h1: {kind: host, ipv4: 10.0.0.1/24, macs: {eth0: "0a:00:00:00:01:01"}}
    h2: {kind: host, ipv4: 10.0.0.2/24}
    h3: {kind: host, ipv4: 10.0.0.3/24}
    h4: {kind: host, ipv4: 10.0.0.4/24}
    s1: {kind: prismd, macs: {node: "0a:00:00:00:00:01", p1: "0a:00:00:00:00:11", p2: "0a:00:00:00:00:12"}}
    l1: {kind: prismd, macs: {node: "0a:00:00:00:00:02", p1: "0a:00:00:00:00:21", p2: "0a:00:00:00:00:22", p3: "0a:00:00:00:00:23"}}
    l2: {kind: prismd, macs: {node: "0a:00:00:00:00:03", p1: "0a:00:00:00:00:31", p2: "0a:00:00:00:00:32", p3: "0a:00:00:00:00:33"}}
  links:
    - endpoints: ["l1:p1", "s1:p1"]
    - endpoints: ["l2:p1", "s1:p2"]
    - endpoints: ["h1:eth0", "l1:p2"]
    - endpoints: ["h2:eth0", "l1:p3"]
    - endpoints: ["h3:eth0", "l2:p2"]
    - endpoints: ["h4:eth0", "l2:p3"]
`

// TestGivenMACs: a topology's macs are what the lab sets, what prismd takes
// as its node MAC and what the AM addresses; a collective over them is
// exact.
func TestGivenMACs(t *testing.T) {
	e := up(t, givenMACs, "h1", am.Config{})
	tp := e.lab.Topo
	for node, ifaces := range map[string][]string{"s1": {"p1", "p2"}, "l2": {"p1", "p2", "p3"}, "h1": {"eth0"}} {
		err := e.lab.Do(node, func() error {
			for _, ifc := range ifaces {
				l, err := netlink.LinkByName(ifc)
				if err != nil {
					return err
				}
				want := tp.Nodes[node].MACs[ifc]
				if got := l.Attrs().HardwareAddr.String(); got != net.HardwareAddr(want[:]).String() {
					t.Errorf("%s:%s has MAC %s, want the given %s", node, ifc, got, net.HardwareAddr(want[:]))
				}
			}
			return nil
		})
		if err != nil {
			t.Fatal(err)
		}
	}
	if m := tp.MAC("l1", deploy.NodeMACIface); m != [6]byte{0x0a, 0, 0, 0, 0, 2} {
		t.Fatalf("l1's node MAC %v, want the given one", net.HardwareAddr(m[:]))
	}
	comms := e.comms(90, "h1", "h2", "h3", "h4")
	collective(comms, "allreduce", 0, 20000, 90, nil).check(t, "allreduce", 0)
	collective(comms, "reduce", 2, 20000, 91, nil).check(t, "reduce", 2)
}
