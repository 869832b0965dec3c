// This file owns reliable multicast of a file (bitmap-framework section 5,
// docs/protocol.md 8.9): windows of RESULT + EXT with D-BM = the receivers
// and Token = the window, zero-group ACKs (DATA + EXT, P-BM = the receiver,
// same Token) aggregated by the switches, one ACK per window at the source,
// repairs multicast to receivers AND NOT acked with INSTALL so they
// self-install their own smaller ACK tree, a manifest window first, and a
// SHA-256 check at every receiver.

package bitmap

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"time"

	"github.com/prismd/prismd/bitmapfwd"
	"github.com/prismd/prismd/control/bitmapam"
	"github.com/prismd/prismd/parser"
)

// ManifestArea is the element range [0, ManifestArea) reserved for the
// manifest window; file byte i travels at position ManifestArea + i. A
// multicast JobSpec's VectorLen is McastVectorLen(size).
const ManifestArea = 4096

// McastVectorLen is the vector length of a multicast job for a file of size
// bytes.
func McastVectorLen(size int64) uint32 { return uint32(ManifestArea + size) }

// ErrDigest: the received file's SHA-256 differs from the manifest's.
var ErrDigest = errors.New("bitmap: SHA-256 mismatch")

// Manifest describes the file; it is sent first, as window 0.
type Manifest struct {
	Name    string `json:"name"`
	Size    int64  `json:"size"`
	Chunk   int    `json:"chunk"`   // bytes per packet
	Window  int    `json:"window"`  // packets per window
	Windows int    `json:"windows"` // data windows (tokens 1..Windows)
	SHA256  string `json:"sha256"`
	// RepairMS is the source's repair interval: a receiver that has
	// everything stays to re-acknowledge repeats for at least two of them,
	// so an ACK lost near the end is repaired rather than left to a
	// receiver that has already gone.
	RepairMS int64 `json:"repair_ms,omitempty"`
}

// McastOptions tune SendFile and ReceiveFile; nil means defaults.
type McastOptions struct {
	// WindowPackets is the packets per window: one ACK per window and
	// receiver (0 = 16).
	WindowPackets int
	// Outstanding is how many windows may await their ACK at the start
	// (0 = 8). The sender then adapts it (AIMD, like TCP's congestion
	// window): one more window per round trip while windows complete
	// without repair, half on evidence of a loss, never below 2 nor above
	// MaxOutstanding. Losses here are queues that overflowed (a switch
	// worker's ring, a receiver's socket): sending faster than the slowest
	// of them only buys repairs.
	Outstanding int
	// MaxOutstanding caps the adapted window (0 = 16; at or below
	// Outstanding: a fixed window of Outstanding). 16 windows of 16
	// packets is what a prismd worker's input ring holds (256 frames):
	// beyond that a switch descheduled for a moment drops, and in the
	// jumbo lab growing to 30 windows cost repairs and time, not speed.
	MaxOutstanding int
	// Timeout: how long the source waits for a window's ACK before it
	// repairs (0 = as AllReduce's default).
	Timeout time.Duration
	// Rounds bounds repairs per window before the transfer fails naming the
	// receivers that never acknowledged (0 = 8).
	Rounds int
	// Progress, if set, is called by the sender as bytes are acknowledged
	// by every receiver.
	Progress func(acked, total int64)
	// Linger is how long a receiver that has everything keeps
	// re-acknowledging repeats (its last ACK may have been lost) once
	// nothing new arrives (0 = 2s). It is raised to two of the source's
	// repair intervals (the manifest says how long those are).
	Linger time.Duration
}

func (o *McastOptions) norm(plan *bitmapam.Plan) McastOptions {
	var r McastOptions
	if o != nil {
		r = *o
	}
	if r.WindowPackets == 0 {
		r.WindowPackets = 16
	}
	if r.Outstanding == 0 {
		r.Outstanding = 8
	}
	if r.MaxOutstanding == 0 {
		r.MaxOutstanding = 16
	}
	r.MaxOutstanding = max(r.MaxOutstanding, r.Outstanding)
	if r.Timeout == 0 && plan != nil {
		r.Timeout = defaultTimeout(plan)
	}
	if r.Rounds == 0 {
		r.Rounds = 8
	}
	if r.Linger == 0 {
		r.Linger = 2 * time.Second
	}
	return r
}

// McastStats describe a transfer at the source.
type McastStats struct {
	Windows       int    // data windows (the manifest window excluded)
	DataFrames    uint64 // first transmissions
	RepairFrames  uint64 // frames of repair multicasts
	Repairs       int    // repair multicasts (window x round)
	AckFrames     uint64 // ACK frames that reached the source
	Partials      uint64 // of them PARTIAL
	AcksPerWindow []int  // ACK frames per token (index 0 = manifest)
	Repaired      []bool // whether the token needed a repair (its ACK count then includes the rounds')
	Inferred      int    // repairs started because a window sent later completed first (no timeout waited)
	MaxInFlight   int    // most windows awaiting their ACK at once (the adapted window's peak)
}

// CleanAcks returns the min and max ACK frames per window over the windows
// that needed no repair, and how many there were: 1 and 1 with in-network
// aggregation, the number of receivers without.
func (s *McastStats) CleanAcks() (mn, mx, n int) {
	for i, a := range s.AcksPerWindow {
		if i < len(s.Repaired) && s.Repaired[i] {
			continue
		}
		if n == 0 || a < mn {
			mn = a
		}
		mx = max(mx, a)
		n++
	}
	return mn, mx, n
}

type mwin struct {
	first, n int    // packets [first, first+n) of the file (manifest: n = 1)
	seq      uint64 // send order of its latest (re)transmission
	acked    *bitmapfwd.Set
	sent     time.Time
	repaired time.Time
	lastMiss *bitmapfwd.Set
	rounds   int
	done     bool
}

// SendFile multicasts size bytes of r (named name) to every receiver of plan
// (a multicast plan whose VectorLen is McastVectorLen(size)) from the
// plan's source host.
func SendFile(ctx context.Context, port *Port, plan *bitmapam.Plan, r io.ReaderAt, size int64, name string, opts *McastOptions) (McastStats, error) {
	var st McastStats
	if plan.Spec.Kind != bitmapam.Multicast {
		return st, fmt.Errorf("bitmap: SendFile needs a multicast plan, not %v", plan.Spec.Kind)
	}
	if plan.Spec.VectorLen != McastVectorLen(size) {
		return st, fmt.Errorf("bitmap: plan vector length %d, want McastVectorLen(%d) = %d", plan.Spec.VectorLen, size, McastVectorLen(size))
	}
	o := opts.norm(plan)
	op := plan.Ops[0]
	src := op.Hosts[op.Root]
	if src.RootOut == nil || src.RootIn == nil {
		return st, fmt.Errorf("%w: source %s has no links", ErrNotInPlan, op.Root)
	}
	w := newWire(port, plan, op.Op)
	target := bitmapfwd.NewSet(w.bits)
	for _, e := range plan.Spec.Endpoints {
		target.Add(e.ID)
	}
	// INT8 values are padded to 4 bytes: keep the chunk a multiple of 4 so
	// the padding never pushes a frame past the MTU.
	chunk := (w.frameBudget(len(plan.Spec.Endpoints)) - parser.GroupDescLen) &^ 3
	// The digest first: receivers check what they wrote against it.
	h := sha256.New()
	if _, err := io.Copy(h, io.NewSectionReader(r, 0, size)); err != nil {
		return st, fmt.Errorf("bitmap: reading %s: %w", name, err)
	}
	packets := int((size + int64(chunk) - 1) / int64(chunk))
	m := Manifest{Name: name, Size: size, Chunk: chunk, Window: o.WindowPackets,
		Windows: (packets + o.WindowPackets - 1) / o.WindowPackets, SHA256: hex.EncodeToString(h.Sum(nil)),
		RepairMS: o.Timeout.Milliseconds() + 1}
	mb, err := json.Marshal(m)
	if err != nil || len(mb) > min(ManifestArea, chunk) {
		return st, fmt.Errorf("bitmap: manifest of %d bytes does not fit one packet (name too long?)", len(mb))
	}
	st.Windows = m.Windows
	st.AcksPerWindow = make([]int, m.Windows+1)
	st.Repaired = make([]bool, m.Windows+1)
	wins := make([]*mwin, m.Windows+1)
	wins[0] = &mwin{n: 1, acked: bitmapfwd.NewSet(w.bits)}
	for i := 1; i <= m.Windows; i++ {
		f := (i - 1) * o.WindowPackets
		wins[i] = &mwin{first: f, n: min(o.WindowPackets, packets-f), acked: bitmapfwd.NewSet(w.bits)}
	}
	install := uint8(parser.XFlagInstall)
	if plan.Spec.NoAggregation {
		// The comparison mode: no merge point anywhere, not even
		// self-installed ones.
		install = 0
	}
	buf := make([]byte, chunk)
	var sendSeq uint64 // windows sent so far, repairs included: the send order
	sendWin := func(tok int, to *bitmapfwd.Set, xf uint8, repair bool) error {
		win := wins[tok]
		for p := 0; p < win.n; p++ {
			var vals values
			var first uint32
			if tok == 0 {
				vals = values{parser.FormatINT8, len(mb), mb}
			} else {
				off := int64(win.first+p) * int64(chunk)
				n := int(min(int64(chunk), size-off))
				if _, err := r.ReadAt(buf[:n], off); err != nil && !errors.Is(err, io.EOF) {
					return fmt.Errorf("bitmap: reading %s: %w", name, err)
				}
				vals = values{parser.FormatINT8, n, append([]byte(nil), buf[:n]...)}
				first = uint32(ManifestArea + off)
			}
			if err := w.send(parser.ClassResult, src.RootOut, to, xf, uint64(tok), first, 0, vals); err != nil {
				return err
			}
			if repair {
				st.RepairFrames++
			} else {
				st.DataFrames++
			}
		}
		win.sent = time.Now()
		sendSeq++
		win.seq = sendSeq
		return nil
	}
	// The congestion window, in data windows (see McastOptions.Outstanding).
	cwnd := float64(o.Outstanding)
	var cutSeq uint64 // losses of windows sent before this were answered by the last cut
	loss := func(win *mwin) {
		if win.seq > cutSeq {
			cwnd = max(cwnd/2, 2)
			cutSeq = sendSeq
		}
	}
	// repair re-multicasts a window to the receivers that did not
	// acknowledge it. ordered: a window sent after this one's latest
	// transmission completed first, which on FIFO paths proves the
	// transmission (or its ACK) lost, so no timer guard applies.
	repair := func(tok int, now time.Time, ordered bool) error {
		win := wins[tok]
		miss := bitmapfwd.NewSet(w.bits)
		miss.AndNot(target, win.acked)
		if miss.IsEmpty() {
			return nil
		}
		if !ordered && win.lastMiss != nil && miss.SubsetOf(win.lastMiss) && now.Sub(win.repaired) < o.Timeout/2 {
			return nil
		}
		loss(win)
		if win.rounds >= o.Rounds {
			ids := members(miss)
			return &MissingError{Op: "multicast", Token: uint64(tok), Endpoints: ids, Hosts: hostsOf(ids, hostMap(plan)), Rounds: win.rounds}
		}
		win.rounds++
		st.Repaired[tok] = true
		win.repaired, win.lastMiss = now, miss
		st.Repairs++
		xf := install
		if ordered {
			// The switches' aggregation of this window is most likely
			// still open, holding the ACKs that did arrive: without
			// INSTALL the missing ACK completes it there. A self-installed
			// C-BM would take precedence and wait for re-ACKs that the
			// receivers which already acknowledged suppress (they answer a
			// repeat once per burst), until its timeout.
			xf = 0
		}
		return sendWin(tok, miss, xf, true)
	}
	sub := port.subscribe(op.Op.Job)
	defer port.unsubscribe(sub)
	var ackedBytes int64
	next, base := 0, 0
	tick := time.NewTicker(max(o.Timeout/8, time.Millisecond))
	defer tick.Stop()
	for base <= m.Windows {
		// The manifest alone first; then up to Outstanding data windows.
		for next <= m.Windows && next-base < int(cwnd) && (next == 0 || wins[0].done) {
			if err := sendWin(next, target, 0, false); err != nil {
				return st, err
			}
			next++
			st.MaxInFlight = max(st.MaxInFlight, next-base)
		}
		select {
		case <-ctx.Done():
			return st, ctx.Err()
		case f, ok := <-sub.ch:
			if !ok {
				return st, ErrClosed
			}
			a, ok := w.accept(f, parser.ClassData, src.RootIn)
			if !ok || a.d.Groups != 0 || a.d.Ext.Token > uint64(m.Windows) {
				continue
			}
			tok := int(a.d.Ext.Token)
			st.AckFrames++
			st.AcksPerWindow[tok]++
			win := wins[tok]
			got := bitmapfwd.NewSet(w.bits)
			got.And(a.set, target)
			win.acked.Or(win.acked, got)
			if !win.done && win.acked.Equal(target) {
				win.done = true
				if !st.Repaired[tok] {
					cwnd = min(cwnd+1/cwnd, float64(o.MaxOutstanding)) // one window more per round trip
				}
				// Windows sent before this one and still unacknowledged
				// lost a frame or an ACK: repair them now rather than
				// after the switches' PARTIAL or the timeout.
				for k := base; k < next; k++ {
					if wk := wins[k]; k != tok && !wk.done && wk.seq < win.seq {
						st.Inferred++
						if err := repair(k, time.Now(), true); err != nil {
							return st, err
						}
					}
				}
				if tok > 0 {
					for p := 0; p < win.n; p++ {
						ackedBytes += min(int64(chunk), size-int64(win.first+p)*int64(chunk))
					}
					if o.Progress != nil {
						o.Progress(ackedBytes, size)
					}
				}
			}
			if a.d.Ext.XFlags&parser.XFlagPartial != 0 {
				st.Partials++
				if !win.done {
					if err := repair(tok, time.Now(), false); err != nil {
						return st, err
					}
				}
			}
		case now := <-tick.C:
			for tok := base; tok < next; tok++ {
				if win := wins[tok]; !win.done && now.Sub(win.sent) >= o.Timeout {
					if err := repair(tok, now, false); err != nil {
						return st, err
					}
				}
			}
		}
		for base <= m.Windows && wins[base].done {
			base++
		}
	}
	return st, nil
}

// ReceiverConfig identifies a receiver without a plan: it learns the
// operation, the binding and the encoding from the first frame addressed to
// its endpoint and answers on the mirror of that binding.
type ReceiverConfig struct {
	Job      uint64
	Endpoint int
	// Tenant, if nonzero, must match the frames'.
	Tenant uint32
}

// RecvStats describe a transfer at a receiver.
type RecvStats struct {
	Frames     uint64 // data frames addressed to this receiver
	Duplicates uint64 // of them already received (suppressed)
	Acks       uint64 // ACKs sent
}

// ReceiveFile receives a multicast file into path (created or truncated),
// checks its SHA-256 against the manifest and returns the manifest. A
// mismatch is ErrDigest.
func ReceiveFile(ctx context.Context, port *Port, cfg ReceiverConfig, path string, opts *McastOptions) (Manifest, RecvStats, error) {
	o := opts.norm(nil)
	var m Manifest
	var st RecvStats
	out, err := os.Create(path)
	if err != nil {
		return m, st, err
	}
	defer out.Close()
	sub := port.subscribe(cfg.Job)
	defer port.unsubscribe(sub)
	keyed := port.key(cfg.Job) != nil // ACKs carry the AUTH tag (8.6)
	var (
		have      bool // manifest known
		op        parser.OpKey
		peer      []byte
		stream    uint16
		src, dst  uint16
		locked    bool
		got       [][]bool
		left      []int
		winsLeft  int
		lastAck   []time.Time
		completed time.Time
	)
	ack := func(d *parser.Data, tok uint64) error {
		body, enc, err := ownSet(d, cfg.Endpoint)
		if err != nil {
			return err
		}
		h := parser.DataFields{Class: parser.ClassData, Op: op, SrcEP: dst, DstEP: src, PacketID: port.nextPID(op, stream, parser.ClassData), Stream: stream}
		copy(h.Eth.Dst[:], peer)
		h.Eth.Src = port.mac
		var xf uint8
		if keyed {
			xf = parser.XFlagAuth
		}
		fr, err := parser.AppendData(nil, &h, &parser.Ext{Encoding: enc, XFlags: xf, Tenant: d.Ext.Tenant, Token: tok, Set: body})
		if err != nil {
			return err
		}
		if err := port.sign(fr); err != nil {
			return err
		}
		st.Acks++
		return port.write(fr)
	}
	for {
		var wait <-chan time.Time
		if !completed.IsZero() {
			// Repairs come one source timeout apart (plus its tick): stay
			// for two of them so the last re-ACK can still be asked for.
			wait = time.After(max(o.Linger, 2*time.Duration(m.RepairMS)*time.Millisecond+50*time.Millisecond))
		}
		select {
		case <-ctx.Done():
			return m, st, ctx.Err()
		case <-wait:
			return m, st, verify(path, m)
		case f, ok := <-sub.ch:
			if !ok {
				return m, st, ErrClosed
			}
			var d parser.Data
			if d.Decode(f, parser.Limits{}) != nil || d.Class != parser.ClassResult || d.Flags&parser.FlagExt == 0 ||
				(cfg.Tenant != 0 && d.Ext.Tenant != cfg.Tenant) || !inSet(&d, cfg.Endpoint) {
				continue
			}
			if locked && (d.Op != op || string(f[6:12]) != string(peer) || d.Stream != stream || d.SrcEP != src || d.DstEP != dst) {
				continue
			}
			if !locked {
				locked, op, peer, stream, src, dst = true, d.Op, append([]byte(nil), f[6:12]...), d.Stream, d.SrcEP, d.DstEP
			}
			st.Frames++
			tok := d.Ext.Token
			if tok == 0 {
				if !have {
					var g parser.GroupIter
					grp, ok := d.NextGroup(&g)
					if !ok || json.Unmarshal(grp.Values, &m) != nil || m.Chunk <= 0 || m.Window <= 0 {
						continue
					}
					have = true
					got = make([][]bool, m.Windows+1)
					left = make([]int, m.Windows+1)
					lastAck = make([]time.Time, m.Windows+1)
					packets := int((m.Size + int64(m.Chunk) - 1) / int64(m.Chunk))
					for i := 1; i <= m.Windows; i++ {
						n := min(m.Window, packets-(i-1)*m.Window)
						got[i], left[i] = make([]bool, n), n
					}
					winsLeft = m.Windows
					if err := out.Truncate(m.Size); err != nil {
						return m, st, err
					}
					if winsLeft == 0 {
						completed = time.Now()
					}
				} else {
					st.Duplicates++
				}
				if err := ack(&d, 0); err != nil {
					return m, st, err
				}
				continue
			}
			if !have || tok > uint64(m.Windows) {
				continue
			}
			off := int64(d.First) - ManifestArea
			pkt := int(off / int64(m.Chunk))
			wi := int(tok)
			p := pkt - (wi-1)*m.Window
			if off < 0 || off%int64(m.Chunk) != 0 || p < 0 || p >= len(got[wi]) {
				continue
			}
			if got[wi][p] {
				st.Duplicates++
				// A repair reached us again: our ACK was lost. Answer once
				// per burst.
				if left[wi] == 0 && time.Since(lastAck[wi]) > 10*time.Millisecond {
					lastAck[wi] = time.Now()
					if err := ack(&d, tok); err != nil {
						return m, st, err
					}
				}
				continue
			}
			var g parser.GroupIter
			pos := off
			for grp, ok := d.NextGroup(&g); ok; grp, ok = d.NextGroup(&g) {
				if _, err := out.WriteAt(grp.Values, pos); err != nil {
					return m, st, err
				}
				pos += int64(len(grp.Values))
			}
			got[wi][p] = true
			left[wi]--
			if left[wi] == 0 {
				lastAck[wi] = time.Now()
				if err := ack(&d, tok); err != nil {
					return m, st, err
				}
				winsLeft--
				if winsLeft == 0 {
					completed = time.Now()
				}
			}
		}
	}
}

// verify checks the file's SHA-256 against the manifest.
func verify(path string, m Manifest) error {
	f, err := os.Open(path)
	if err != nil {
		return err
	}
	defer f.Close()
	h := sha256.New()
	if _, err := io.Copy(h, f); err != nil {
		return err
	}
	if got := hex.EncodeToString(h.Sum(nil)); got != m.SHA256 {
		return fmt.Errorf("%w: %s: got %s, manifest says %s", ErrDigest, path, got, m.SHA256)
	}
	return nil
}

// inSet reports whether the frame's set holds endpoint e.
func inSet(d *parser.Data, e int) bool {
	var it parser.SetIter
	for id, ok := d.Ext.NextEndpoint(&it); ok; id, ok = d.Ext.NextEndpoint(&it) {
		if int(id) == e {
			return true
		}
		if int(id) > e {
			return false
		}
	}
	return false
}

// ownSet encodes {e} in the encoding and shape of the frame's set, so an ACK
// speaks the job's encoding without the receiver knowing the plan.
func ownSet(d *parser.Data, e int) ([]byte, uint8, error) {
	switch bitmapfwd.Encoding(d.Ext.Encoding) {
	case bitmapfwd.Flat:
		id, wc, err := bitmapfwd.ParseFlatHeader(d.Ext.Set)
		if err != nil {
			return nil, 0, err
		}
		s := bitmapfwd.NewSet((id + 1) * wc * 64)
		s.Add(e)
		b, err := bitmapfwd.AppendFlat(nil, s, id, wc)
		return b, d.Ext.Encoding, err
	case bitmapfwd.Hier:
		bb, bc, err := bitmapfwd.ParseHierHeader(d.Ext.Set)
		if err != nil {
			return nil, 0, err
		}
		s := bitmapfwd.NewSet(bb * bc)
		s.Add(e)
		b, err := bitmapfwd.AppendHier(nil, s, bb)
		return b, d.Ext.Encoding, err
	}
	return parser.AppendListSet(nil, uint32(e)), d.Ext.Encoding, nil
}
