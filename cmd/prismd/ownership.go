// This file owns what keeps one prismd per port and per control socket, and
// what follows a port's interface when it is re-created or changes MTU.
//
// Two prismds on one interface each forward every frame the other does
// (a ping came back with 6 duplicates of 3), and a second prismd given the
// same control_listen removed the first one's socket as stale. A port is
// claimed by a listening abstract unix socket named after the interface:
// the abstract namespace belongs to the network namespace, like the
// interface names, and the kernel frees the name when the process exits,
// however it exits, so nothing is left to clean up after a crash.

package main

import (
	"errors"
	"fmt"
	"net"
	"syscall"
	"time"

	"golang.org/x/sys/unix"
)

// claimName is the abstract socket that claims interface name.
func claimName(iface string) string { return "@prismd/port/" + iface }

// claimPort claims iface for this process, or says which process holds it.
func claimPort(iface string) (net.Listener, error) {
	ln, err := net.Listen("unix", claimName(iface))
	if err == nil {
		// A refused prismd connects to learn the holder's PID: accept and
		// close at once, or each one stays queued on the listener (and
		// once its backlog is full, the next refused one cannot say who
		// holds the port).
		go func() {
			for {
				c, err := ln.Accept()
				if err != nil {
					return
				}
				c.Close()
			}
		}()
		return ln, nil
	}
	if !errors.Is(err, syscall.EADDRINUSE) {
		return nil, fmt.Errorf("port %q: claiming the interface: %w", iface, err)
	}
	who := "another process"
	if pid := holderPID(claimName(iface)); pid > 0 {
		who = fmt.Sprintf("another prismd (pid %d)", pid)
	}
	return nil, fmt.Errorf("port %q: %s already switches this interface in this network namespace: "+
		"two switches on one interface forward every frame twice; stop that one, or remove the port from one of the configurations", iface, who)
}

// holderPID is the PID of the process listening on the unix socket addr,
// from the peer credentials of a connection to it; 0 if unknown.
func holderPID(addr string) int {
	c, err := net.DialTimeout("unix", addr, 200*time.Millisecond)
	if err != nil {
		return 0
	}
	defer c.Close()
	raw, err := c.(*net.UnixConn).SyscallConn()
	if err != nil {
		return 0
	}
	pid := 0
	_ = raw.Control(func(fd uintptr) {
		if cred, err := unix.GetsockoptUcred(int(fd), unix.SOL_SOCKET, unix.SO_PEERCRED); err == nil {
			pid = int(cred.Pid)
		}
	})
	return pid
}

// checkControlSocket refuses a control_listen path a running process
// answers on. A socket file nobody answers on is a crashed run's and may
// be removed.
func checkControlSocket(path string) (stale bool, err error) {
	c, err := net.DialTimeout("unix", path, 500*time.Millisecond)
	if err != nil {
		return true, nil
	}
	c.Close()
	who := "another process"
	if pid := holderPID(path); pid > 0 {
		who = fmt.Sprintf("another process (pid %d, likely another prismd)", pid)
	}
	return false, fmt.Errorf("control_listen %q: %s answers on it; stop it, or give this prismd its own control_listen", path, who)
}

// ifaceState is what a port's interface was when the port was opened.
type ifaceState struct {
	index, mtu int
	// up is administratively up (ip link set IF up); running is up with
	// a carrier (operationally up). Up but not running: the peer of a
	// veth, or the cable or the switch port, is down.
	up, running bool
}

// currentIfaces is every interface of this network namespace, by name:
// one listing for all ports (net.InterfaceByName lists them all to find
// one, so a per-port lookup was a netlink dump per port every check). On
// error it is empty, and every port looks gone until the next check.
func currentIfaces() map[string]ifaceState {
	all, err := net.Interfaces()
	m := make(map[string]ifaceState, len(all))
	if err != nil {
		return m
	}
	for _, ifi := range all {
		m[ifi.Name] = ifaceState{index: ifi.Index, mtu: ifi.MTU,
			up: ifi.Flags&net.FlagUp != 0, running: ifi.Flags&net.FlagRunning != 0}
	}
	return m
}
