package conformance

// Lab plumbing of the rank tests (rank_*_test.go): the spine-leaf lab, the
// real Aggregation Manager (`prismctl am`, started as a user would, in h1's
// namespace) and an HTTP/JSON client of the runtime channel written only
// from docs/protocol.md section 9. Every identifier of these files starts
// with rk so the package's other test files can grow beside them.

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"sort"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/prismd/prismd/deploy"
	"github.com/prismd/prismd/deploy/labtest"
)

const (
	rkAMPort         = "7000"
	rkBarrierTimeout = 3 * time.Second // passed to prismctl am --barrier-timeout
)

// rkEnv is one spine-leaf lab with the AM running on h1 and one raw
// socket per host (rank r runs on host r+1).
type rkEnv struct {
	t        *testing.T
	lab      *deploy.Lab
	bin      string
	hosts    []string
	nics     []*nic
	amURL    string
	amStart  time.Time
	amLog    string
	amPID    int
	mu       sync.Mutex
	nextJob  uint64
	fromCaps map[string][]capRecord // node -> capability records (CAPS_QUERY)
}

// rkBinaries returns a directory holding prismd and prismctl: $PRISMD_BIN
// when it holds both (make test sets it to bin/), else a fresh build of
// this module (go build -o DIR/ ./cmd/...) into a temporary directory.
func rkBinaries(t *testing.T) string {
	t.Helper()
	if d := os.Getenv("PRISMD_BIN"); d != "" {
		if st, err := os.Stat(d); err == nil && !st.IsDir() {
			d = filepath.Dir(d)
		}
		_, e1 := os.Stat(filepath.Join(d, "prismd"))
		_, e2 := os.Stat(filepath.Join(d, "prismctl"))
		if e1 == nil && e2 == nil {
			return d
		}
	}
	out, err := exec.Command("go", "env", "GOMOD").Output()
	if err != nil {
		t.Fatalf("go env GOMOD: %v", err)
	}
	root := filepath.Dir(strings.TrimSpace(string(out)))
	dir := t.TempDir()
	start := time.Now()
	cmd := exec.Command("go", "build", "-o", dir+"/", "./cmd/...")
	cmd.Dir = root
	if b, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("go build ./cmd/...: %v: %s", err, b)
	}
	t.Logf("built prismd and prismctl in %v", time.Since(start).Round(time.Millisecond))
	return dir
}

func newRkEnv(t *testing.T) *rkEnv {
	labtest.RequireRoot(t)
	bin := rkBinaries(t)
	start := time.Now()
	lab := labtest.UpWith(t, "spine-leaf", &deploy.Options{Prismd: filepath.Join(bin, "prismd")})
	t.Logf("spine-leaf lab %s up in %v", lab.Topo.Name, time.Since(start).Round(time.Millisecond))
	e := &rkEnv{t: t, lab: lab, bin: bin, hosts: []string{"h1", "h2", "h3", "h4"},
		nextJob: 0xF00D_0000_0000_0001 + uint64(time.Now().UnixNano()&0xFFFF)<<16}
	for _, h := range e.hosts {
		e.nics = append(e.nics, openNIC(t, lab, h, "eth0"))
	}
	e.startAM(t)
	return e
}

// job returns a fresh Job ID above 2^53, so a coordinator that parses
// JSON numbers as float64 shows (9: Job ID is an unsigned 64-bit decimal).
func (e *rkEnv) job() uint64 {
	e.mu.Lock()
	defer e.mu.Unlock()
	e.nextJob += 3
	return e.nextJob
}

func (e *rkEnv) startAM(t *testing.T) {
	e.amLog = filepath.Join(t.TempDir(), "am.log")
	logf, err := os.Create(e.amLog)
	if err != nil {
		t.Fatal(err)
	}
	addr := "10.0.0.1:" + rkAMPort
	cmd := e.lab.Exec("h1", filepath.Join(e.bin, "prismctl"), "am",
		"--topology", e.lab.TopologyFile(), "--listen", addr, "--iface", "eth0",
		"--barrier-timeout", rkBarrierTimeout.String())
	cmd.Stdout, cmd.Stderr = logf, logf
	e.amStart = time.Now()
	if err := cmd.Start(); err != nil {
		t.Fatalf("start prismctl am: %v", err)
	}
	logf.Close()
	e.amPID = cmd.Process.Pid
	done := make(chan struct{})
	go func() { cmd.Wait(); close(done) }()
	t.Cleanup(func() {
		// Stop only the process this test started, by its PID.
		cmd.Process.Signal(syscall.SIGTERM)
		select {
		case <-done:
		case <-time.After(3 * time.Second):
			cmd.Process.Kill()
			<-done
		}
		if t.Failed() {
			b, _ := os.ReadFile(e.amLog)
			if len(b) > 12000 {
				b = b[len(b)-12000:]
			}
			t.Logf("AM log (tail):\n%s", b)
		}
	})
	e.amURL = "http://" + addr
	deadline := time.Now().Add(10 * time.Second)
	for {
		code, _, _, err := e.do("h2", http.MethodGet, "/v1/ops", nil, 2*time.Second)
		if err == nil && code == http.StatusOK {
			break
		}
		select {
		case <-done:
			b, _ := os.ReadFile(e.amLog)
			t.Fatalf("prismctl am exited: %s", b)
		default:
		}
		if time.Now().After(deadline) {
			b, _ := os.ReadFile(e.amLog)
			t.Fatalf("AM not answering on %s after 10 s (last: %d %v): %s", addr, code, err, b)
		}
		time.Sleep(50 * time.Millisecond)
	}
	t.Logf("AM (pid %d) answers on %s in h1's namespace after %v", e.amPID, addr, time.Since(e.amStart).Round(time.Millisecond))
}

// do sends one HTTP request from host's namespace; body is raw bytes
// (string / []byte) or a value marshalled as JSON.
func (e *rkEnv) do(host, method, path string, body any, timeout time.Duration) (int, http.Header, []byte, error) {
	var rd io.Reader
	switch b := body.(type) {
	case nil:
	case []byte:
		rd = bytes.NewReader(b)
	case string:
		rd = strings.NewReader(b)
	default:
		j, err := json.Marshal(b)
		if err != nil {
			return 0, nil, nil, err
		}
		rd = bytes.NewReader(j)
	}
	ctx, cancel := context.WithTimeout(context.Background(), timeout)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, method, e.amURL+path, rd)
	if err != nil {
		return 0, nil, nil, err
	}
	if rd != nil {
		req.Header.Set("Content-Type", "application/json")
	}
	cl := &http.Client{Transport: &http.Transport{DisableKeepAlives: true,
		DialContext: func(ctx context.Context, network, addr string) (net.Conn, error) {
			return e.lab.Dial(ctx, host, network, addr)
		}}}
	resp, err := cl.Do(req)
	if err != nil {
		return 0, nil, nil, err
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	return resp.StatusCode, resp.Header, b, err
}

// ---- the runtime channel's JSON (9.1-9.4, 9.7) ----

type rkOpJSON struct {
	Job      uint64 `json:"job"`
	Group    uint16 `json:"group"`
	GroupGen uint16 `json:"group_gen"`
	OpID     uint16 `json:"op_id"`
	OpGen    uint32 `json:"op_gen"`
}

func (o rkOpJSON) ident() ident {
	return ident{Job: o.Job, Group: o.Group, GroupGen: o.GroupGen, Op: o.OpID, OpGen: o.OpGen}
}

type rkStreamJSON struct {
	StreamID    uint16 `json:"stream_id"`
	SrcEndpoint uint16 `json:"src_endpoint"`
	DstEndpoint uint16 `json:"dst_endpoint"`
}

type rkWindowJSON struct {
	Intervals   uint16 `json:"intervals"`
	ReplayDepth uint16 `json:"replay_depth"`
	Bytes       uint32 `json:"bytes"`
	Elements    uint32 `json:"elements"`
}

// rkGrant is START_GRANT (9.1).
type rkGrant struct {
	ID            string        `json:"id"`
	Op            rkOpJSON      `json:"op"`
	Rank          int           `json:"rank"`
	Size          int           `json:"size"`
	Collective    string        `json:"collective"`
	RootRank      *int          `json:"root_rank"`
	InputFormat   string        `json:"input_format"`
	AccPolicy     string        `json:"acc_policy"`
	PartialPolicy string        `json:"partial_policy"`
	OutputFormat  string        `json:"output_format"`
	KulischWidth  int           `json:"kulisch_width"`
	VectorLen     uint32        `json:"vector_len"`
	MTU           int           `json:"mtu"`
	TimeoutMS     uint32        `json:"timeout_ms"`
	Persistent    *bool         `json:"persistent"`
	KeepaliveMS   *uint32       `json:"keepalive_ms"`
	Data          *rkStreamJSON `json:"data"`
	Result        *rkStreamJSON `json:"result"`
	RankMAC       string        `json:"rank_mac"`
	Leaf          string        `json:"leaf"`
	LeafMAC       string        `json:"leaf_mac"`
	LeafPort      int           `json:"leaf_port"`
	Tree          string        `json:"tree"`
	Window        *rkWindowJSON `json:"window"`

	raw    []byte
	fields map[string]json.RawMessage
}

type rkNodeJSON struct {
	Name              string `json:"name"`
	Role              string `json:"role"`
	MAC               string `json:"mac"`
	Parent            string `json:"parent"`
	State             string `json:"state"`
	CompletedElements uint32 `json:"completed_elements"`
	MissingStream     int    `json:"missing_stream"`
	MissingFrom       uint32 `json:"missing_from"`
	MissingFromWhom   string `json:"missing_from_whom"`
	FailCause         string `json:"fail_cause"`
	LastError         string `json:"last_error"`
	Streams           []struct {
		Kind   string `json:"kind"`
		Stream uint16 `json:"stream"`
		Peer   string `json:"peer"`
	} `json:"streams"`
}

type rkErrJSON struct {
	Code               string   `json:"code"`
	Message            string   `json:"message"`
	Node               string   `json:"node"`
	Rank               *int     `json:"rank"`
	RollbackIncomplete []string `json:"rollback_incomplete"`
}

// rkStatus is an operation's status (9.3).
type rkStatus struct {
	ID         string       `json:"id"`
	Op         rkOpJSON     `json:"op"`
	Seq        uint64       `json:"seq"`
	Collective string       `json:"collective"`
	Size       int          `json:"size"`
	Persistent *bool        `json:"persistent"`
	State      string       `json:"state"`
	Tree       string       `json:"tree"`
	Root       string       `json:"root"`
	Forwarders []string     `json:"forwarders"`
	Nodes      []rkNodeJSON `json:"nodes"`
	RanksDone  []int        `json:"ranks_done"`
	Error      *rkErrJSON   `json:"error"`

	raw    []byte
	errRaw map[string]json.RawMessage // the error object's fields as sent
}

func (s rkStatus) node(name string) (rkNodeJSON, bool) {
	for _, n := range s.Nodes {
		if n.Name == name {
			return n, true
		}
	}
	return rkNodeJSON{}, false
}

func (s rkStatus) String() string {
	if s.raw != nil {
		return string(bytes.TrimSpace(s.raw))
	}
	b, _ := json.Marshal(s)
	return string(b)
}

// rkDecodeStatus decodes one status object, keeping the text.
func rkDecodeStatus(b []byte) (rkStatus, error) {
	var s rkStatus
	if err := json.Unmarshal(b, &s); err != nil {
		return s, err
	}
	s.raw = append([]byte(nil), b...)
	var f struct {
		Error map[string]json.RawMessage `json:"error"`
	}
	json.Unmarshal(b, &f)
	s.errRaw = f.Error
	return s, nil
}

// rkBeginReq is a well-formed POST /v1/begin body (9.1); tests edit the map.
func rkBeginReq(job uint64, rank, size int, node, collective, acc string, vecLen uint32) map[string]any {
	return map[string]any{"job": job, "rank": rank, "size": size, "collective": collective,
		"input_format": "fp32", "acc_policy": acc, "vector_len": vecLen, "node": node}
}

func rkClone(m map[string]any) map[string]any {
	c := make(map[string]any, len(m))
	for k, v := range m {
		c[k] = v
	}
	return c
}

// rkAnswer is one HTTP answer of the AM.
type rkAnswer struct {
	Code   int
	Header http.Header
	Body   []byte
	Err    error
}

func (a rkAnswer) String() string {
	if a.Err != nil {
		return "error " + a.Err.Error()
	}
	return fmt.Sprintf("%d %s", a.Code, bytes.TrimSpace(a.Body))
}

func (e *rkEnv) call(host, method, path string, body any, timeout time.Duration) rkAnswer {
	c, h, b, err := e.do(host, method, path, body, timeout)
	return rkAnswer{c, h, b, err}
}

// checkJSON checks the conventions of section 9 on an answer: a JSON object
// with Content-Type application/json.
func (a rkAnswer) checkJSON(t *testing.T, what string) map[string]json.RawMessage {
	t.Helper()
	if a.Err != nil {
		t.Errorf("%s: %v", what, a.Err)
		return nil
	}
	if ct := a.Header.Get("Content-Type"); !strings.HasPrefix(ct, "application/json") {
		t.Errorf("%s: Content-Type %q, want application/json (9: bodies are JSON objects)", what, ct)
	}
	var m map[string]json.RawMessage
	if err := json.Unmarshal(a.Body, &m); err != nil {
		t.Errorf("%s: body is not a JSON object: %v: %s", what, err, a.Body)
		return nil
	}
	return m
}

// checkError checks a non-2xx answer against 9.4 and returns its error
// object: HTTP status, {"error": {"code", "message", ...}} and nothing else.
func (a rkAnswer) checkError(t *testing.T, what string, status int, code string) rkErrJSON {
	t.Helper()
	var e rkErrJSON
	m := a.checkJSON(t, what)
	if m == nil {
		return e
	}
	if a.Code != status {
		t.Errorf("%s: HTTP %d, want %d (9.4 %s): %s", what, a.Code, status, code, bytes.TrimSpace(a.Body))
	}
	if len(m) != 1 || m["error"] == nil {
		t.Errorf("%s: body %s, want exactly {\"error\": {...}} (9.4)", what, a.Body)
		return e
	}
	var fields map[string]json.RawMessage
	json.Unmarshal(m["error"], &fields)
	for k := range fields {
		switch k {
		case "code", "message", "node", "rank", "rollback_incomplete":
		default:
			t.Errorf("%s: error object has field %q; 9.4 names code, message, node, rank, rollback_incomplete", what, k)
		}
	}
	if err := json.Unmarshal(m["error"], &e); err != nil {
		t.Errorf("%s: error object: %v", what, err)
	}
	if e.Code != code {
		t.Errorf("%s: error code %q, want %q (9.4): %s", what, e.Code, code, bytes.TrimSpace(a.Body))
	}
	if e.Message == "" {
		t.Errorf("%s: error without a message (9.4)", what)
	}
	return e
}

// grant decodes a 200 answer to POST /v1/begin.
func (a rkAnswer) grant(t *testing.T, what string) (*rkGrant, bool) {
	t.Helper()
	if a.Err != nil || a.Code != http.StatusOK {
		t.Errorf("%s: %s, want 200 with a grant (9.1)", what, a)
		return nil, false
	}
	m := a.checkJSON(t, what)
	if m == nil {
		return nil, false
	}
	g := &rkGrant{raw: a.Body, fields: m}
	d := json.NewDecoder(bytes.NewReader(a.Body))
	if err := d.Decode(g); err != nil {
		t.Errorf("%s: grant does not decode: %v: %s", what, err, a.Body)
		return nil, false
	}
	return g, true
}

func (e *rkEnv) begin(r int, req any, timeout time.Duration) rkAnswer {
	return e.call(e.hosts[r], http.MethodPost, "/v1/begin", req, timeout)
}

// beginAll posts every request concurrently (rank i from its host) and
// returns the answers in the same order.
func (e *rkEnv) beginAll(reqs []map[string]any, hosts []int, timeout time.Duration) []rkAnswer {
	out := make([]rkAnswer, len(reqs))
	var wg sync.WaitGroup
	for i := range reqs {
		wg.Add(1)
		go func(i int) {
			defer wg.Done()
			out[i] = e.begin(hosts[i], reqs[i], timeout)
		}(i)
	}
	wg.Wait()
	return out
}

// opStatus fetches GET /v1/ops/{id}.
func (e *rkEnv) opStatus(t *testing.T, id string) (rkStatus, bool) {
	t.Helper()
	a := e.call("h2", http.MethodGet, "/v1/ops/"+id, nil, 5*time.Second)
	var s rkStatus
	if a.Err != nil || a.Code != http.StatusOK {
		t.Errorf("GET /v1/ops/%s: %s", id, a)
		return s, false
	}
	a.checkJSON(t, "GET /v1/ops/"+id)
	s, err := rkDecodeStatus(a.Body)
	if err != nil {
		t.Errorf("GET /v1/ops/%s: %v", id, err)
		return s, false
	}
	return s, true
}

// ops fetches GET /v1/ops.
func (e *rkEnv) ops(t *testing.T) []rkStatus {
	t.Helper()
	a := e.call("h3", http.MethodGet, "/v1/ops", nil, 5*time.Second)
	m := a.checkJSON(t, "GET /v1/ops")
	if a.Code != http.StatusOK || m == nil {
		t.Errorf("GET /v1/ops: %s", a)
		return nil
	}
	if m["ops"] == nil {
		t.Errorf("GET /v1/ops: %s, want {\"ops\": [...], \"barriers\"?: [...]} (9.3)", a.Body)
	}
	for k := range m {
		if k != "ops" && k != "barriers" {
			t.Errorf("GET /v1/ops: key %q, want only ops and barriers (9.3)", k)
		}
	}
	if b, ok := m["barriers"]; ok {
		// barrier: job, group, seq, collective, size, arrived, missing,
		// waiting_ms (9.3); arrived and missing partition 0..size-1.
		var bs []map[string]json.RawMessage
		if err := json.Unmarshal(b, &bs); err != nil || len(bs) == 0 {
			t.Errorf("GET /v1/ops: barriers %s: want a non-empty array of objects (absent when none)", b)
		}
		for _, x := range bs {
			for _, k := range []string{"job", "group", "seq", "collective", "size", "arrived", "missing", "waiting_ms"} {
				if _, ok := x[k]; !ok {
					t.Errorf("GET /v1/ops: barrier %v lacks %q (9.3)", x, k)
				}
			}
			var size int
			var arrived, missing []int
			json.Unmarshal(x["size"], &size)
			json.Unmarshal(x["arrived"], &arrived)
			json.Unmarshal(x["missing"], &missing)
			seen := map[int]bool{}
			for _, r := range append(append([]int(nil), arrived...), missing...) {
				if r < 0 || r >= size || seen[r] {
					t.Errorf("GET /v1/ops: barrier arrived %v missing %v do not partition 0..%d", arrived, missing, size-1)
					break
				}
				seen[r] = true
			}
			if len(seen) != size {
				t.Errorf("GET /v1/ops: barrier arrived %v missing %v do not cover 0..%d", arrived, missing, size-1)
			}
		}
	}
	var v struct {
		Ops []json.RawMessage `json:"ops"`
	}
	if err := json.Unmarshal(a.Body, &v); err != nil {
		t.Errorf("GET /v1/ops: %v", err)
	}
	var r []rkStatus
	for _, o := range v.Ops {
		s, err := rkDecodeStatus(o)
		if err != nil {
			t.Errorf("GET /v1/ops: %v", err)
		}
		r = append(r, s)
	}
	return r
}

// opsOfJob lists the AM's operations of one job.
func (e *rkEnv) opsOfJob(t *testing.T, job uint64) []rkStatus {
	var r []rkStatus
	for _, s := range e.ops(t) {
		if s.Op.Job == job {
			r = append(r, s)
		}
	}
	return r
}

// waitState polls GET /v1/ops/{id} until the state is one of want.
func (e *rkEnv) waitState(t *testing.T, id string, d time.Duration, want ...string) rkStatus {
	t.Helper()
	deadline := time.Now().Add(d)
	for {
		s, ok := e.opStatus(t, id)
		if ok {
			for _, w := range want {
				if s.State == w {
					return s
				}
			}
		}
		if !ok || time.Now().After(deadline) {
			t.Errorf("operation %s: state %q after %v, want one of %v: %s", id, s.State, d, want, s)
			return s
		}
		time.Sleep(25 * time.Millisecond)
	}
}

// done posts POST /v1/ops/{id}/done (9.2).
func (e *rkEnv) done(r int, id string, ok bool, msg string, wait bool, timeout time.Duration) rkAnswer {
	body := map[string]any{"rank": r, "ok": ok}
	if !ok {
		body["error"] = msg
	}
	if wait {
		body["wait"] = true
	}
	return e.call(e.hosts[r], http.MethodPost, "/v1/ops/"+id+"/done", body, timeout)
}

func (a rkAnswer) status(t *testing.T, what string) (rkStatus, bool) {
	t.Helper()
	var s rkStatus
	if a.Err != nil || a.Code != http.StatusOK {
		t.Errorf("%s: %s, want 200 with the operation's status", what, a)
		return s, false
	}
	a.checkJSON(t, what)
	s, err := rkDecodeStatus(a.Body)
	if err != nil {
		t.Errorf("%s: %v", what, err)
		return s, false
	}
	return s, true
}

// ---- what the tests know of the lab (deploy, not the protocol) ----

// leafOf is the switch host r hangs off and that switch's port toward it.
func (e *rkEnv) leafOf(r int) (leaf, iface string) {
	ep, ok := e.lab.Topo.Peer(deploy.Endpoint{Node: e.hosts[r], Iface: "eth0"})
	if !ok {
		e.t.Fatalf("%s:eth0 has no peer", e.hosts[r])
	}
	return ep.Node, ep.Iface
}

func (e *rkEnv) macOf(node, iface string) mac { return mac(e.lab.Topo.MAC(node, iface)) }

func rkSortedInts(v []int) []int {
	c := append([]int(nil), v...)
	sort.Ints(c)
	return c
}

// rkFinding skips t, naming finding R<n>, when the deviation the finding
// records shows (deviates); the check stays and passes once prismd or the
// specification changes.
func rkFinding(t *testing.T, n int, deviates bool, format string, a ...any) {
	t.Helper()
	if deviates {
		t.Errorf("(finding R%d, settled) %s", n, fmt.Sprintf(format, a...))
	}
}
