// Package systemd holds prismd's systemd unit (prismd.service) and the test
// that runs systemd-analyze verify on it. It contains no code.
package systemd
