// Package systemd holds prismd's systemd unit (prismd.service), the drop-in
// for ports with backend: afxdp (prismd-afxdp.conf), and the test that runs
// systemd-analyze verify on them. It contains no code.
package systemd
