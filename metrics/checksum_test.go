package metrics_test

import (
	"strings"
	"testing"

	"github.com/prometheus/client_golang/prometheus/testutil"

	"github.com/prismd/prismd/dataplane"
)

// The per-port counts of partial checksums (dataplane.ChecksumStats) are
// exported, zero or not.
func TestCollectorChecksums(t *testing.T) {
	var st dataplane.Stats
	p := dataplane.PortSample{Name: "p1"}
	p.Checksum = dataplane.ChecksumStats{Completed: 12, Unfinished: 3}
	st.Ports = append(st.Ports, p, dataplane.PortSample{Name: "p2"})
	reg := mustServer(t, fakeSource{st}).Registry()
	want := `
# HELP prismd_port_checksum_completed_total Received TCP/UDP frames whose checksum the sending host left partial (TX checksum offload) and prismd completed before forwarding them (afpacket ports only: afxdp ports are not told).
# TYPE prismd_port_checksum_completed_total counter
prismd_port_checksum_completed_total{port="p1"} 12
prismd_port_checksum_completed_total{port="p2"} 0
# HELP prismd_port_checksum_unfinished_total Received frames marked with a partial checksum that prismd could not complete (not TCP/UDP over IPv4 or extension-free IPv6, or an encapsulated inner checksum): forwarded unchanged, so their receiver likely drops them.
# TYPE prismd_port_checksum_unfinished_total counter
prismd_port_checksum_unfinished_total{port="p1"} 3
prismd_port_checksum_unfinished_total{port="p2"} 0
`
	if err := testutil.GatherAndCompare(reg, strings.NewReader(want), "prismd_port_checksum_completed_total", "prismd_port_checksum_unfinished_total"); err != nil {
		t.Fatal(err)
	}
}
