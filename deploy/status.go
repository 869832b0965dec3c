// This file owns reporting what of a lab exists on this host.

package deploy

import (
	"net"
	"sort"

	"github.com/vishvananda/netlink"
	"github.com/vishvananda/netns"
)

// IfaceStatus is one interface as the kernel sees it.
type IfaceStatus struct {
	Name    string
	MAC     string
	MTU     int
	AdminUp bool // set up by the lab
	Up      bool // operationally up: carrier, queueing discipline active
	Addrs   []string
}

// NodeStatus is one node as found on this host.
type NodeStatus struct {
	Node    string
	Kind    Kind
	NetNS   string
	Present bool // the namespace exists
	Ifaces  []IfaceStatus
	PID     int  // recorded prismd PID, 0 if none
	Alive   bool // that PID runs and is this lab's prismd
	Stopped bool // Alive, but stopped by a signal (SIGSTOP) or a tracer
}

// Status reports every node of lab t: namespace, interfaces with MACs and
// addresses, and prismd PIDs. It needs no state from the process that
// brought the lab up.
func Status(t *Topology, o *Options) ([]NodeStatus, error) {
	l := newLab(t, o)
	var r []NodeStatus
	for _, node := range t.names {
		s := NodeStatus{Node: node, Kind: t.Nodes[node].Kind, NetNS: l.NetNS(node), Present: nsExists(l.NetNS(node))}
		if s.Kind == KindPrismd {
			s.PID = readPID(l.dir, node)
			s.Alive = s.PID > 0 && alive(s.PID) && l.ours(s.PID, node)
			s.Stopped = s.Alive && stoppedProc(s.PID)
		}
		if s.Present {
			ifs, err := l.ifaces(node)
			if err != nil {
				return nil, err
			}
			s.Ifaces = ifs
		}
		r = append(r, s)
	}
	return r, nil
}

func (l *Lab) ifaces(node string) ([]IfaceStatus, error) {
	h, err := netns.GetFromName(l.NetNS(node))
	if err != nil {
		return nil, err
	}
	defer h.Close()
	nh, err := netlink.NewHandleAt(h)
	if err != nil {
		return nil, err
	}
	defer nh.Close()
	links, err := listLinks(nh.LinkList)
	if err != nil {
		return nil, err
	}
	var r []IfaceStatus
	for _, link := range links {
		a := link.Attrs()
		if a.Name == "lo" {
			continue
		}
		s := IfaceStatus{Name: a.Name, MAC: a.HardwareAddr.String(), MTU: a.MTU, AdminUp: a.Flags&net.FlagUp != 0, Up: a.OperState == netlink.OperUp}
		addrs, _ := nh.AddrList(link, netlink.FAMILY_V4)
		for _, ad := range addrs {
			s.Addrs = append(s.Addrs, ad.IPNet.String())
		}
		r = append(r, s)
	}
	// Ports in port order, then anything else (a bridge's br0) by name.
	rank := func(name string) int {
		if i := PortIndex(l.Topo, node, name); i >= 0 {
			return i
		}
		return len(links)
	}
	sort.SliceStable(r, func(i, j int) bool {
		ri, rj := rank(r[i].Name), rank(r[j].Name)
		if ri != rj {
			return ri < rj
		}
		return r[i].Name < r[j].Name
	})
	return r, nil
}
