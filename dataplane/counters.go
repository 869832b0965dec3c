// This file owns the plain atomic counters of the hot path and the Stats
// snapshot package metrics reads at scrape time.

package dataplane

import "sync/atomic"

// DropReason names why a frame was dropped. The zero value is invalid.
type DropReason uint8

const (
	_                DropReason = iota
	DropShortFrame              // shorter than the 14-byte Ethernet header
	DropTruncated               // local PRISM frame too short for control word + operation identity
	DropBadVersion              // PRISM major version is not 1
	DropUnknownClass            // PRISM class not 1..4
	DropBadSrcMAC               // group (multicast/broadcast) or all-zero source MAC
	DropLoopback                // source MAC is one of our own MACs: the frame came back to us
	DropHairpin                 // destination learned on the ingress port
	DropOversize                // longer than the port's read buffer (MTU + header)
	DropRingFull                // worker ring full: the engine is not keeping up
	DropTxQueueFull             // worker Sender batch could not be flushed / frame too big
	DropTxError                 // transmit system call failed
	DropUnsupported             // local PRISM frame and no engine wired in
	// The port's transmit ring had no room for the rest of a batch
	// (WriteBatch returned ErrTxFull): an AF_XDP TX ring whose chunks were
	// all still in the kernel's hands.
	DropTxRingFull
	// The kernel refused a transmit descriptor as invalid (AF_XDP
	// tx_invalid_descs). The port had accepted the frame: it is also in the
	// transmitted counters.
	DropTxInvalidDesc
	// The device dropped a frame the kernel had taken from the port (AF_XDP
	// sendto EBUSY: no carrier, veth peer backlog full). Also in the
	// transmitted counters.
	DropTxDriverDrop
	// The egress link is down, gone or without carrier (ErrLinkDown): the
	// frames of the batch from there on were dropped.
	DropTxLinkDown
	// IEEE 802.1 reserved link-local group (01:80:C2:00:00:01 to 0F:
	// PAUSE, LACP, 802.1X, LLDP, ...): a bridge never relays these; they
	// are for the link's two ends. 01:80:C2:00:00:00 (STP BPDUs) is
	// flooded, as a Linux bridge with STP off does, so a neighbour that
	// runs STP sees a loop through prismd.
	DropLinkLocal
	// Longer than the egress port's MTU (plus header and one 802.1Q
	// tag): a frame from a port with a larger MTU. Counted on the egress
	// port; the kernel would have refused it (EMSGSIZE).
	DropTxOversize
	numDropReasons
)

var dropNames = [numDropReasons]string{"", "short_frame", "truncated", "bad_version", "unknown_class",
	"bad_src_mac", "loopback", "hairpin", "oversize", "ring_full", "tx_queue_full", "tx_error", "unsupported",
	"tx_ring_full", "tx_invalid_desc", "tx_driver_drop", "tx_link_down", "link_local", "tx_oversize"}

func (r DropReason) String() string {
	if r > 0 && r < numDropReasons {
		return dropNames[r]
	}
	return "invalid"
}

// FrameClass is the classification of a received frame for prismd_frames_total.
type FrameClass uint8

const (
	_             FrameClass = iota
	ClassL2                  // ordinary traffic, bridged
	ClassHost                // non-PRISM frame to a local MAC: the host stack owns it, not bridged
	ClassTransit             // PRISM frame to a non-local MAC, bridged unchanged
	ClassControl             // local PRISM CONTROL
	ClassData                // local PRISM DATA
	ClassResult              // local PRISM RESULT
	ClassProgress            // local PRISM PROGRESS
	numFrameClasses
)

var classNames = [numFrameClasses]string{"", "l2", "host", "transit", "control", "data", "result", "progress"}

func (c FrameClass) String() string {
	if c > 0 && c < numFrameClasses {
		return classNames[c]
	}
	return "invalid"
}

// portCounters are written by the port's RX goroutine (rx*, drops of RX
// reasons, classes) and by any TX path (tx*, TX drops). Each field is a plain
// atomic; TX counters are added once per batch, not per frame.
type portCounters struct {
	rxFrames, rxBytes atomic.Uint64
	txFrames, txBytes atomic.Uint64
	ringWaits         atomic.Uint64
	unlearned         atomic.Uint64
	moved             atomic.Uint64
	drops             [numDropReasons]atomic.Uint64
	classes           [numFrameClasses]atomic.Uint64
}

// PortSample is a snapshot of one port's counters.
type PortSample struct {
	Name                                 string
	RxFrames, RxBytes, TxFrames, TxBytes uint64
	KernelDrops                          uint64
	// RingWaits counts local PRISM frames the receive loop held until a
	// busy engine worker made room (RingWait), instead of dropping them.
	RingWaits uint64
	// Unlearned counts frames whose source MAC the MAC table could not
	// take: it was full (Options.MACTableSize). They are forwarded, and
	// frames to their senders are flooded.
	Unlearned uint64
	// Moved counts frames whose source MAC was learned on another port
	// until then: a station that moved its cable, once; a loop through
	// the switch, all the time (prismd runs no spanning tree).
	Moved uint64
	// Drops is indexed by DropReason (index 0 unused): the dataplane's own
	// counts plus what the port counted itself (PortStats).
	Drops [numDropReasons]uint64
	// Fault counts what WithFault did to this port's frames on purpose.
	Fault FaultStats
	// LaneTuned, LaneAll and LaneSwitches are the port's (PortStats).
	LaneTuned    bool
	LaneAll      bool
	LaneSwitches uint64
	// RingHeld is the port's (PortStats).
	RingHeld uint64
	// Link is the port's link as the daemon last reported it
	// (SetLinkState; LinkUp if never), LinkChanges how many times it
	// changed: read at sampling time, never per frame.
	Link        LinkState
	LinkChanges uint64
	// Checksum counts received frames with a partial checksum (PortStats).
	Checksum ChecksumStats
	// classes is the port's share of Stats.Classes.
	classes [numFrameClasses]uint64
}

// add adds o's counts to s (not its name or lane state).
func (s *PortSample) add(o *PortSample) {
	s.RxFrames += o.RxFrames
	s.RxBytes += o.RxBytes
	s.TxFrames += o.TxFrames
	s.TxBytes += o.TxBytes
	s.KernelDrops += o.KernelDrops
	s.RingWaits += o.RingWaits
	s.Unlearned += o.Unlearned
	s.Moved += o.Moved
	for i := range s.Drops {
		s.Drops[i] += o.Drops[i]
	}
	s.Fault.IngressDrops += o.Fault.IngressDrops
	s.Fault.IngressDuplicates += o.Fault.IngressDuplicates
	s.Fault.EgressDrops += o.Fault.EgressDrops
	s.Fault.IngressReordered += o.Fault.IngressReordered
	s.Fault.EgressReordered += o.Fault.EgressReordered
	s.LaneSwitches += o.LaneSwitches
	s.RingHeld += o.RingHeld
	s.Checksum.Completed += o.Checksum.Completed
	s.Checksum.Unfinished += o.Checksum.Unfinished
	for i := range s.classes {
		s.classes[i] += o.classes[i]
	}
}

// Stats is a snapshot of every counter, for package metrics.
type Stats struct {
	Ports []PortSample
	// Classes is indexed by FrameClass (index 0 unused); summed over ports.
	Classes [numFrameClasses]uint64
	// MACEntries is the number of live (not aged) MAC table entries.
	MACEntries int
	// MACCapacity is how many stations the MAC table holds (half its
	// slots, Options.MACTableSize, so that probes stay short).
	MACCapacity int
}

// DropReasons lists every valid DropReason, for pre-registering label values.
func DropReasons() []DropReason {
	r := make([]DropReason, 0, numDropReasons-1)
	for i := DropReason(1); i < numDropReasons; i++ {
		r = append(r, i)
	}
	return r
}

// FrameClasses lists every valid FrameClass.
func FrameClasses() []FrameClass {
	r := make([]FrameClass, 0, numFrameClasses-1)
	for i := FrameClass(1); i < numFrameClasses; i++ {
		r = append(r, i)
	}
	return r
}

type atomicCounter = atomic.Uint64
