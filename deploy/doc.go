// Package deploy owns prismd's lab topologies and the labs built from them.
//
// A topology file (containerlab-like YAML, see Parse) names hosts, prismd
// switches and Linux bridges and the links between their interfaces:
//
//	name: single                 # lab name: a-z, 0-9, -; at most 12 characters
//	mtu: 1500                    # optional; default 1500, 68..9216
//	topology:
//	  nodes:
//	    h1: {kind: host, ipv4: 10.0.0.1/24}   # ipv4 (on the first interface): hosts only
//	    h2: {kind: host, ipv4: 10.0.0.2/24}
//	    sw1: {kind: prismd, backend: afxdp, xdp_mode: generic, kulisch_partials: scaled}
//	  links:
//	    - endpoints: ["h1:eth0", "sw1:p1"]    # NODE:IFACE; a switch's port index is
//	    - endpoints: ["h2:eth0", "sw1:p2"]    # the order of its first appearance here
//	      mtu: 1500                           # optional; default the file's mtu
//
// kind is host, prismd or bridge. backend (afpacket, the default, or afxdp)
// and xdp_mode (generic, the default, or native; afxdp only) are for prismd
// nodes only and apply to every port of the node: the generated prismd
// configuration carries them on each ports entry. kulisch_partials (f64, the
// default, scaled or plain; prismd nodes only) is how the switch sends exact
// partials to its parent, prismd's top-level key of that name. fault (prismd
// nodes only; tests and labs) impairs every port of the node with prismd's
// per-port fault option in its ingress/egress form, for example
// fault: {ingress: {drop_percent: 1, duplicate_percent: 1, reorder_percent:
// 5, reorder_depth: 8}, egress: {reorder_percent: 5, reorder_depth: 4,
// delay_us: 20}}; each port gets seeds of its own (PortSeed), derived from
// the node's name unless seed is given, so a lab is reproducible and its
// ports do not drop and reorder in step. macs (any node) gives interfaces
// MACs of their own instead of derived ones, and a prismd or bridge node
// its own under node: macs: {node: "02:00:00:00:00:01", p1:
// "3c:fd:fe:00:00:01"}, as a network of real NICs needs for the AM to
// address them (docs/lab-hardware.md); a lab sets them on its veths.
// Unknown keys
// and values are errors naming the file, the line and the valid choices. From a
// parsed Topology this package derives everything other tools must agree on
// without talking to each other: the MAC of every interface (MAC), the port
// index of every switch interface (PortIndex, Ports), and paths between nodes
// (Topology.Path). The Aggregation Manager builds its view of the network from
// these functions, so they are pure and deterministic.
//
// Up builds a lab on this host: one network namespace per node, veth pairs per
// link, addresses, Linux bridges, and a prismd per switch node started with a
// generated configuration (PrismdConfig) and its share of the machine's cores
// (shared with the hosts' processes) as GOMAXPROCS (Options.SwitchProcs, SwitchProcsFor). Restart starts
// again the prismd of a lab that is up but has some stopped (killed, crashed), as Up
// started them, and leaves the rest alone. Down removes all of it and only it.
//
// What this package must not touch: it never imports the dataplane, engine or
// control packages (it runs prismd as a separate binary, the way an operator
// would), it never kills a process it did not record itself, and it never
// deletes a namespace or link whose name does not carry the lab's prefix.
package deploy
