// Package netif looks up network interfaces by name for the packages that
// open raw sockets on them (dataplane's AF_PACKET ports, the host library),
// with an error a person can act on: the interface a flag or config named
// does not exist here, and these are the ones that do.
package netif
