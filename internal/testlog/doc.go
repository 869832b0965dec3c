// Package testlog gives tests a logger for background work that may outlive
// them. An AM's timers (a watchdog, a prepared operation's TTL, a keepalive
// check) log through Config.Logf after the test that started the AM has
// returned, and testing.T.Logf panics then. It must not be imported outside
// tests.
package testlog
