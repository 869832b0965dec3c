package bitmap

// Per-job authentication on the hosts (docs/protocol.md 8.6): the tags the
// Port writes are checked against an HMAC-SHA256 computed here from the
// bytes 8.6 names, frames without a valid tag never reach an operation, the
// signing and verifying paths allocate nothing, and keyed jobs run over
// engine/bitmap switches holding the same key (exact), or fail naming the
// host that holds another key.

import (
	"bytes"
	"crypto/hmac"
	"crypto/sha256"
	"encoding/binary"
	"errors"
	"net"
	"sync"
	"testing"
	"time"

	"github.com/prismd/prismd/bitmapfwd"
	ebitmap "github.com/prismd/prismd/engine/bitmap"
	"github.com/prismd/prismd/internal/alloctest"
	"github.com/prismd/prismd/parser"
)

func jobKeyFor(seed byte) []byte {
	k := make([]byte, 32)
	for i := range k {
		k[i] = seed*31 + byte(i)*7 + 1
	}
	return k
}

// oracleTag is section 8.6 read directly off the wire layout (sections 2,
// 6 and 8), independently of package parser: HMAC-SHA256(key, M)[:16],
// M = control word .. end of body with the 16 tag bytes zeroed. It also
// returns where the frame's tag is.
func oracleTag(t *testing.T, key, frame []byte) (want, got []byte) {
	t.Helper()
	p := frame[14:] // control word first
	if p[1] != 2 && p[1] != 3 {
		t.Fatalf("class %d is not DATA or RESULT", p[1])
	}
	if p[2+33]&0x04 == 0 || p[42+3]&0x04 == 0 {
		t.Fatalf("flags %#x, xflags %#x: no EXT with AUTH", p[2+33], p[45])
	}
	bodyLen := int(binary.BigEndian.Uint16(p[2+34:]))
	extLen := int(binary.BigEndian.Uint16(p[42:]))
	end, tagOff := 42+extLen+bodyLen, 42+extLen-16
	if end > len(p) {
		t.Fatalf("frame of %d bytes declares %d", len(p), end)
	}
	m := append([]byte(nil), p[:end]...)
	clear(m[tagOff : tagOff+16])
	h := hmac.New(sha256.New, key)
	h.Write(m)
	return h.Sum(nil)[:16], p[tagOff : tagOff+16]
}

// recConn is a Conn that records what the Port sends (keep) and delivers
// what a test feeds to in.
type recConn struct {
	mac    net.HardwareAddr
	in     chan []byte
	closed chan struct{}
	once   sync.Once
	keep   bool
	mu     sync.Mutex
	out    [][]byte
}

func newRecConn(mac [6]byte, keep bool) *recConn {
	return &recConn{mac: net.HardwareAddr(mac[:]), in: make(chan []byte, 64), closed: make(chan struct{}), keep: keep}
}

func (c *recConn) ReadFrame(b []byte) (int, error) {
	select {
	case f := <-c.in:
		return copy(b, f), nil
	case <-c.closed:
		return 0, net.ErrClosed
	}
}

func (c *recConn) WriteFrame(b []byte) error {
	if c.keep {
		c.mu.Lock()
		c.out = append(c.out, append([]byte(nil), b...))
		c.mu.Unlock()
	}
	return nil
}

func (c *recConn) MAC() net.HardwareAddr { return c.mac }
func (c *recConn) Close() error          { c.once.Do(func() { close(c.closed) }); return nil }

func (c *recConn) sent() [][]byte {
	c.mu.Lock()
	defer c.mu.Unlock()
	return append([][]byte(nil), c.out...)
}

// TestAuthTagOracle: a keyed worker's DATA (a mergeable chunk and the
// largest FP32 chunk) and a keyed root's RESULT carry EXT with AUTH and the
// tag the oracle computes; package parser (what a switch runs) accepts
// them; the tag's 16 bytes never push a frame past the MTU. The same frames
// from an unkeyed Port carry no tag.
func TestAuthTagOracle(t *testing.T) {
	topo := loadTopo(t, "spine-leaf")
	p := arPlan(t, topo, "h1", 1, 3000, nil)
	op := p.Ops[0]
	key := jobKeyFor(1)
	build := func(host string, keyed bool) [][]byte {
		hp := op.Hosts[host]
		c := newRecConn(topo.MAC(host, topo.Nodes[host].Ifaces[0]), true)
		port := NewPort(c)
		defer port.Close()
		if keyed {
			if err := port.SetKey(p.Spec.Op.Job, key); err != nil {
				t.Fatal(err)
			}
		}
		w := newWire(port, p, op.Op)
		vals := make([]float32, 3000)
		for i := range vals {
			vals[i] = float32(i) * 0.5
		}
		if hp.Up != nil {
			for _, n := range []int{chunkLen(w, Options{}), chunkLen(w, Options{ChunkElements: 1 << 20})} {
				bodies, enc, err := w.setBodies(setOf(w.bits, hp.Endpoints[0]))
				if err != nil {
					t.Fatal(err)
				}
				f, err := w.frame(parser.ClassData, hp.Up, enc, bodies[0], 0, 9, 0, 0, 0, values{parser.FormatFP32, n, fp32Bytes(vals[:n])})
				if err != nil {
					t.Fatal(err)
				}
				if err := w.port.write(f); err != nil {
					t.Fatal(err)
				}
			}
		} else {
			target := setOf(w.bits, 1, 2, 3)
			n := chunkLen(w, Options{})
			if err := w.send(parser.ClassResult, hp.RootOut, target, 0, 9, 0, 0, values{parser.FormatFP32, n, fp32Bytes(vals[:n])}); err != nil {
				t.Fatal(err)
			}
		}
		return c.sent()
	}
	auth := parser.NewAuthenticator(key)
	for _, host := range []string{"h2", "h1"} {
		frames := build(host, true)
		if len(frames) == 0 {
			t.Fatalf("%s sent nothing", host)
		}
		for i, f := range frames {
			want, got := oracleTag(t, key, f)
			if !bytes.Equal(want, got) {
				t.Fatalf("%s frame %d: tag %x, HMAC-SHA256 of 8.6 gives %x", host, i, got, want)
			}
			var d parser.Data
			if err := d.Decode(f, parser.Limits{VectorLen: 3000, MTU: parser.MTUDefault}); err != nil {
				t.Fatalf("%s frame %d: %v", host, i, err)
			}
			if err := auth.Verify(f); err != nil {
				t.Fatalf("%s frame %d: parser refuses the tag: %v", host, i, err)
			}
			if other, _ := oracleTag(t, jobKeyFor(2), f); bytes.Equal(other, want) {
				t.Fatal("the oracle gives the same tag for another key")
			}
		}
		plain := build(host, false)
		for i, f := range plain {
			if f[parser.DataBodyOff+3]&parser.XFlagAuth != 0 {
				t.Fatalf("%s unkeyed frame %d has AUTH", host, i)
			}
		}
		t.Logf("%s: %d keyed frames of %d..%d bytes, tags verified", host, len(frames), len(frames[0]), len(frames[len(frames)-1]))
	}
}

// authFrame builds a DATA (or RESULT) frame of job to dst, signed with key
// when key is set.
func authFrame(t *testing.T, dst [6]byte, c parser.Class, job uint64, token uint64, key []byte) []byte {
	t.Helper()
	h := parser.DataFields{Class: c, Op: parser.OpKey{Job: job, Group: 1, GroupGen: 1, Op: 1, OpGen: 1}, SrcEP: 1, DstEP: 2, PacketID: 1, Stream: 1}
	h.Eth.Dst, h.Eth.Src = dst, [6]byte{2, 9, 9, 9, 9, 9}
	var xf uint8
	if key != nil {
		xf = parser.XFlagAuth
	}
	var f []byte
	s := bitmapfwd.NewSet(64)
	s.Add(1)
	body, err := bitmapfwd.AppendFlat(nil, s, 0, 1)
	if err != nil {
		t.Fatal(err)
	}
	f, err = parser.AppendData(nil, &h, &parser.Ext{Encoding: parser.EncFlat, XFlags: xf, Tenant: 3, Token: token, Set: body},
		parser.Group{Format: parser.FormatFP32, Count: 2, Values: make([]byte, 8)})
	if err != nil {
		t.Fatal(err)
	}
	if key != nil {
		if err := parser.NewAuthenticator(key).Sign(f); err != nil {
			t.Fatal(err)
		}
	}
	return f
}

// TestAuthReceive feeds a keyed Port valid frames and forgeries: exactly
// the frames with a valid tag (and the tagless classes) reach the job's
// operations, every other one is counted in AuthDrops, and an unkeyed job
// on the same Port is unaffected.
func TestAuthReceive(t *testing.T) {
	mac := [6]byte{2, 1, 2, 3, 4, 5}
	c := newRecConn(mac, false)
	port := NewPort(c)
	defer port.Close()
	key := jobKeyFor(1)
	if err := port.SetKey(5, key[:31]); err == nil {
		t.Fatal("a 31-byte key was accepted")
	}
	if err := port.SetKey(5, key); err != nil {
		t.Fatal(err)
	}
	s5, s6 := port.subscribe(5), port.subscribe(6)
	good := authFrame(t, mac, parser.ClassData, 5, 1, key)
	result := authFrame(t, mac, parser.ClassResult, 5, 2, key)
	badTag := append([]byte(nil), good...)
	badTag[len(badTag)-9-16] ^= 0x80 // a tag byte (the body is 12 bytes)
	badByte := append([]byte(nil), good...)
	badByte[parser.HdrOff+25] ^= 1 // Packet ID: covered
	progress := append([]byte(nil), good...)
	progress[parser.CWOff+1] = byte(parser.ClassProgress)
	forged := []([]byte){badTag, badByte, authFrame(t, mac, parser.ClassData, 5, 3, nil), authFrame(t, mac, parser.ClassData, 5, 4, jobKeyFor(2))}
	if w, g := oracleTag(t, key, good); !bytes.Equal(w, g) {
		t.Fatal("the test's frame is not signed as 8.6 says")
	}
	plain := authFrame(t, mac, parser.ClassData, 6, 7, nil)
	for _, f := range append([][]byte{good, forged[0], result, forged[1], progress, forged[2], forged[3], plain}, authFrame(t, mac, parser.ClassData, 6, 99, nil)) {
		c.in <- f
	}
	var got5, got6 [][]byte
	for deadline := time.After(5 * time.Second); len(got6) < 2; {
		select {
		case f := <-s5.ch:
			got5 = append(got5, f)
		case f := <-s6.ch:
			got6 = append(got6, f)
		case <-deadline:
			t.Fatalf("the sentinel frame never arrived (%d and %d frames)", len(got5), len(got6))
		}
	}
	for len(s5.ch) > 0 {
		got5 = append(got5, <-s5.ch)
	}
	want5 := [][]byte{good, result, progress}
	if len(got5) != len(want5) {
		t.Fatalf("job 5 got %d frames, want %d (the valid DATA, RESULT and a PROGRESS)", len(got5), len(want5))
	}
	for i := range want5 {
		if !bytes.Equal(got5[i], want5[i]) {
			t.Fatalf("job 5 frame %d differs from the one sent", i)
		}
	}
	if !bytes.Equal(got6[0], plain) {
		t.Fatal("the unkeyed job's frame did not arrive unchanged")
	}
	if n := port.AuthDrops(); n != uint64(len(forged)) {
		t.Fatalf("AuthDrops = %d, want %d", n, len(forged))
	}
	// Removing the key lets tagless frames through again.
	if err := port.SetKey(5, nil); err != nil {
		t.Fatal(err)
	}
	c.in <- forged[2]
	select {
	case f := <-s5.ch:
		if !bytes.Equal(f, forged[2]) {
			t.Fatal("wrong frame after the key was removed")
		}
	case <-time.After(5 * time.Second):
		t.Fatal("a tagless frame of an unkeyed job was dropped")
	}
}

// TestAuthNoAllocs: signing and sending a frame, and verifying a valid or
// a forged one, allocate nothing (one HMAC state per key, reset per frame).
func TestAuthNoAllocs(t *testing.T) {
	mac := [6]byte{2, 1, 2, 3, 4, 5}
	port := NewPort(newRecConn(mac, false))
	defer port.Close()
	key := jobKeyFor(1)
	if err := port.SetKey(5, key); err != nil {
		t.Fatal(err)
	}
	f := authFrame(t, mac, parser.ClassData, 5, 1, key)
	forged := authFrame(t, mac, parser.ClassData, 5, 1, jobKeyFor(3))
	if a := alloctest.PerRun(200, func() {
		if port.sign(f) != nil || port.write(f) != nil {
			t.Fatal("sign/write failed")
		}
	}); a != 0 && !raceEnabled {
		// (Under -race sync.Pool drops objects on purpose, so the pooled
		// signers are remade: the count means nothing there.)
		t.Errorf("signed send: %v allocations per frame, want 0", a)
	}
	if w, g := oracleTag(t, key, f); !bytes.Equal(w, g) {
		t.Fatal("the re-signed frame's tag is wrong")
	}
	if a := alloctest.PerRun(200, func() {
		if !port.admit(5, f) || port.admit(5, forged) {
			t.Fatal("admit gave the wrong verdict")
		}
	}); a != 0 {
		t.Errorf("verified receive: %v allocations per frame, want 0", a)
	}
}

// withKeys gives the engine switches key for the plan's job, and every
// host key except those in hosts (another key, or nil: none).
func withKeys(key []byte, hosts map[string][]byte) func(*fabric) {
	return func(f *fabric) {
		f.swKeys = ebitmap.NewKeyring()
		f.swKeys.Set(f.plan.Spec.Op.Job, key)
		f.hostKeys = map[string][]byte{}
		for _, h := range f.topo.Hosts() {
			f.hostKeys[h] = key
			if k, ok := hosts[h]; ok {
				f.hostKeys[h] = k
			}
		}
	}
}

// TestAllReduceAuthEngine runs a keyed AllReduce over engine/bitmap
// switches holding the job key: exact, also under loss and duplication
// (retransmissions carry RETRANSMIT, so they are signed again), with no
// frame dropped for its tag anywhere. With h4 holding another key, its
// contributions are dropped (auth_failed) and every other host fails naming
// endpoint 3 on h4; h4 drops what it receives.
func TestAllReduceAuthEngine(t *testing.T) {
	topo := loadTopo(t, "spine-leaf")
	key := jobKeyFor(1)
	for _, loss := range []float64{0, 0.01} {
		t.Run("exact-loss="+map[bool]string{false: "0", true: "1%"}[loss > 0], func(t *testing.T) {
			p := arPlan(t, topo, "h1", 1, 6000, nil)
			f := newFabricWith(t, topo, p, loss, loss, 5, true, withKeys(key, nil))
			r := runAllReduce(t, f, p, 11, "", nil)
			ports := r.ports
			r.checkExact(t)
			f.close()
			c := f.engCounters()
			if n := c.Drops[ebitmap.DropAuthFailed].Load(); n != 0 {
				t.Errorf("switches dropped %d frames as auth_failed", n)
			}
			if c.Merged.Load() == 0 {
				t.Error("no switch merged anything")
			}
			var rt uint64
			for h, port := range ports {
				if n := port.AuthDrops(); n != 0 {
					t.Errorf("%s dropped %d frames for their tag", h, n)
				}
				rt += r.stats[h].Retransmits
			}
			if loss > 0 && rt == 0 {
				t.Error("no retransmission: the re-signing path did not run")
			}
			t.Logf("%d frames lost, %d retransmissions, %d merges", f.dropped, rt, c.Merged.Load())
		})
	}
	t.Run("wrong-key", func(t *testing.T) {
		p := arPlan(t, topo, "h1", 1, 500, nil)
		f := newFabricWith(t, topo, p, 0, 0, 1, true, withKeys(key, map[string][]byte{"h4": jobKeyFor(9)}))
		start := time.Now()
		r := runAllReduce(t, f, p, 13, "", &Options{Timeout: 150 * time.Millisecond, Rounds: 2})
		ports := r.ports
		took := time.Since(start)
		for _, h := range []string{"h1", "h2", "h3"} {
			var me *MissingError
			if !errors.As(r.errs[h], &me) {
				t.Fatalf("%s: got %v, want a MissingError", h, r.errs[h])
			}
			if len(me.Endpoints) != 1 || me.Endpoints[0] != 3 || len(me.Hosts) != 1 || me.Hosts[0] != "h4" {
				t.Errorf("%s: %v: want endpoint 3 on h4", h, me)
			}
		}
		if !errors.Is(r.errs["h4"], ErrFailed) {
			t.Errorf("h4 (wrong key): %v, want a failure", r.errs["h4"])
		}
		f.close()
		if n := f.engCounters().Drops[ebitmap.DropAuthFailed].Load(); n == 0 {
			t.Error("the switches counted no auth_failed drop")
		}
		if ports["h4"].AuthDrops() == 0 {
			t.Error("h4 dropped nothing signed with the job key")
		}
		for _, h := range []string{"h1", "h2", "h3"} {
			if n := ports[h].AuthDrops(); n != 0 {
				t.Errorf("%s (right key) dropped %d frames", h, n)
			}
		}
		t.Logf("failed after %v: %v", took.Round(time.Millisecond), r.errs["h2"])
	})
}

// TestMulticastAuthEngine: a keyed reliable multicast over engine switches
// (data RESULTs from the source, ACK DATA from the receivers, merged ACKs
// re-signed by the switches) delivers the file with nothing dropped.
func TestMulticastAuthEngine(t *testing.T) {
	topo := loadTopo(t, "spine-leaf")
	p := mcastPlan(t, topo, "h1", 200_000, false)
	f := newFabricWith(t, topo, p, 0, 0, 1, true, withKeys(jobKeyFor(4), nil))
	r := runMcast(t, topo, p, f, randomFile(200_000, 3), "")
	if r.err != nil {
		t.Fatal(r.err)
	}
	for h, err := range r.rerrs {
		if err != nil {
			t.Fatalf("%s: %v", h, err)
		}
	}
	f.close()
	c := f.engCounters()
	if n := c.Drops[ebitmap.DropAuthFailed].Load(); n != 0 {
		t.Errorf("switches dropped %d frames as auth_failed", n)
	}
	if c.Merged.Load() == 0 {
		t.Error("no ACK was merged")
	}
}

// TestMoEAuthEngine: keyed MoE dispatch/combine over engine switches
// equals the unicast reference with nothing dropped for its tag.
func TestMoEAuthEngine(t *testing.T) {
	topo := loadTopo(t, "spine-leaf")
	p := moePlan(t, topo, 1, 64, 2)
	f := newFabricWith(t, topo, p, 0, 0, 3, true, withKeys(jobKeyFor(5), nil))
	hosts := topo.Hosts()
	batches := map[string]moeBatch{}
	for i, h := range hosts {
		batches[h] = randomBatch(uint64(i+1), 8, 64, 2, len(p.Spec.Endpoints))
	}
	outs, res := runMoE(t, f, p, hosts, batches, nil)
	if t.Failed() {
		return
	}
	checkMoE(t, hosts, batches, outs, res, nil)
	f.close()
	c := f.engCounters()
	if n := c.Drops[ebitmap.DropAuthFailed].Load(); n != 0 {
		t.Errorf("switches dropped %d frames as auth_failed", n)
	}
	if c.Installs.Load() == 0 {
		t.Error("no C-BM installed: the dispatch was not replicated")
	}
}
