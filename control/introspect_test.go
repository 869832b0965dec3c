package control

import (
	"encoding/json"
	"fmt"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/prometheus/client_golang/prometheus/testutil"

	"github.com/prismd/prismd/parser"
)

func TestIntrospectionHandler(t *testing.T) {
	node := NewNode(NodeConfig{AMMACs: [][6]byte{amMAC}, Logger: quietLogger()})
	w := node.NewWorker(0, 2)
	node.NewWorker(1, 2)
	tx := &recorder{}
	w.Handle(1e9, 2, stageFrame(t, ruleKey, 1, goodCtx(), goodBindings()), tx)
	w.Handle(1e9, 2, controlFrame(t, ruleKey, parser.CmdCommit, nil, 2), tx)
	w.Engine().Publish(2e9)

	srv := httptest.NewServer(IntrospectionHandler(node))
	defer srv.Close()
	get := func(q string) OpsResponse {
		resp, err := http.Get(srv.URL + "/v1/ops" + q)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		var r OpsResponse
		if err := json.NewDecoder(resp.Body).Decode(&r); err != nil {
			t.Fatal(err)
		}
		return r
	}
	r := get("")
	if r.Workers != 2 || len(r.Ops) != 1 {
		t.Fatalf("workers %d ops %d", r.Workers, len(r.Ops))
	}
	o := r.Ops[0]
	if o.Job != 42 || o.OpGen != 10 || o.State != "ACTIVE" || o.Role != "SINGLE" || len(o.Inbound) != 2 || len(o.Outbound) != 1 {
		t.Fatalf("op %+v", o)
	}
	if len(o.WaitingFor) == 0 || !strings.Contains(o.WaitingFor[0], "CONTRIBUTOR stream 1 ") {
		t.Fatalf("waiting for %q", o.WaitingFor)
	}
	if n := len(get("?job=41").Ops); n != 0 {
		t.Fatalf("job filter: %d ops", n)
	}
	if n := len(get("?state=ACTIVE").Ops); n != 1 {
		t.Fatalf("state filter: %d ops", n)
	}
}

func TestControlMetricsLint(t *testing.T) {
	r := newNodeRig(t, NodeConfig{})
	r.do(stageFrame(t, ruleKey, 1, goodCtx(), goodBindings()))
	if problems, err := testutil.CollectAndLint(r.w.n.ControlMetrics()); err != nil || len(problems) != 0 {
		t.Fatalf("lint: %v %+v", err, problems)
	}
	want := `
# HELP prismd_control_acks_total CONTROL ACKs sent, by status.
# TYPE prismd_control_acks_total counter
prismd_control_acks_total{status="BAD_STATE"} 0
prismd_control_acks_total{status="CONFLICT"} 0
prismd_control_acks_total{status="INVALID"} 0
prismd_control_acks_total{status="INVALID_BINDING"} 0
prismd_control_acks_total{status="NO_RESOURCES"} 0
prismd_control_acks_total{status="OK"} 1
prismd_control_acks_total{status="STALE_GENERATION"} 0
prismd_control_acks_total{status="UNSUPPORTED"} 0
`
	if err := testutil.CollectAndCompare(r.w.n.ControlMetrics(), strings.NewReader(want), "prismd_control_acks_total"); err != nil {
		t.Fatal(err)
	}
}

// TestContextMetrics: prismd_engine_contexts counts the contexts every
// worker holds by state, every held state exported (0 included), as the
// CONTROL commands this test sends leave them.
func TestContextMetrics(t *testing.T) {
	node := NewNode(NodeConfig{AMMACs: [][6]byte{amMAC}, Logger: quietLogger()})
	w0 := node.NewWorker(0, 2)
	node.NewWorker(1, 2)
	tx := &recorder{}
	other := ruleKey
	other.Op++
	w0.Handle(1e9, 2, stageFrame(t, ruleKey, 1, goodCtx(), goodBindings()), tx)
	w0.Handle(1e9, 2, controlFrame(t, ruleKey, parser.CmdCommit, nil, 2), tx)
	w0.Handle(1e9, 2, stageFrame(t, other, 3, goodCtx(), goodBindings()), tx)
	check := func(what string, staged, active int) {
		t.Helper()
		w0.Engine().Publish(2e9)
		want := fmt.Sprintf(`
# HELP prismd_engine_contexts Operation contexts the switch holds now, by state (STAGED, ACTIVE, COMPLETE, FAILED): a FAILED or COMPLETE context waits for its AM's RELEASE or ABORT, or for its expiry. Read from the workers' introspection snapshots, at most 100 ms old.
# TYPE prismd_engine_contexts gauge
prismd_engine_contexts{state="ACTIVE"} %d
prismd_engine_contexts{state="COMPLETE"} 0
prismd_engine_contexts{state="FAILED"} 0
prismd_engine_contexts{state="STAGED"} %d
`, active, staged)
		if err := testutil.CollectAndCompare(node.ContextMetrics(), strings.NewReader(want), "prismd_engine_contexts"); err != nil {
			t.Fatalf("%s: %v", what, err)
		}
		// Each context's ring: min(window 2904, vector 1000) elements of
		// a W=288 Kulisch accumulator, 8 x (288/32 + 2) + 1 = 89 bytes.
		lim := node.Snapshots()[0]
		want = fmt.Sprintf(`
# HELP prismd_engine_accumulator_bytes Accumulator memory the worker's operation contexts reserve now (their element windows); a STAGE that would take it past prismd_engine_accumulator_limit_bytes is refused NO_RESOURCES.
# TYPE prismd_engine_accumulator_bytes gauge
prismd_engine_accumulator_bytes{worker="0"} %d
prismd_engine_accumulator_bytes{worker="1"} 0
# HELP prismd_engine_contexts_limit The operation contexts a worker may hold; a STAGE past it is refused NO_RESOURCES (an operation's contexts go to one worker, chosen by its identity).
# TYPE prismd_engine_contexts_limit gauge
prismd_engine_contexts_limit{worker="0"} %d
prismd_engine_contexts_limit{worker="1"} %d
`, (staged+active)*1000*89, lim.MaxContexts, lim.MaxContexts)
		if err := testutil.CollectAndCompare(node.ContextMetrics(), strings.NewReader(want), "prismd_engine_accumulator_bytes", "prismd_engine_contexts_limit"); err != nil {
			t.Fatalf("%s: %v", what, err)
		}
		if lim.MaxContexts <= 0 || lim.AccumulatorLimitBytes <= 0 {
			t.Fatalf("limits %d contexts, %d bytes: want the worker's", lim.MaxContexts, lim.AccumulatorLimitBytes)
		}
	}
	check("one committed, one staged", 1, 1)
	w0.Handle(1e9, 2, controlFrame(t, ruleKey, parser.CmdAbort, nil, 4), tx)
	check("the committed one aborted", 1, 0)
	if problems, err := testutil.CollectAndLint(node.ContextMetrics()); err != nil || len(problems) != 0 {
		t.Fatalf("lint: %v %+v", err, problems)
	}
}
