// Package porttest provides an in-memory dataplane.Port for root-free tests:
// frames injected with Inject are read by the dataplane, frames the
// dataplane writes are collected for inspection. It must not be imported by
// non-test code.
package porttest
