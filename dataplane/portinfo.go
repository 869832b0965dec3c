package dataplane

import (
	"sync"
	"time"
)

// LinkState is a port's link as the daemon last saw it (netlink events and
// polling in cmd/prismd). The dataplane does not watch links itself; it
// keeps what it is told so that the engine can say, when a stream times
// out, that the port it used was down.
type LinkState uint8

const (
	LinkUp        LinkState = iota // up, with carrier (or never reported)
	LinkAdminDown                  // set down (ip link set IF down)
	LinkNoCarrier                  // up without carrier: its peer, cable or far switch port is down
	LinkGone                       // its interface no longer exists (deleted)
)

func (s LinkState) String() string {
	switch s {
	case LinkAdminDown:
		return "set down"
	case LinkNoCarrier:
		return "without carrier"
	case LinkGone:
		return "gone (interface deleted)"
	}
	return "up"
}

// LinkReporter is a Sender that can say what a port's link is: the engine
// asks when a stream times out (never per frame), to tell a dead link
// from a dead peer.
type LinkReporter interface {
	// PortLink returns port's interface name, its link state and since
	// when it has been in that state (zero if never reported).
	PortLink(port int) (name string, s LinkState, since time.Time)
}

// links holds the reported link states by interface name, so they outlive
// a port reopened under the same name. Read only on failure paths: the
// lock never meets a frame.
type links struct {
	mu sync.Mutex
	m  map[string]linkEntry
}

type linkEntry struct {
	s       LinkState
	since   time.Time
	changes uint64 // times s changed (the first report counts when it is not up)
}

// SetLinkState records that interface name's link is now s (the daemon's
// link watcher calls it on every change it sees). A state equal to the
// recorded one keeps its time.
func (d *Dataplane) SetLinkState(name string, s LinkState) {
	d.links.mu.Lock()
	defer d.links.mu.Unlock()
	if d.links.m == nil {
		d.links.m = map[string]linkEntry{}
	}
	e, ok := d.links.m[name]
	if ok && e.s == s || !ok && s == LinkUp {
		// Unchanged; a first report of up is what was assumed. (Its
		// time is kept too: "up since" is not asked.)
		if !ok {
			d.links.m[name] = linkEntry{s: s, since: time.Now()}
		}
		return
	}
	d.links.m[name] = linkEntry{s: s, since: time.Now(), changes: e.changes + 1}
}

// linkOf returns interface name's recorded link state and how many times
// it changed.
func (d *Dataplane) linkOf(name string) (LinkState, uint64) {
	d.links.mu.Lock()
	defer d.links.mu.Unlock()
	e := d.links.m[name]
	return e.s, e.changes
}

// LinkState returns what SetLinkState last recorded for interface name,
// and since when (LinkUp and the zero time if nothing was).
func (d *Dataplane) LinkState(name string) (LinkState, time.Time) {
	d.links.mu.Lock()
	defer d.links.mu.Unlock()
	e := d.links.m[name]
	return e.s, e.since
}

// PortLink implements LinkReporter.
func (t *workerSender) PortLink(port int) (string, LinkState, time.Time) {
	ps := t.snap.port(port)
	if ps == nil {
		return "", LinkUp, time.Time{}
	}
	name := ps.port.Name()
	s, since := t.d.LinkState(name)
	return name, s, since
}

// MTUReporter is a Sender that can say a port's MTU: the CONTROL handler
// bounds a frame by its ingress link's MTU (protocol rule C1), which a
// context's own MTU cannot do before there is a context.
type MTUReporter interface {
	PortMTU(port int) int // 0 for an unknown port
}

// PortMTU implements MTUReporter.
func (t *workerSender) PortMTU(port int) int {
	if ps := t.snap.port(port); ps != nil {
		return ps.port.MTU()
	}
	return 0
}
