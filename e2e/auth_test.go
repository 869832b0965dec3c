package e2e

// End-to-end per-job authentication (docs/protocol.md 8.6, 9.6): one job
// key, generated and installed on every switch of a spine-leaf lab through
// its control socket with prismctl, signs a bitmap AllReduce whose hosts
// hold the key (exact); forged DATA injected from a host namespace moves
// its switch's auth_failed counter by exactly the number injected and
// nothing else; a host holding another key makes the operation fail naming
// that host's endpoint as missing.

import (
	"context"
	"errors"
	"fmt"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/prismd/prismd/bitmapfwd"
	"github.com/prismd/prismd/control/am"
	"github.com/prismd/prismd/control/bitmapam"
	"github.com/prismd/prismd/deploy"
	"github.com/prismd/prismd/deploy/labtest"
	"github.com/prismd/prismd/host/bitmap"
	"github.com/prismd/prismd/internal/authkey"
	"github.com/prismd/prismd/parser"
)

// prismSeries returns the prismd_engine_*, prismd_bitmap_* and
// prismd_control_* series of a switch's /metrics: what frames of operations
// change, unlike the port counters that every ARP moves.
func prismSeries(t *testing.T, lab *deploy.Lab, sw string) map[string]float64 {
	t.Helper()
	m := scrape(t, lab, sw)
	r := map[string]float64{}
	for _, line := range strings.Split(m, "\n") {
		if !strings.HasPrefix(line, "prismd_engine_") && !strings.HasPrefix(line, "prismd_bitmap_") &&
			!strings.HasPrefix(line, "prismd_control_") {
			continue
		}
		i := strings.LastIndexByte(line, ' ')
		v, err := strconv.ParseFloat(line[i+1:], 64)
		if err != nil {
			t.Fatalf("%s: %q: %v", sw, line, err)
		}
		r[line[:i]] = v
	}
	if len(r) == 0 {
		t.Fatalf("%s serves no engine, bitmap or control series", sw)
	}
	return r
}

const authFailed = `prismd_bitmap_drops_total{reason="auth_failed"}`

// allSeries snapshots every switch.
func allSeries(t *testing.T, lab *deploy.Lab, sws []string) map[string]map[string]float64 {
	r := map[string]map[string]float64{}
	for _, sw := range sws {
		r[sw] = prismSeries(t, lab, sw)
	}
	return r
}

// seriesDiff lists every series whose value differs between a and b.
func seriesDiff(a, b map[string]map[string]float64) []string {
	var d []string
	for sw := range b {
		for k, v := range b[sw] {
			if a[sw][k] != v {
				d = append(d, fmt.Sprintf("%s %s: %v -> %v", sw, k, a[sw][k], v))
			}
		}
		for k := range a[sw] {
			if _, ok := b[sw][k]; !ok {
				d = append(d, fmt.Sprintf("%s %s vanished", sw, k))
			}
		}
	}
	return d
}

func ctl(t *testing.T, bin string, args ...string) string {
	t.Helper()
	out, err := exec.Command(bin, args...).CombinedOutput()
	if err != nil {
		t.Fatalf("prismctl %s: %v\n%s", strings.Join(args, " "), err, out)
	}
	return string(out)
}

func TestBitmapAuth(t *testing.T) {
	requireBitmapSwitch(t)
	bin := prismctl(t)
	lab := labtest.Up(t, "spine-leaf")
	hosts := lab.Topo.Hosts()
	sws := lab.Topo.NodesOf(deploy.KindPrismd)
	dir := t.TempDir()
	keyFile, wrongFile := filepath.Join(dir, "job.key"), filepath.Join(dir, "wrong.key")
	ctl(t, bin, "keys", "gen", keyFile)
	ctl(t, bin, "keys", "gen", wrongFile)
	key, err := authkey.ReadFile(keyFile)
	if err != nil {
		t.Fatal(err)
	}
	wrong, err := authkey.ReadFile(wrongFile)
	if err != nil {
		t.Fatal(err)
	}
	fp := authkey.Fingerprint(key)
	const job, wrongJob, mcastJob = 211, 212, 213
	for _, sw := range sws {
		for _, j := range []int{job, wrongJob} {
			out := ctl(t, bin, "keys", "set", "--job", strconv.Itoa(j), "--key-file", keyFile, "--socket", lab.ControlSocket(sw))
			if !strings.Contains(out, fmt.Sprintf("job %d: key %s installed", j, fp)) {
				t.Fatalf("%s: %s", sw, out)
			}
		}
		out := ctl(t, bin, "keys", "list", "--socket", lab.ControlSocket(sw))
		if !strings.Contains(out, fmt.Sprintf("%d  %s\n", job, fp)) || strings.Contains(out, authkey.Format(key)[:16]) {
			t.Fatalf("%s keys list:\n%s", sw, out)
		}
	}
	n := n(20000, 2000000)
	plan, err := bitmapam.Compute(lab.Topo, bitmapam.JobSpec{Kind: bitmapam.AllReduce, Op: opKey(job), Tenant: 1,
		Endpoints: bitmapam.HostEndpoints(hosts, 1), Root: hosts[0], VectorLen: uint32(n)})
	if err != nil {
		t.Fatal(err)
	}
	register(t, lab, hosts[0], plan)
	ps := ports(t, lab, hosts)

	t.Run("keyed-allreduce", func(t *testing.T) {
		for _, h := range hosts {
			if err := ps[h].SetKey(job, key); err != nil {
				t.Fatal(err)
			}
		}
		ins, outs := make([][]float32, len(hosts)), make([][]float32, len(hosts))
		errs := make([]error, len(hosts))
		var wg sync.WaitGroup
		start := time.Now()
		for i, h := range hosts {
			ins[i], outs[i] = vecFor(41, i, n, false), make([]float32, n)
			wg.Add(1)
			go func() {
				defer wg.Done()
				ctx, cancel := context.WithTimeout(context.Background(), 120*time.Second)
				defer cancel()
				_, errs[i] = bitmap.AllReduce(ctx, ps[h], plan, h, map[int][]float32{i: ins[i]}, outs[i], nil)
			}()
		}
		wg.Wait()
		for i, err := range errs {
			if err != nil {
				t.Fatalf("%s: %v", hosts[i], err)
			}
		}
		who := make([]int, len(hosts))
		for i := range who {
			who[i] = i
		}
		checkExact(t, ins, outs, who)
		for _, h := range hosts {
			if d := ps[h].AuthDrops(); d != 0 {
				t.Errorf("%s dropped %d frames for their tag", h, d)
			}
		}
		for _, sw := range sws {
			if v := prismSeries(t, lab, sw)[authFailed]; v != 0 {
				t.Errorf("%s counted %v auth_failed drops in a run where everyone holds the key", sw, v)
			}
		}
		t.Logf("keyed bitmap allreduce of %d fp32 on %d hosts: %v", n, len(hosts), time.Since(start).Round(time.Millisecond))
	})
	if t.Failed() {
		return
	}

	t.Run("forged-data", func(t *testing.T) {
		// h2's DATA to its leaf on its own binding (stream, endpoints,
		// source MAC, tenant all right): only the tag is wrong or missing.
		victim := hosts[1]
		hp := plan.Ops[0].Hosts[victim]
		leaf := hp.Up.PeerName
		enc, body, err := bitmapam.EncodeSet(setOfEP(plan.Bits, hp.Endpoints[0]), plan.Choice.Params, int(plan.Ops[0].Switches[0].Context.MaxTerms))
		if err != nil {
			t.Fatal(err)
		}
		var forged [][]byte
		for i, kind := range []string{"none", "none", "none", "zero", "zero", "zero", "wrong", "wrong", "wrong"} {
			h := parser.DataFields{Class: parser.ClassData, Op: plan.Ops[0].Op, SrcEP: hp.Up.SrcEP, DstEP: hp.Up.DstEP,
				PacketID: uint32(60000 + i), First: 0, Stream: hp.Up.Stream}
			copy(h.Eth.Dst[:], hp.Up.Peer)
			copy(h.Eth.Src[:], hp.MAC)
			var xf uint8
			if kind != "none" {
				xf = parser.XFlagAuth
			}
			vals := make([]byte, 64)
			f, err := parser.AppendData(nil, &h, &parser.Ext{Encoding: uint8(enc), XFlags: xf, Tenant: 1, Token: uint64(i), Set: body},
				parser.Group{Format: parser.FormatFP32, Count: 16, Values: vals})
			if err != nil {
				t.Fatal(err)
			}
			if kind == "wrong" {
				if err := parser.NewAuthenticator(wrong).Sign(f); err != nil {
					t.Fatal(err)
				}
			}
			forged = append(forged, f)
		}
		var conn *am.PacketConn
		if err := lab.Do(victim, func() error {
			var err error
			conn, err = am.OpenConn("eth0")
			return err
		}); err != nil {
			t.Fatal(err)
		}
		defer conn.Close()
		// Quiet first: the AllReduce's last frames and timers have settled
		// when two snapshots 300 ms apart agree.
		before := allSeries(t, lab, sws)
		for deadline := time.Now().Add(10 * time.Second); ; {
			time.Sleep(300 * time.Millisecond)
			again := allSeries(t, lab, sws)
			if len(seriesDiff(before, again)) == 0 {
				break
			}
			before = again
			if time.Now().After(deadline) {
				t.Fatalf("the switches never went quiet: %v", seriesDiff(before, again))
			}
		}
		for _, f := range forged {
			if err := conn.WriteFrame(f); err != nil {
				t.Fatal(err)
			}
		}
		var after map[string]map[string]float64
		for deadline := time.Now().Add(10 * time.Second); ; time.Sleep(100 * time.Millisecond) {
			after = allSeries(t, lab, sws)
			if after[leaf][authFailed]-before[leaf][authFailed] >= float64(len(forged)) || time.Now().After(deadline) {
				break
			}
		}
		time.Sleep(300 * time.Millisecond) // anything else the forgeries caused
		after = allSeries(t, lab, sws)
		if d := after[leaf][authFailed] - before[leaf][authFailed]; d != float64(len(forged)) {
			t.Errorf("%s auth_failed moved by %v, want %d", leaf, d, len(forged))
		}
		var other []string
		for _, d := range seriesDiff(before, after) {
			if !strings.HasPrefix(d, leaf+" "+authFailed+":") {
				other = append(other, d)
			}
		}
		if len(other) > 0 {
			t.Errorf("forged frames changed more than %s auth_failed:\n  %s", leaf, strings.Join(other, "\n  "))
		}
		for _, h := range hosts {
			if d := ps[h].AuthDrops(); d != 0 {
				t.Errorf("%s dropped %d frames: a forgery went past the switch", h, d)
			}
		}
		t.Logf("%d forged DATA frames from %s: %s auth_failed %v -> %v", len(forged), victim, leaf, before[leaf][authFailed], after[leaf][authFailed])
	})

	t.Run("wrong-key-host", func(t *testing.T) {
		wplan, err := bitmapam.Compute(lab.Topo, bitmapam.JobSpec{Kind: bitmapam.AllReduce, Op: opKey(wrongJob), Tenant: 1,
			Endpoints: bitmapam.HostEndpoints(hosts, 1), Root: hosts[0], VectorLen: 3000})
		if err != nil {
			t.Fatal(err)
		}
		register(t, lab, hosts[0], wplan)
		bad := hosts[len(hosts)-1]
		badEP := len(hosts) - 1
		for _, h := range hosts {
			k := key
			if h == bad {
				k = wrong
			}
			if err := ps[h].SetKey(wrongJob, k); err != nil {
				t.Fatal(err)
			}
		}
		before := allSeries(t, lab, sws)
		drops0 := ps[bad].AuthDrops()
		errs := make([]error, len(hosts))
		var wg sync.WaitGroup
		opts := &bitmap.Options{Timeout: 300 * time.Millisecond, Rounds: 2}
		const limit = 60 * time.Second
		start := time.Now()
		for i, h := range hosts {
			wg.Add(1)
			go func() {
				defer wg.Done()
				ctx, cancel := context.WithTimeout(context.Background(), limit)
				defer cancel()
				_, errs[i] = bitmap.AllReduce(ctx, ps[h], wplan, h, map[int][]float32{i: vecFor(43, i, 3000, false)}, make([]float32, 3000), opts)
			}()
		}
		wg.Wait()
		took := time.Since(start)
		for i, h := range hosts {
			if h == bad {
				if errs[i] == nil || errors.Is(errs[i], context.DeadlineExceeded) {
					t.Errorf("%s (wrong key): %v, want it to fail on its own", h, errs[i])
				}
				continue
			}
			var me *bitmap.MissingError
			if !errors.As(errs[i], &me) {
				t.Fatalf("%s: %v, want a MissingError naming %s", h, errs[i], bad)
			}
			if len(me.Endpoints) != 1 || me.Endpoints[0] != badEP || len(me.Hosts) != 1 || me.Hosts[0] != bad {
				t.Errorf("%s: %v: want endpoint %d on %s", h, me, badEP, bad)
			}
		}
		after := allSeries(t, lab, sws)
		leaf := wplan.Ops[0].Hosts[bad].Up.PeerName
		if d := after[leaf][authFailed] - before[leaf][authFailed]; d <= 0 {
			t.Errorf("%s counted no auth_failed drop of %s's contributions", leaf, bad)
		}
		if ps[bad].AuthDrops() == drops0 {
			t.Errorf("%s dropped nothing signed with the job key", bad)
		}
		t.Logf("failed after %v (limit %v): %v; %s: %v", took.Round(time.Millisecond), limit, errs[0], bad, errs[len(hosts)-1])
	})

	t.Run("keyed-mcast-cli", func(t *testing.T) {
		// prismctl mcast send/recv processes with the key file from
		// PRISM_AUTH_KEY_FILE: data RESULTs, ACKs, and the ACKs the
		// switches merge and sign again all carry valid tags.
		for _, sw := range sws {
			ctl(t, bin, "keys", "set", "--job", strconv.Itoa(mcastJob), "--key-file", keyFile, "--socket", lab.ControlSocket(sw))
		}
		t.Setenv("PRISM_AUTH_KEY_FILE", keyFile)
		before := allSeries(t, lab, sws)
		data := make([]byte, 1<<20)
		for i := range data {
			data[i] = byte(i*7 + i>>9)
		}
		if mn, mx := mcastRun(t, lab, bin, mcastJob, data); mn != 1 || mx != 1 {
			t.Errorf("%d..%d ACKs per window at the source, want 1 (merged in the network)", mn, mx)
		}
		after := allSeries(t, lab, sws)
		for _, sw := range sws {
			if d := after[sw][authFailed] - before[sw][authFailed]; d != 0 {
				t.Errorf("%s dropped %v frames of the keyed transfer as auth_failed", sw, d)
			}
		}
	})

	// The keys come off again and the listing says so.
	for _, sw := range sws {
		for _, j := range []int{job, wrongJob, mcastJob} {
			ctl(t, bin, "keys", "rm", "--job", strconv.Itoa(j), "--socket", lab.ControlSocket(sw))
		}
		if out := ctl(t, bin, "keys", "list", "--socket", lab.ControlSocket(sw)); !strings.Contains(out, "no job keys installed") {
			t.Errorf("%s after rm:\n%s", sw, out)
		}
	}
}

func setOfEP(bits, ep int) *bitmapfwd.Set {
	s := bitmapfwd.NewSet(bits)
	s.Add(ep)
	return s
}

// scrape returns switch sw's /metrics text.
func scrape(t *testing.T, lab *deploy.Lab, sw string) string {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	m, err := lab.Metrics(ctx, sw)
	if err != nil {
		t.Fatalf("%s /metrics: %v", sw, err)
	}
	return m
}
