package bitmap

import (
	"fmt"
	"testing"

	"github.com/prismd/prismd/internal/alloctest"
	"github.com/prismd/prismd/parser"
)

// sink is a Sender that copies like the dataplane's TX batch and keeps
// nothing: the per-frame paths must not allocate around it.
type sink struct {
	buf    [parser.EthLen + parser.MTUJumbo]byte
	frames int
	ports  int
}

func (s *sink) Send(port int, frame []byte) bool {
	copy(s.buf[:], frame)
	s.frames++
	return true
}
func (s *sink) PortMAC(port int) [6]byte { return [6]byte{2, 0, 0, 0, byte(port), 1} }
func (s *sink) NumPorts() int            { return s.ports }

// fan4 is a node replicating from src (port 0) to h1..h4 (ports 1..4), each
// h also a contributor, for replication and combine benchmarks.
func fan4(t testing.TB) *fabric {
	f := newFabric(t)
	f.node("sx", 5)
	f.host("src")
	f.link("src", 0, "sx", 0)
	bs := []bspec{{kind: parser.KindResultIn, port: 0}, {kind: parser.KindParent, port: 0, rank: true}}
	for i := 0; i < 4; i++ {
		name := fmt.Sprintf("h%d", i+1)
		f.host(name)
		f.link(name, 0, "sx", i+1)
		m := []byte("00000000")
		m[i] = '1'
		bs = append(bs, bspec{kind: parser.KindResultOut, port: i + 1, mask: string(m), rank: true},
			bspec{kind: parser.KindContributor, port: i + 1, rank: true})
	}
	f.stage("sx", baseContext(parser.RoleInternal), "", 1, bs)
	return f
}

func setToken(fr []byte, tok uint64) { parser.ExtHeader(fr[parser.DataBodyOff:]).SetToken(tok) }

func TestAllocsReplicate(t *testing.T) {
	f := fan4(t)
	sh := f.nodes["sx"].sh
	fr := f.hostFrame("src", parser.ClassResult, 1, 0, flat(0, 1, 2, 3), parser.EncFlat, 0, make([]float32, 64))
	var tx sink
	if a := alloctest.PerRun(1000, func() { sh.HandleData(f.now, 0, fr, &tx) }); a != 0 {
		t.Fatalf("replication allocates %v per frame", a)
	}
	if tx.frames != 4*1001 {
		t.Fatalf("%d copies for 1001 frames", tx.frames)
	}
}

// TestAllocsCombine: dispatch with INSTALL (soft state), two expert outputs,
// one merged DATA up: the MoE combine in steady state.
func TestAllocsCombine(t *testing.T) {
	for _, keyed := range []bool{false, true} {
		t.Run(fmt.Sprint("auth=", keyed), func(t *testing.T) {
			f := fan4(t)
			var xf uint8
			var auth *parser.Authenticator
			if keyed {
				key := []byte("0123456789abcdef0123456789abcdef")
				f.keys.Set(testOp.Job, key)
				auth = parser.NewAuthenticator(key)
				xf = parser.XFlagAuth
			}
			sh := f.nodes["sx"].sh
			disp := f.hostFrame("src", parser.ClassResult, 1, parser.XFlagInstall|xf, flat(0, 1), parser.EncFlat, 0, make([]float32, 16))
			e1 := f.hostFrame("h1", parser.ClassData, 1, xf, flat(0), parser.EncFlat, 0, make([]float32, 16))
			e2 := f.hostFrame("h2", parser.ClassData, 1, xf, flat(1), parser.EncFlat, 0, make([]float32, 16))
			var tx sink
			tok := uint64(1)
			calls := 0
			run := func() {
				tok++
				calls++ // PerRun measures again after a first run that grew tables
				for _, fr := range [][]byte{disp, e1, e2} {
					setToken(fr, tok)
					if auth != nil {
						_ = auth.Sign(fr)
					}
				}
				sh.HandleData(f.now, 0, disp, &tx)
				sh.HandleData(f.now, 1, e1, &tx)
				sh.HandleData(f.now, 2, e2, &tx)
			}
			if a := alloctest.PerRun(1000, run); a != 0 {
				t.Fatalf("combine allocates %v per token", a)
			}
			if tx.frames != 3*calls || f.cnt.Completed.Load() != uint64(calls) {
				t.Fatalf("%d frames, %d completed for %d tokens", tx.frames, f.cnt.Completed.Load(), calls)
			}
		})
	}
}

// TestAllocsAggregate: Fig. 1's s1, two worker contributions completing its
// A-BM and one merged DATA to the parent, per token.
func TestAllocsAggregate(t *testing.T) {
	f := fig1(t, nil)
	sh := f.nodes["s1"].sh
	vals := make([]float32, chunk)
	for i := range vals {
		vals[i] = float32(i) * 0.25
	}
	w1 := workerFrame(f, 0, 1, vals)
	w2 := workerFrame(f, 1, 1, vals)
	var tx sink
	tok := uint64(1)
	run := func() {
		tok++
		setToken(w1, tok)
		setToken(w2, tok)
		sh.HandleData(f.now, 0, w1, &tx)
		sh.HandleData(f.now, 1, w2, &tx)
	}
	if a := alloctest.PerRun(1000, run); a != 0 {
		t.Fatalf("aggregation allocates %v per token", a)
	}
	if tx.frames != 1001 {
		t.Fatalf("%d merged frames for 1001 tokens", tx.frames)
	}
}

// TestAllocsLateForward: a retransmission for a token s1 already merged and
// sent up (past the late guard) is forwarded on PARENT without allocating.
func TestAllocsLateForward(t *testing.T) {
	f := fig1(t, nil)
	sh := f.nodes["s1"].sh
	vals := make([]float32, chunk)
	w1 := workerFrame(f, 0, 1, vals)
	w2 := workerFrame(f, 1, 1, vals)
	var tx sink
	sh.HandleData(f.now, 0, w1, &tx)
	sh.HandleData(f.now, 1, w2, &tx)
	now := f.now + lateGuardNs
	run := func() { sh.HandleData(now, 0, w1, &tx) }
	if a := alloctest.PerRun(1000, run); a != 0 {
		t.Fatalf("late forward allocates %v per frame", a)
	}
	if tx.frames != 1+1001 || f.cnt.LateForward.Load() != 1001 {
		t.Fatalf("%d frames sent, %d late forwards", tx.frames, f.cnt.LateForward.Load())
	}
}
