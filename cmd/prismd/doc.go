// Command prismd runs the PRISM switch daemon: it reads the YAML
// configuration (--config), opens one AF_PACKET port per configured
// interface, runs the dataplane, serves /metrics and a local control socket
// (introspection, and the per-job authentication keys of keys.go, which
// only that socket takes), reloads on SIGHUP and shuts down cleanly on
// SIGTERM/SIGINT. It claims each port's interface (ownership.go: one prismd
// per interface and per control socket) and follows the interfaces: a
// re-created one, or an MTU change it was told to follow, reopens the port.
//
// This package owns flags, the configuration file and process lifecycle; it
// must not implement forwarding (package dataplane) or operations (engine).
package main
