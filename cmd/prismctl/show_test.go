package main

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/prismd/prismd/control"
	"github.com/prismd/prismd/control/am"
	"github.com/prismd/prismd/deploy"
	"github.com/prismd/prismd/engine"
	"github.com/prismd/prismd/engine/bitmap"
	"github.com/prismd/prismd/stream"
)

func TestShowOverUnixSocket(t *testing.T) {
	sock := filepath.Join(t.TempDir(), "p.sock")
	ln, err := net.Listen("unix", sock)
	if err != nil {
		t.Fatal(err)
	}
	ops := control.OpsResponse{Workers: 1, Ops: []control.OpView{{Worker: 0, OpSnapshot: engine.OpSnapshot{
		Job: 7, Op: 3, OpGen: 1, Role: "SINGLE", Collective: "ALLREDUCE", State: "FAILED", VectorLen: 100,
		Error: "CONTRIBUTOR stream 101 silent", FailCause: "TIMEOUT", StateMs: 4000, ExpiresInMs: 71000,
		Inbound: []engine.InboundStream{{Kind: "CONTRIBUTOR", Stream: 101, PeerMAC: "02:4b:00:00:01:02", Committed: 40,
			Holes: []stream.Hole{{Start: 50, End: 60}}}},
	}}}, Bitmap: []*bitmap.Snapshot{{Worker: 1, Ctxs: []bitmap.CtxSnapshot{{Job: 8, Op: 2, OpGen: 1, Role: "INTERNAL", State: "ACTIVE",
		ABM: "{8192,8193,8194}/65600", Boundary: "{65538}/65600",
		Partials: []bitmap.MissRecord{{Token: 1, Missing: "{8197,8198,11364}/65600"}}}}}}}
	mux := http.NewServeMux()
	mux.HandleFunc("/v1/ops", func(w http.ResponseWriter, r *http.Request) { json.NewEncoder(w).Encode(ops) })
	mux.HandleFunc("/v1/status", func(w http.ResponseWriter, r *http.Request) {
		w.Write([]byte(`{"version":"x","ports":[{"index":0,"name":"p0","mac":"02:00:00:00:00:01","mtu":1500,"rx_frames":5,"tx_frames":6,"drops":{"short_frame":1,"kernel":53489,"fault_ingress":7},"rx_path":"lane","lane_switches":2,"fault":"ingress drop 40%","link":"up"},` +
			`{"index":1,"name":"p1","mac":"02:00:00:00:00:02","mtu":1500,"rx_frames":0,"tx_frames":0,"drops":{},"link":"without carrier","link_since_unix_ms":` +
			fmt.Sprint(time.Now().Add(-5*time.Second).UnixMilli()) + `}],"frames":{},"mac_table_entries":3}`))
	})
	mux.HandleFunc("/v1/macs", func(w http.ResponseWriter, r *http.Request) {
		// Deliberately out of order: prismctl sorts.
		w.Write([]byte(`{"aging_seconds":300,"learned":3,"local":3,"entries":[
			{"mac":"0a:00:00:00:00:0b","port":"p10","port_index":2,"age_seconds":1,"local":false},
			{"mac":"02:ee:00:00:00:01","port":"","port_index":-1,"age_seconds":0,"local":true},
			{"mac":"0a:00:00:00:00:0c","port":"p0","port_index":0,"age_seconds":7,"local":false},
			{"mac":"0a:00:00:00:00:0a","port":"p0","port_index":0,"age_seconds":12,"local":false},
			{"mac":"02:00:00:00:00:10","port":"p0","port_index":0,"age_seconds":0,"local":true},
			{"mac":"02:00:00:00:00:12","port":"p10","port_index":2,"age_seconds":0,"local":true}]}`))
	})
	srv := &http.Server{Handler: mux}
	go srv.Serve(ln)
	defer srv.Close()

	body, err := getUnix(sock, "/v1/ops")
	if err != nil {
		t.Fatal(err)
	}
	var out bytes.Buffer
	if err := printOps(&out, body, nil); err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{"op 7-0-0-3-1  job 7 group 0/0 op 3/1", "FAILED", "error (TIMEOUT): CONTRIBUTOR stream 101 silent", "[50,60)",
		"failed 4s ago, awaiting ABORT; the node retires it as abandoned by its AM in 1m11s",
		"bitmap job 8 group 0/0 op 2/1", "boundary {65538}/65600", "PARTIAL token 1 missing {8197,8198,11364}/65600"} {
		if !strings.Contains(out.String(), want) {
			t.Fatalf("ops output lacks %q:\n%s", want, out.String())
		}
	}
	body, err = getUnix(sock, "/v1/status")
	if err != nil {
		t.Fatal(err)
	}
	out.Reset()
	if err := printPorts(&out, body); err != nil || !strings.Contains(out.String(), "fault_ingress=7 kernel=53489 short_frame=1") ||
		!strings.Contains(out.String(), "port p0 impairs its frames on purpose (fault: in its config): ingress drop 40%") ||
		!strings.Contains(out.String(), "lane (2 path changes)") || !strings.Contains(out.String(), "RX_PATH") ||
		!strings.Contains(out.String(), "  without carrier (5s)  ") || !strings.Contains(strings.Split(out.String(), "\n")[1], "  up  ") {
		t.Fatalf("ports: %v\n%s", err, out.String())
	}
	if lines := strings.Split(strings.TrimSpace(out.String()), "\n"); len(lines) != 4 || !strings.Contains(lines[2], " - ") {
		t.Fatalf("ports: a port with one receive path must show '-':\n%s", out.String())
	}
	body, err = getUnix(sock, "/v1/macs")
	if err != nil {
		t.Fatal(err)
	}
	out.Reset()
	if err := printMACs(&out, body); err != nil {
		t.Fatal(err)
	}
	// Port index order (p10 is index 2, after p0), local first, then MAC;
	// the node MAC last.
	want := [][]string{
		{"MAC", "PORT", "AGE", "TYPE"},
		{"02:00:00:00:00:10", "p0", "-", "local"},
		{"0a:00:00:00:00:0a", "p0", "12s", "learned"},
		{"0a:00:00:00:00:0c", "p0", "7s", "learned"},
		{"02:00:00:00:00:12", "p10", "-", "local"},
		{"0a:00:00:00:00:0b", "p10", "1s", "learned"},
		{"02:ee:00:00:00:01", "(node)", "-", "local"},
	}
	lines := strings.Split(strings.TrimSpace(out.String()), "\n")
	if len(lines) != len(want)+1 {
		t.Fatalf("macs: %d lines, want %d:\n%s", len(lines), len(want)+1, out.String())
	}
	for i, w := range want {
		if got := strings.Fields(lines[i]); strings.Join(got, " ") != strings.Join(w, " ") {
			t.Errorf("macs line %d: %q, want %q", i, lines[i], w)
		}
	}
	if last := lines[len(lines)-1]; last != "3 learned, 3 local MAC table entries (aging 300s)" {
		t.Errorf("macs count line %q", last)
	}
	if code := runShow([]string{"bogus"}); code != 2 {
		t.Fatalf("bogus subject: exit %d", code)
	}
}

// TestShowAM prints the AM's operations from its GET /v1/ops: the
// persistent one's kind, the failed one's error, each node's state and
// what it waits for (by name, else by stream).
func TestShowAM(t *testing.T) {
	ms := 3
	l := am.OpList{Ops: []am.OpStatus{
		{ID: "7-0-1-3-100", Seq: 4, Collective: "allreduce", Size: 4, Persistent: true, State: "active", Tree: "TREE", Root: "s1",
			InvocationLen: 500, RanksDone: []int{1}, Nodes: []am.NodeStatus{{Name: "s1", Role: "ROOT", State: "ACTIVE", CompletedElements: 600},
				{Name: "l2", Role: "LEAF", Parent: "s1", State: "FAILED", MissingStream: &ms, MissingFrom: 600, MissingFromWhom: "rank 3 (h4)", FailCause: "TIMEOUT"},
				{Name: "l1", Role: "LEAF", Parent: "s1", State: "ACTIVE", MissingStream: &ms, MissingFrom: 900},
				{Name: "l3", Role: "LEAF", Parent: "s1", State: "FAILED", MissingStream: &ms, MissingFromWhom: "the parent s1", FailCause: "PEER_FAILED"}}},
		{ID: "7-0-1-4-100", Seq: 5, Collective: "reduce", Size: 2, State: "failed", Tree: "SINGLE", Root: "sw1",
			Error: &am.APIError{Code: am.CodeOperationFailed, Message: "rank 1 (h2) sent no keepalive for 7.5s"}},
		{ID: "7-0-1-5-100", Seq: 6, Collective: "allreduce", Size: 2, Persistent: true, State: "released", Tree: "SINGLE", Root: "sw9",
			RanksDone: []int{0, 1}, Nodes: []am.NodeStatus{{Name: "sw9", Role: "SINGLE", State: "ABORTED", CompletedElements: 1870000,
				MissingStream: &ms, MissingFrom: 1900000, MissingFromWhom: "rank 1 (h2)"}}},
		{ID: "7-0-1-6-100", Seq: 7, Collective: "allreduce", Size: 3, Persistent: true, State: "draining", Tree: "SINGLE", Root: "sw9",
			Holding: "rank 2 (h3) at sw9", RanksDone: []int{0}, Draining: &am.Draining{Rank: 0, Invocations: 12, Waiting: []int{1, 2}, LeftMS: 1250}},
	}, Barriers: []am.Barrier{{Job: 9, Group: 1, Seq: 2, Collective: "allreduce", Size: 4, Arrived: []int{0, 2}, Missing: []int{1, 3}, WaitingMS: 3140}}}
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path != "/v1/ops" {
			http.NotFound(w, r)
			return
		}
		json.NewEncoder(w).Encode(l)
	}))
	defer srv.Close()
	got, err := am.NewClient(srv.URL).Ops(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	var b bytes.Buffer
	printAMOps(&b, got)
	out := b.String()
	for _, want := range []string{
		"op 7-0-1-3-100  seq 4  persistent allreduce of 4 ranks  active  on a tree rooted at s1",
		"ranks that reported (done or failed): 1",
		"l2    LEAF  s1      FAILED",
		"timed out on rank 3 (h4) from element 100 of invocation 2 (600 in the operation)",
		"told FAILED by the parent s1",
		"stream 3 from element 400 of invocation 2 (900 in the operation)",
		"op 7-0-1-4-100  seq 5  reduce of 2 ranks  failed",
		"error (operation_failed): rank 1 (h2) sent no keepalive for 7.5s",
		"barrier job 9 group 1 seq 2  allreduce of 4 ranks  waiting 3.1s for ranks 1 3 (arrived: 0 2)",
		"sw9   SINGLE  -       ENDED (freed by every rank: its ABORT is a persistent collective's normal end)  -", // a persistent operation's end looked like a failure
		"op 7-0-1-6-100  seq 7  persistent allreduce of 3 ranks  draining",
		"draining: rank 0 failed locally after 12 invocations; the ABORT waits for ranks 1-2 to report as many (at most 1.25s more)",
		"furthest behind: rank 2 (h3) at sw9 (the waits from the root lead there",
	} {
		if !strings.Contains(out, want) {
			t.Errorf("show am output lacks %q:\n%s", want, out)
		}
	}
	if strings.Contains(out, "1870000") || strings.Contains(out, "1900000") {
		t.Errorf("a finished persistent operation shows its last keepalive's progress:\n%s", out)
	}
	// The AM's URL from the environment, as the ranks take it.
	t.Setenv("PRISM_COORDINATOR", srv.URL)
	if code := runShow([]string{"am", "--json"}); code != 0 {
		t.Errorf("show am with PRISM_COORDINATOR set: exit %d, want 0", code)
	}
	if code := showAM("", false, amFilter{job: -1}); code != 2 {
		t.Errorf("show am without --coordinator: exit %d, want 2", code)
	}
}

// TestShowOpsNamesStreams: with the AM's view, a switch's streams are
// named by rank or switch (FROM/TO columns, the waiting-for line); an
// operation the AM does not know, and an unreachable AM, leave the
// switch's view as it is.
func TestShowOpsNamesStreams(t *testing.T) {
	ops := control.OpsResponse{Workers: 1, Ops: []control.OpView{{OpSnapshot: engine.OpSnapshot{
		Job: 7, Group: 1, GroupGen: 2, Op: 3, OpGen: 9, Role: "LEAF", Collective: "ALLREDUCE", State: "ACTIVE", VectorLen: 100,
		WaitingFor: []string{"CONTRIBUTOR stream 5 (endpoint 6, 02:4b:00:00:01:02, port 1): elements from 40"},
		Inbound: []engine.InboundStream{
			{Kind: "CONTRIBUTOR", Stream: 4, PeerMAC: "02:4b:00:00:01:01", Committed: 100},
			{Kind: "CONTRIBUTOR", Stream: 5, PeerMAC: "02:4b:00:00:01:02", Committed: 40},
			{Kind: "RESULT_IN", Stream: 8, PeerMAC: "02:4b:00:00:00:09"}},
		Outbound: []engine.OutboundStream{{Kind: "PARENT", Stream: 5, PeerMAC: "02:4b:00:00:00:09"}},
	}}}}
	l := am.OpList{Ops: []am.OpStatus{{ID: "7-1-2-3-9", Op: am.OpIdentity{Job: 7, Group: 1, GroupGen: 2, OpID: 3, OpGen: 9},
		Nodes: []am.NodeStatus{
			{Name: "l1", Streams: []am.StreamPeer{{Kind: "CONTRIBUTOR", Stream: 4, Peer: "rank 0 (h1)"},
				{Kind: "CONTRIBUTOR", Stream: 5, Peer: "rank 1 (h2)"}, {Kind: "RESULT_IN", Stream: 8, Peer: "the RESULT from s1"}}},
			// Stream 5 under another kind at another node: the key is (kind, stream).
			{Name: "s1", Streams: []am.StreamPeer{{Kind: "CONTRIBUTOR", Stream: 9, Peer: "subtree l1"}, {Kind: "PARENT", Stream: 5, Peer: "the parent s1"}}},
		}}}}
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { json.NewEncoder(w).Encode(l) }))
	defer srv.Close()
	body, _ := json.Marshal(ops)
	var out bytes.Buffer
	if err := printOps(&out, body, amStreamNames(srv.URL)); err != nil {
		t.Fatal(err)
	}
	rows := map[string]string{}
	for _, line := range strings.Split(out.String(), "\n") {
		if f := strings.Fields(line); len(f) > 2 {
			rows[f[0]+" "+f[1]] = line
		}
	}
	for k, want := range map[string]string{"IN STREAM": "FROM", "OUT STREAM": "TO", "CONTRIBUTOR 4": "rank 0 (h1)",
		"CONTRIBUTOR 5": "rank 1 (h2)", "RESULT_IN 8": "the RESULT from s1", "PARENT 5": "the parent s1"} {
		if !strings.Contains(rows[k], want) {
			t.Errorf("row %q lacks %q:\n%s", k, want, out.String())
		}
	}
	if want := "waiting for CONTRIBUTOR stream 5 = rank 1 (h2) (endpoint 6"; !strings.Contains(out.String(), want) {
		t.Errorf("output lacks %q:\n%s", want, out.String())
	}
	// Another generation of the operation: nothing to name.
	ops.Ops[0].OpGen = 10
	body, _ = json.Marshal(ops)
	out.Reset()
	if err := printOps(&out, body, amStreamNames(srv.URL)); err != nil {
		t.Fatal(err)
	}
	if strings.Contains(out.String(), "rank ") || !strings.Contains(rows["CONTRIBUTOR 4"], "02:4b:00:00:01:01") {
		t.Errorf("an operation the AM does not know got names:\n%s", out.String())
	}
	// An AM that does not answer: no names and no FROM column.
	srv.Close()
	out.Reset()
	if err := printOps(&out, body, amStreamNames(srv.URL)); err != nil || strings.Contains(out.String(), "FROM") {
		t.Errorf("unreachable AM: %v\n%s", err, out.String())
	}
}

// TestShowNetNSStateDir: 'show --netns' finds a lab brought up with
// --state-dir when given the same --state-dir, and says to pass it when not.
func TestShowNetNSStateDir(t *testing.T) {
	state := t.TempDir()
	if err := os.Mkdir(filepath.Join(state, "wkshow"), 0o755); err != nil {
		t.Fatal(err)
	}
	ln, err := net.Listen("unix", filepath.Join(state, "wkshow", "sw1.sock"))
	if err != nil {
		t.Fatal(err)
	}
	mux := http.NewServeMux()
	mux.HandleFunc("/v1/status", func(w http.ResponseWriter, r *http.Request) {
		w.Write([]byte(`{"version":"x","ports":[{"index":0,"name":"p1","mac":"02:00:00:00:00:01","mtu":1500,"rx_frames":5,"tx_frames":6,"drops":{}}],"frames":{},"mac_table_entries":0}`))
	})
	srv := &http.Server{Handler: mux}
	go srv.Serve(ln)
	defer srv.Close()
	ns := deploy.NetNSName("wkshow", "sw1")
	stdout, stderr, rc := prismctl(t, "show", "ports", "--netns", ns, "--state-dir", state)
	if rc != 0 || !strings.Contains(stdout, "02:00:00:00:00:01") {
		t.Errorf("show ports --netns %s --state-dir: exit %d, want 0 and the port table:\n%s%s", ns, rc, stdout, stderr)
	}
	_, stderr, rc = prismctl(t, "show", "ports", "--netns", ns)
	if rc != 1 || !strings.Contains(stderr, "--state-dir") {
		t.Errorf("show ports --netns %s without --state-dir: exit %d, want 1 and a word on --state-dir:\n%s", ns, rc, stderr)
	}
}

// TestShowAMFilter: the AM keeps every finished operation for 10 minutes,
// and show am listed all of them (1790 after one bench run); by default it
// lists the unfinished ones and the last few finished, and says how many
// it left out.
func TestShowAMFilter(t *testing.T) {
	var l am.OpList
	for seq := 0; seq < 25; seq++ {
		st := "released"
		if seq%5 == 0 {
			st = "failed"
		}
		if seq == 3 {
			st = "active"
		}
		if seq == 7 {
			st = "unused" // a prepared operation nobody took: finished
		}
		// Ended in another order than the list's (seq restarts with each
		// run of a job): a permutation of the seqs.
		var ended int64
		if st != "active" {
			ended = 1000 + int64((seq*7)%25)
		}
		l.Ops = append(l.Ops, am.OpStatus{ID: fmt.Sprintf("1-0-1-%d-7", seq), Op: am.OpIdentity{Job: 1}, Seq: uint64(seq), State: st, EndedUnixMs: ended})
	}
	l.Ops = append(l.Ops, am.OpStatus{ID: "2-0-1-0-7", Op: am.OpIdentity{Job: 2}, State: "released", EndedUnixMs: 2000}) // the newest
	l.Barriers = []am.Barrier{{Job: 1}, {Job: 2}}
	ids := func(l am.OpList) (r []string) {
		for _, o := range l.Ops {
			r = append(r, o.ID)
		}
		return r
	}
	// Naive oracle: unfinished ones in list order, then the 10 that ended
	// last, in the order they ended.
	c := l
	c.Ops = slices.Clone(l.Ops)
	released, failed := amFilter{job: -1}.apply(&c)
	var want []string
	var kept []am.OpStatus
	wantFailed := 0
	for _, o := range l.Ops {
		newer := 0
		for _, p := range l.Ops {
			if p.State != "active" && p.EndedUnixMs > o.EndedUnixMs {
				newer++
			}
		}
		switch {
		case o.State == "active":
			want = append(want, o.ID)
		case newer < recentFinished:
			kept = append(kept, o)
		case o.State == "failed":
			wantFailed++
		}
	}
	for len(kept) > 0 { // selection by end time
		k := 0
		for i := range kept {
			if kept[i].EndedUnixMs < kept[k].EndedUnixMs {
				k = i
			}
		}
		want = append(want, kept[k].ID)
		kept = append(kept[:k], kept[k+1:]...)
	}
	if got := ids(c); !slices.Equal(got, want) || released+failed != 25-recentFinished || failed != wantFailed || !slices.Contains(got, "2-0-1-0-7") {
		t.Errorf("default: %v (left out %d released, %d failed), want %v (15 left out, %d failed), the newest (2-0-1-0-7) among them", got, released, failed, want, wantFailed)
	}
	c = l
	c.Ops, c.Barriers = slices.Clone(l.Ops), slices.Clone(l.Barriers)
	if r, f := (amFilter{job: 2}).apply(&c); !slices.Equal(ids(c), []string{"2-0-1-0-7"}) || len(c.Barriers) != 1 || c.Barriers[0].Job != 2 || r+f != 0 {
		t.Errorf("--job 2: %v, barriers %+v, left out %d", ids(c), c.Barriers, r+f)
	}
	c = l
	c.Ops = slices.Clone(l.Ops)
	if r, f := (amFilter{job: -1, all: true}).apply(&c); len(c.Ops) != len(l.Ops) || r+f != 0 {
		t.Errorf("--all: %d of %d, left out %d", len(c.Ops), len(l.Ops), r+f)
	}
}

// TestSocketForStoppedNode: a lab node whose prismd exited (its socket
// removed, its pid file left) is named as not running, with the commands
// that show and restart it, instead of 'no control socket ... pass
// --state-dir' for a state directory that was right.
func TestSocketForStoppedNode(t *testing.T) {
	dir := t.TempDir()
	if err := os.MkdirAll(filepath.Join(dir, "lb"), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(dir, "lb", "sw1.pid"), []byte("4242\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	_, err := socketForNetNSIn(dir, deploy.NetNSName("lb", "sw1"))
	if err == nil || !strings.Contains(err.Error(), "the prismd of lab lb node sw1 is not running (pid 4242") ||
		!strings.Contains(err.Error(), "prismctl lab up --state-dir "+dir) {
		t.Fatalf("%v, want sw1 named as not running with the restart command", err)
	}
	if _, err := socketForNetNSIn(dir, deploy.NetNSName("lb", "sw2")); err == nil || !strings.Contains(err.Error(), "no control socket") {
		t.Fatalf("unknown node: %v", err)
	}
}

// TestSocketForHostNode: a host's namespace of a lab that is up is named
// as a host, with the lab's switches, not "is the lab up?".
func TestSocketForHostNode(t *testing.T) {
	dir := t.TempDir()
	lab := filepath.Join(dir, "hl")
	if err := os.MkdirAll(lab, 0o755); err != nil {
		t.Fatal(err)
	}
	topo, err := deploy.Load("single")
	if err != nil {
		t.Fatal(err)
	}
	b, err := os.ReadFile(filepath.Join("..", "..", "deploy", "lab", "single.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	for _, f := range []struct{ name, body string }{{"topology.yaml", string(b)}, {"sw1.sock", ""}} {
		if err := os.WriteFile(filepath.Join(lab, f.name), []byte(f.body), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	if topo.Nodes["h1"] == nil {
		t.Fatal("the single lab has no h1")
	}
	_, err = socketForNetNSIn(dir, deploy.NetNSName("hl", "h1"))
	if err == nil || !strings.Contains(err.Error(), "is node h1 of lab hl, which runs no prismd (a host)") ||
		!strings.Contains(err.Error(), deploy.NetNSName("hl", "sw1")) {
		t.Fatalf("%v, want h1 named as a host and the switch's namespace given", err)
	}
	if _, err := socketForNetNSIn(dir, deploy.NetNSName("hl", "h99")); err == nil || !strings.Contains(err.Error(), "no control socket") {
		t.Fatalf("a node the lab lacks: %v", err)
	}
}
