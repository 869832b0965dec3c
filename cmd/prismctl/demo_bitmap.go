// This file owns the bitmap-framework steps of `prismctl demo` (issue #6):
// a bitmap-tree ALLREDUCE, an MoE dispatch+combine with random top-K, and a
// file delivered to every host by reliable multicast, each checked against a
// host-side reference. They are appended to demoSteps here so the whole set
// can be dropped by deleting this file.

package main

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"math"
	"math/rand/v2"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/prismd/prismd/control/am"
	"github.com/prismd/prismd/control/bitmapam"
	"github.com/prismd/prismd/deploy"
	"github.com/prismd/prismd/host/bitmap"
	"github.com/prismd/prismd/internal/authkey"
	"github.com/prismd/prismd/parser"
)

func init() {
	demoSteps = append(demoSteps,
		demoStep{"bitmap-tree ALLREDUCE (BITMAP framework) with a per-job key, verified bit for bit", demoBitmapAllReduce},
		demoStep{"MoE dispatch + combine of a token batch with random top-K", demoBitmapMoE},
		demoStep{"reliable multicast of a file from h1 to every other host", demoBitmapMcast},
	)
}

// demoBitmapTimeout bounds one bitmap step end to end.
const demoBitmapTimeout = 3 * time.Minute

func demoOpKey(job uint64) parser.OpKey {
	return parser.OpKey{Job: job, Group: 1, GroupGen: 1, Op: 1, OpGen: uint32(time.Now().Unix())}
}

// bitmapRegister STAGEs and COMMITs plan from node's eth0 and returns the
// release, which the caller defers.
func (d *demo) bitmapRegister(node string, plan *bitmapam.Plan) (func(), error) {
	var conn *am.PacketConn
	if err := d.lab.Do(node, func() error {
		var err error
		conn, err = am.OpenConn("eth0")
		return err
	}); err != nil {
		return nil, fmt.Errorf("registrar socket on %s:eth0: %w", node, err)
	}
	reg := bitmapam.NewRegistrar(conn, bitmapam.RegistrarConfig{Timeout: 10 * time.Second, // generous: a loaded box answers late
		Logf: func(format string, args ...any) { fmt.Fprintf(d.out, "   ("+format+")\n", args...) }})
	ctx, cancel := context.WithTimeout(d.ctx, 30*time.Second)
	defer cancel()
	if err := reg.Register(ctx, plan); err != nil {
		reg.Close()
		return nil, fmt.Errorf("registration of the bitmap job on the switches: %w", err)
	}
	return func() {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		if err := reg.Release(ctx, plan); err != nil {
			fmt.Fprintf(d.out, "   (release of the bitmap job: %v)\n", err)
		}
		reg.Close()
	}, nil
}

// bitmapPorts opens a bitmap Port on eth0 of every host; close them with
// the returned function.
func (d *demo) bitmapPorts(hosts []string) (map[string]*bitmap.Port, func(), error) {
	ps := map[string]*bitmap.Port{}
	closeAll := func() {
		for _, p := range ps {
			p.Close()
		}
	}
	for _, h := range hosts {
		var p *bitmap.Port
		if err := d.lab.Do(h, func() error {
			var err error
			p, err = bitmap.Open("eth0")
			return err
		}); err != nil {
			closeAll()
			return nil, nil, fmt.Errorf("bitmap port on %s:eth0: %w", h, err)
		}
		ps[h] = p
	}
	return ps, closeAll, nil
}

func demoBitmapAllReduce(d *demo) error {
	hosts := d.topo.Hosts()
	n := min(d.count, 1<<18) // the bitmap path is per-chunk host work: a quarter million is plenty to show it
	plan, err := bitmapam.Compute(d.topo, bitmapam.JobSpec{Kind: bitmapam.AllReduce, Op: demoOpKey(201), Tenant: 1,
		Endpoints: bitmapam.HostEndpoints(hosts, 1), Root: hosts[0], VectorLen: uint32(n)})
	if err != nil {
		return fmt.Errorf("bitmap plan: %w", err)
	}
	release, err := d.bitmapRegister(hosts[0], plan)
	if err != nil {
		return err
	}
	defer release()
	ps, closePorts, err := d.bitmapPorts(hosts)
	if err != nil {
		return err
	}
	defer closePorts()
	// Per-job authentication (protocol 8.6): a fresh key on every switch,
	// through its control socket as 'prismctl keys set' installs it, and
	// on every host; each frame of the job then carries its tag.
	key, removeKeys, err := d.bitmapKey(plan.Spec.Op.Job)
	if err != nil {
		return err
	}
	defer removeKeys()
	for _, h := range hosts {
		if err := ps[h].SetKey(plan.Spec.Op.Job, key); err != nil {
			return err
		}
	}
	gen := genSpec{seed: 21, format: "fp32", size: len(hosts)}
	ins := make([][]float32, len(hosts))
	outs := make([][]float32, len(hosts))
	errs := make([]error, len(hosts))
	stats := make([]bitmap.Stats, len(hosts))
	fmt.Fprintf(d.out, "   bitmap ALLREDUCE of %d FP32 x %d hosts (root %s)\n", n, len(hosts), hosts[0])
	ctx, cancel := context.WithTimeout(d.ctx, demoBitmapTimeout)
	defer cancel()
	var wg sync.WaitGroup
	start := time.Now()
	for i, h := range hosts {
		ins[i] = gen.vector(i, n).([]float32)
		outs[i] = make([]float32, n)
		for j := range outs[i] {
			outs[i][j] = float32(math.NaN())
		}
		wg.Add(1)
		go func() {
			defer wg.Done()
			stats[i], errs[i] = bitmap.AllReduce(ctx, ps[h], plan, h, map[int][]float32{i: ins[i]}, outs[i], nil)
		}()
	}
	wg.Wait()
	took := time.Since(start)
	var failed []error
	for i, err := range errs {
		if err != nil {
			failed = append(failed, fmt.Errorf("%s: %w", hosts[i], err))
		}
	}
	if len(failed) > 0 {
		return errors.Join(failed...)
	}
	fmt.Fprintf(d.out, "   time %v, algorithm bandwidth %s; host %s: %+v\n", took.Round(time.Millisecond),
		mbps(int64(n)*4, took), hosts[0], stats[0])
	who := make([]int, len(hosts))
	for i := range who {
		who[i] = i
	}
	res := verifyExact(d.ctx, ins, outs, who)
	if err := d.ctx.Err(); err != nil {
		return err
	}
	if res.differ > 0 {
		return fmt.Errorf("%d of %d results differ from the exact sum (first: %s)", res.differ, res.checked, res.first)
	}
	fmt.Fprintf(d.out, "   verified: %d results on each of the %d hosts (%d in all) equal the exact sum (math/big, rounded once) bit for bit\n",
		res.checked/max(len(hosts), 1), len(hosts), res.checked)
	var drops uint64
	for _, h := range hosts {
		drops += ps[h].AuthDrops()
	}
	fmt.Fprintf(d.out, "   authenticated: every frame carried the tag of job key %s; hosts dropped %d frames for a bad tag\n",
		authkey.Fingerprint(key), drops)
	return nil
}

// bitmapKey generates a job key and installs it on every prismd of the lab
// over its control socket (PUT /v1/keys/{job}); the returned function
// removes it again.
func (d *demo) bitmapKey(job uint64) ([]byte, func(), error) {
	key, err := authkey.Generate()
	if err != nil {
		return nil, nil, err
	}
	body, _ := json.Marshal(map[string]string{"key": authkey.Format(key)})
	defer clear(body)
	path := "/v1/keys/" + strconv.FormatUint(job, 10)
	var done []string
	remove := func() {
		for _, sock := range done {
			_, _, _ = doUnix(sock, "DELETE", path, nil)
		}
	}
	for _, sw := range d.topo.NodesOf(deploy.KindPrismd) {
		sock := d.lab.ControlSocket(sw)
		code, resp, err := doUnix(sock, "PUT", path, body)
		if err == nil && code != 200 {
			err = errors.New(refusal(sock, path, code, resp))
		}
		if err != nil {
			remove()
			return nil, nil, fmt.Errorf("installing the job key on %s: %w", sw, err)
		}
		done = append(done, sock)
	}
	fmt.Fprintf(d.out, "   job key %s installed on %d switches through their control sockets\n", authkey.Fingerprint(key), len(done))
	return key, remove, nil
}

// demoMoEExpert is expert e's function: cheap, different per expert, and
// deterministic, so the unicast reference computes the same thing.
func demoMoEExpert(e int, x []float32) []float32 {
	y := make([]float32, len(x))
	a := float32(e%5) + 0.75
	for i, v := range x {
		y[i] = a*v - float32(e)*0.125*float32(i%7) + v*v*1e-3
	}
	return y
}

func demoBitmapMoE(d *demo) error {
	hosts := d.topo.Hosts()
	const hidden, per, tokens = 128, 2, 64
	experts := len(hosts) * per
	k := min(2, experts)
	plan, err := bitmapam.Compute(d.topo, bitmapam.JobSpec{Kind: bitmapam.MoE, Op: demoOpKey(202), Tenant: 2,
		Endpoints: bitmapam.HostEndpoints(hosts, per), ActiveK: k, VectorLen: bitmap.MoEVectorLen(hidden, k)})
	if err != nil {
		return fmt.Errorf("MoE plan: %w", err)
	}
	release, err := d.bitmapRegister(hosts[0], plan)
	if err != nil {
		return err
	}
	defer release()
	ps, closePorts, err := d.bitmapPorts(hosts)
	if err != nil {
		return err
	}
	defer closePorts()
	fmt.Fprintf(d.out, "   %d tokens per host x %d hosts, hidden %d, %d experts (%d per host), top-%d random routing and weights\n",
		tokens, len(hosts), hidden, experts, per, k)
	ctx, cancel := context.WithTimeout(d.ctx, demoBitmapTimeout)
	defer cancel()
	var mu sync.Mutex
	seen := map[string]int{}
	moes := map[string]*bitmap.MoE{}
	defer func() {
		for _, m := range moes {
			m.Close()
		}
	}()
	var served sync.WaitGroup
	for _, h := range hosts {
		m, err := bitmap.NewMoE(ps[h], plan, h, nil)
		if err != nil {
			return fmt.Errorf("MoE endpoint on %s: %w", h, err)
		}
		moes[h] = m
		served.Add(1)
		go func() { // the experts of host h
			defer served.Done()
			for {
				toks, err := m.Receive(ctx)
				if err != nil {
					return
				}
				for _, tk := range toks {
					mu.Lock()
					seen[fmt.Sprintf("%s/%d/%d", tk.Source, tk.Token&0xFFFFFFFF, tk.Expert)]++
					mu.Unlock()
					_ = m.Return(ctx, tk, bitmap.Weighted(tk.Weight, demoMoEExpert(tk.Expert, tk.Hidden)))
				}
			}
		}()
	}
	errs := make([]error, len(hosts))
	var wg sync.WaitGroup
	start := time.Now()
	for i, h := range hosts {
		wg.Add(1)
		go func() {
			defer wg.Done()
			rng := rand.New(rand.NewPCG(uint64(i), 7))
			gen := genSpec{seed: uint64(100 + i), format: "fp32", size: 1}
			x := make([][]float32, tokens)
			tk := make([][]int, tokens)
			w := make([][]float32, tokens)
			for t := range x {
				x[t] = gen.vector(t, hidden).([]float32)
				tk[t] = rng.Perm(experts)[:k]
				w[t] = make([]float32, k)
				for j := range w[t] {
					w[t][j] = rng.Float32()
				}
			}
			hd, err := moes[h].Dispatch(ctx, x, tk, w)
			if err != nil {
				errs[i] = fmt.Errorf("%s: dispatch: %w", h, err)
				return
			}
			out, err := hd.Combine(ctx)
			if err != nil {
				errs[i] = fmt.Errorf("%s: combine: %w", h, err)
				return
			}
			want, err := bitmap.ReferenceMoE(x, tk, w, demoMoEExpert, nil)
			if err != nil {
				errs[i] = fmt.Errorf("%s: reference: %w", h, err)
				return
			}
			for t := range want {
				for j := range want[t] {
					if math.Float32bits(want[t][j]) != math.Float32bits(out[t][j]) {
						errs[i] = fmt.Errorf("%s token %d element %d: combined %g, unicast reference %g", h, t, j, out[t][j], want[t][j])
						return
					}
				}
				for _, e := range tk[t] {
					mu.Lock()
					c := seen[fmt.Sprintf("%s/%d/%d", h, t, e)]
					mu.Unlock()
					if c != 1 {
						errs[i] = fmt.Errorf("%s token %d reached expert %d %d times (want exactly once)", h, t, e, c)
						return
					}
				}
			}
		}()
	}
	wg.Wait()
	took := time.Since(start)
	if err := errors.Join(errs...); err != nil {
		return err
	}
	fmt.Fprintf(d.out, "   dispatch+combine of %d tokens (%d expert computations) in %v\n", tokens*len(hosts), tokens*len(hosts)*k, took.Round(time.Millisecond))
	fmt.Fprintf(d.out, "   verified: every combined token equals the unicast reference bit for bit; every (token, expert) computed exactly once\n")
	return nil
}

func demoBitmapMcast(d *demo) error {
	hosts := d.topo.Hosts()
	if len(hosts) < 2 {
		return errors.New("multicast needs at least two hosts")
	}
	bin, err := os.Executable()
	if err != nil {
		return fmt.Errorf("finding prismctl for the sender and receivers: %w", err)
	}
	dir, err := os.MkdirTemp("", "prismd-demo-mcast-")
	if err != nil {
		return err
	}
	defer os.RemoveAll(dir)
	size := 2 << 20
	data := make([]byte, size)
	rng := rand.New(rand.NewPCG(5, 5))
	for i := range data {
		data[i] = byte(rng.Uint32())
	}
	src := filepath.Join(dir, "payload.bin")
	if err := os.WriteFile(src, data, 0o644); err != nil {
		return err
	}
	fmt.Fprintf(d.out, "   %d-byte random file from %s to %s (prismctl mcast send/recv)\n", size, hosts[0], strings.Join(hosts[1:], ","))
	const job = 301
	topo := d.lab.TopologyFile()
	outs := make([]bytes.Buffer, len(hosts))
	type proc struct {
		host string
		wait func() error
		kill func()
	}
	var recvs []proc
	killAll := func() {
		for _, r := range recvs {
			r.kill()
		}
	}
	for i, h := range hosts[1:] {
		c := d.lab.Exec(h, bin, "mcast", "recv", "--out", filepath.Join(dir, h+".bin"), "--topology", topo, "--node", h,
			"--job", strconv.Itoa(job), "--timeout", "2m")
		c.Stdout, c.Stderr = &outs[i+1], &outs[i+1]
		if err := c.Start(); err != nil {
			killAll()
			return fmt.Errorf("receiver on %s: %w", h, err)
		}
		recvs = append(recvs, proc{h, c.Wait, func() { c.Process.Kill() }}) // the PID this demo started
	}
	// Receivers must have their sockets open before the first window.
	select {
	case <-time.After(time.Second):
	case <-d.ctx.Done():
		killAll()
		for _, r := range recvs {
			r.wait()
		}
		return d.ctx.Err()
	}
	s := d.lab.Exec(hosts[0], bin, "mcast", "send", "--file", src, "--receivers", strings.Join(hosts[1:], ","),
		"--topology", topo, "--node", hosts[0], "--job", strconv.Itoa(job))
	s.Stdout, s.Stderr = &outs[0], &outs[0]
	start := time.Now()
	if err := s.Start(); err != nil {
		killAll()
		return fmt.Errorf("sender on %s: %w", hosts[0], err)
	}
	// Bound the whole transfer; an interrupt or the bound kills what this
	// demo started.
	done := make(chan struct{})
	go func() {
		select {
		case <-done:
		case <-d.ctx.Done():
			s.Process.Kill()
			killAll()
		case <-time.After(demoBitmapTimeout):
			s.Process.Kill()
			killAll()
		}
	}()
	serr := s.Wait()
	took := time.Since(start)
	if serr != nil {
		killAll()
	}
	var failed []error
	for i, r := range recvs {
		if err := r.wait(); err != nil {
			failed = append(failed, fmt.Errorf("receiver %s: %v: %s", r.host, err, lastLine(outs[i+1].Bytes())))
		}
	}
	close(done)
	if serr != nil {
		return errors.Join(append([]error{fmt.Errorf("sender %s: %v:\n%s", hosts[0], serr, outs[0].String())}, failed...)...)
	}
	if len(failed) > 0 {
		return errors.Join(failed...)
	}
	for _, l := range strings.Split(strings.TrimSpace(outs[0].String()), "\n") {
		if l = strings.TrimSpace(l[strings.LastIndexByte(l, '\r')+1:]); strings.HasPrefix(l, "sent ") || strings.HasPrefix(l, "windows ") || strings.HasPrefix(l, "ACK frames") {
			fmt.Fprintf(d.out, "   %s: %s\n", hosts[0], l)
		}
	}
	for _, h := range hosts[1:] {
		got, err := os.ReadFile(filepath.Join(dir, h+".bin"))
		if err != nil {
			return fmt.Errorf("receiver %s wrote no file: %w", h, err)
		}
		if !bytes.Equal(got, data) {
			return fmt.Errorf("receiver %s: the file differs from what %s sent (%d bytes, want %d)", h, hosts[0], len(got), len(data))
		}
	}
	fmt.Fprintf(d.out, "   verified: %d receivers hold a byte-identical copy (compared with the original here); the sender ran %v "+
		"(the step's other seconds: starting the receivers as processes, 1 s for their sockets to open, their exit)\n", len(hosts)-1, took.Round(time.Millisecond))
	return nil
}
