// Package deploy owns prismd's lab topologies and the labs built from them.
//
// A topology file (containerlab-like YAML, see Parse) names hosts, prismd
// switches and Linux bridges and the links between their interfaces. From a
// parsed Topology this package derives everything other tools must agree on
// without talking to each other: the MAC of every interface (MAC), the port
// index of every switch interface (PortIndex, Ports), and paths between nodes
// (Topology.Path). The Aggregation Manager builds its view of the network from
// these functions, so they are pure and deterministic.
//
// Up builds a lab on this host: one network namespace per node, veth pairs per
// link, addresses, Linux bridges, and a prismd per switch node started with a
// generated configuration (PrismdConfig). Down removes all of it and only it.
//
// What this package must not touch: it never imports the dataplane, engine or
// control packages (it runs prismd as a separate binary, the way an operator
// would), it never kills a process it did not record itself, and it never
// deletes a namespace or link whose name does not carry the lab's prefix.
package deploy
