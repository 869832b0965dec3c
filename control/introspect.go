// This file owns the node's HTTP introspection endpoint (/v1/ops), which the
// daemon mounts on its control_listen unix-socket server and `prismctl show
// ops` reads.

package control

import (
	"encoding/json"
	"net/http"
	"sort"
	"strconv"

	"github.com/prismd/prismd/engine"
	"github.com/prismd/prismd/engine/bitmap"
)

// OpView is one operation as /v1/ops reports it: the worker that owns it
// and the engine's snapshot of it.
type OpView struct {
	Worker int `json:"worker"`
	engine.OpSnapshot
}

// OpsResponse is the body of GET /v1/ops.
type OpsResponse struct {
	// Workers is the number of worker snapshots read; each is at most
	// engine.SnapshotInterval old while read (engine.UnwatchedSnapshotInterval
	// for the first read in a while), its contexts' states never older
	// than a Tick.
	Workers int      `json:"workers"`
	Ops     []OpView `json:"ops"`
	// Bitmap holds the BITMAP contexts (package engine/bitmap), per worker.
	Bitmap []*bitmap.Snapshot `json:"bitmap,omitempty"`
}

// IntrospectionHandler serves GET /v1/ops: every operation context of every
// worker (identity, role, state, per-contributor coverage and holes, window
// and credits, replay per sending binding, what it waits for, failure
// reason). Optional query parameters job and state filter the list.
// It reads only the published snapshots, never live engine state.
func IntrospectionHandler(n *Node) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.Method != http.MethodGet {
			http.Error(w, "GET only", http.StatusMethodNotAllowed)
			return
		}
		var job uint64
		filterJob := false
		if s := r.URL.Query().Get("job"); s != "" {
			v, err := strconv.ParseUint(s, 10, 64)
			if err != nil {
				http.Error(w, "job: "+err.Error(), http.StatusBadRequest)
				return
			}
			job, filterJob = v, true
		}
		state := r.URL.Query().Get("state")
		resp := OpsResponse{Ops: []OpView{}}
		for _, s := range n.Snapshots() {
			resp.Workers++
			for _, o := range s.Ops {
				if (filterJob && o.Job != job) || (state != "" && o.State != state) {
					continue
				}
				resp.Ops = append(resp.Ops, OpView{Worker: s.Worker, OpSnapshot: o})
			}
		}
		for _, b := range n.BitmapSnapshots() {
			if b != nil && len(b.Ctxs) > 0 {
				resp.Bitmap = append(resp.Bitmap, b)
			}
		}
		sort.SliceStable(resp.Ops, func(i, j int) bool {
			a, b := &resp.Ops[i], &resp.Ops[j]
			if a.Job != b.Job {
				return a.Job < b.Job
			}
			if a.Group != b.Group {
				return a.Group < b.Group
			}
			if a.Op != b.Op {
				return a.Op < b.Op
			}
			return a.OpGen < b.OpGen
		})
		w.Header().Set("Content-Type", "application/json")
		enc := json.NewEncoder(w)
		enc.SetIndent("", "  ")
		_ = enc.Encode(resp)
	})
}
