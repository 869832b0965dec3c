// This file owns the HTTP side of the runtime channel: routing, JSON
// decoding with unknown fields refused, and the mapping of error codes to
// HTTP statuses.

package am

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"io"
	"net/http"
	"net/url"
	"strconv"
	"strings"
)

// Handler returns the runtime-channel HTTP handler.
func (m *Manager) Handler() http.Handler {
	mux := http.NewServeMux()
	mux.HandleFunc("POST "+APIVersion+"/begin", func(w http.ResponseWriter, r *http.Request) {
		var req BeginRequest
		body, ok := readBody(w, r)
		if !ok || !decodeBytes(w, body, &req) {
			return
		}
		if aerr := requireFields(body, req); aerr != nil {
			writeErr(w, aerr)
			return
		}
		g, err := m.Begin(r.Context(), req)
		if err != nil {
			writeErr(w, err)
			return
		}
		writeJSON(w, http.StatusOK, g)
	})
	mux.HandleFunc("POST "+APIVersion+"/abandon", func(w http.ResponseWriter, r *http.Request) {
		var req AbandonRequest
		body, ok := readBody(w, r)
		if !ok || !decodeBytes(w, body, &req) {
			return
		}
		if aerr := requireFields(body, req.BeginRequest); aerr != nil {
			writeErr(w, aerr)
			return
		}
		res, err := m.Abandon(req)
		if err != nil {
			writeErr(w, err)
			return
		}
		writeJSON(w, http.StatusOK, res)
	})
	mux.HandleFunc("GET "+APIVersion+"/ops", func(w http.ResponseWriter, r *http.Request) {
		f, aerr := parseOpsFilter(r.URL.Query())
		if aerr != nil {
			writeErr(w, aerr)
			return
		}
		if r.URL.Query().Get("live") == "1" {
			m.Refresh()
		}
		writeJSON(w, http.StatusOK, m.OpsWhere(f))
	})
	mux.HandleFunc("GET "+APIVersion+"/ops/{id}", func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Query().Get("live") == "1" {
			m.Refresh()
		}
		s, err := m.Op(r.PathValue("id"))
		if err != nil {
			writeErr(w, err)
			return
		}
		writeJSON(w, http.StatusOK, s)
	})
	mux.HandleFunc("POST "+APIVersion+"/ops/{id}/done", func(w http.ResponseWriter, r *http.Request) {
		var req DoneRequest
		if !decodeRequired(w, r, &req, doneRequired, "9.2") {
			return
		}
		s, err := m.Done(r.Context(), r.PathValue("id"), req)
		if err != nil {
			writeErr(w, err)
			return
		}
		writeJSON(w, http.StatusOK, s)
	})
	mux.HandleFunc("POST "+APIVersion+"/ops/{id}/alive", func(w http.ResponseWriter, r *http.Request) {
		var req AliveRequest
		if !decodeRequired(w, r, &req, aliveRequired, "9.7") {
			return
		}
		s, err := m.Alive(r.Context(), r.PathValue("id"), req)
		if err != nil {
			writeErr(w, err)
			return
		}
		writeJSON(w, http.StatusOK, s)
	})
	mux.HandleFunc("POST "+APIVersion+"/presence", func(w http.ResponseWriter, r *http.Request) {
		if req, ok := decodePresence(w, r); ok {
			m.presenceStream(w, r, req)
		}
	})
	mux.HandleFunc("POST "+APIVersion+"/presence/leave", func(w http.ResponseWriter, r *http.Request) {
		if req, ok := decodePresence(w, r); ok {
			m.PresenceLeave(req)
			writeJSON(w, http.StatusOK, struct{}{})
		}
	})
	mux.Handle("GET /metrics", m.metricsHandler())
	mux.HandleFunc("/", func(w http.ResponseWriter, r *http.Request) {
		writeErr(w, &APIError{Code: CodeNotFound, Message: r.Method + " " + r.URL.Path + ": no such endpoint (see docs/protocol.md, Runtime channel)"})
	})
	return mux
}

// parseOpsFilter reads GET /v1/ops's selection (9.3): job, group and seq
// (decimal) keep the operations and barriers that match each one given;
// ops=0 leaves the operations out (barriers only).
func parseOpsFilter(q url.Values) (OpsFilter, *APIError) {
	var f OpsFilter
	num := func(key string, bits int) (*uint64, *APIError) {
		vs, given := q[key]
		if !given {
			return nil, nil
		}
		if len(vs) > 1 {
			return nil, badReq("query %s given %d times: give it once (9.3)", key, len(vs))
		}
		v := vs[0] // "?job=" is a value too, and no number: before, it selected everything
		n, err := strconv.ParseUint(v, 10, bits)
		if err != nil {
			return nil, badReq("query %s=%q: want a decimal number below 2^%d (9.3)", key, v, bits)
		}
		return &n, nil
	}
	var aerr *APIError
	if f.Job, aerr = num("job", 64); aerr != nil {
		return f, aerr
	}
	g, aerr := num("group", 16)
	if aerr != nil {
		return f, aerr
	}
	if g != nil {
		x := uint16(*g)
		f.Group = &x
	}
	if f.Seq, aerr = num("seq", 64); aerr != nil {
		return f, aerr
	}
	switch vs, given := q["ops"]; {
	case !given:
	case len(vs) == 1 && vs[0] == "1":
	case len(vs) == 1 && vs[0] == "0":
		f.NoOps = true
	default:
		return f, badReq("query ops=%q: 0 (barriers only) or 1, once (9.3)", strings.Join(vs, ","))
	}
	return f, nil
}

// readBody reads a request body of at most 1 MiB.
func readBody(w http.ResponseWriter, r *http.Request) ([]byte, bool) {
	b, err := io.ReadAll(http.MaxBytesReader(w, r.Body, 1<<20))
	if err != nil {
		writeErr(w, badReq("request body: %v", err))
		return nil, false
	}
	return b, true
}

// decodeBytes is decode for a body already read.
func decodeBytes(w http.ResponseWriter, body []byte, v any) bool {
	dec := json.NewDecoder(bytes.NewReader(body))
	dec.DisallowUnknownFields()
	if err := dec.Decode(v); err != nil {
		writeErr(w, badReq("request body: %v", err))
		return false
	}
	return true
}

// beginRequired are the fields of POST /v1/begin a request must carry
// (docs/protocol.md 9.1); root_rank too for a REDUCE. Decoded into Go
// values an absent job or rank is 0, a valid value: without this check a
// client that forgot them was granted as job 0 or rank 0.
var beginRequired = []string{"job", "rank", "size", "collective", "input_format", "acc_policy", "vector_len", "node"}

func requireFields(body []byte, req BeginRequest) *APIError {
	need := beginRequired
	if req.Collective == "reduce" {
		need = append(need[:len(need):len(need)], "root_rank")
	}
	return missingFields(body, need, "9.1")
}

// missingFields refuses a body that lacks a field of need (section names
// the protocol section that requires them). Unmarshalled whole, the body
// must also be one JSON value: nothing may follow it.
func missingFields(body []byte, need []string, section string) *APIError {
	var present map[string]json.RawMessage
	if err := json.Unmarshal(body, &present); err != nil {
		return badReq("request body: %v", err)
	}
	var missing []string
	for _, f := range need {
		if _, ok := present[f]; !ok {
			missing = append(missing, f)
		}
	}
	if len(missing) > 0 {
		return badReq("missing required field(s) %s (protocol section %s)", strings.Join(missing, ", "), section)
	}
	return nil
}

// doneRequired and aliveRequired are the fields a done report and a
// keepalive must carry: decoded into Go values an absent rank is 0 and an
// absent ok false, so a report without them counted as rank 0's, or as
// a failure.
var (
	doneRequired  = []string{"rank", "ok"}
	aliveRequired = []string{"rank"}
)

// decodeRequired is decode for a body that must carry the fields need
// (protocol section section says so).
func decodeRequired(w http.ResponseWriter, r *http.Request, v any, need []string, section string) bool {
	body, ok := readBody(w, r)
	if !ok || !decodeBytes(w, body, v) {
		return false
	}
	if aerr := missingFields(body, need, section); aerr != nil {
		writeErr(w, aerr)
		return false
	}
	return true
}

func decode(w http.ResponseWriter, r *http.Request, v any) bool {
	dec := json.NewDecoder(http.MaxBytesReader(w, r.Body, 1<<20))
	dec.DisallowUnknownFields()
	if err := dec.Decode(v); err != nil {
		writeErr(w, badReq("request body: %v", err))
		return false
	}
	return true
}

// decodePresence reads, decodes and checks a presence request (the
// whole body, at most 1 MiB: the server notices a client that went away
// only once the body was read to its end), answering a bad one.
func decodePresence(w http.ResponseWriter, r *http.Request) (PresenceRequest, bool) {
	var req PresenceRequest
	body, ok := readBody(w, r)
	if !ok || !decodeBytes(w, body, &req) {
		return req, false
	}
	if aerr := missingFields(body, presenceRequired, "9.9"); aerr != nil {
		writeErr(w, aerr)
		return req, false
	}
	if aerr := checkPresence(req); aerr != nil {
		writeErr(w, aerr)
		return req, false
	}
	return req, true
}

func writeJSON(w http.ResponseWriter, code int, v any) {
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(code)
	_ = json.NewEncoder(w).Encode(v)
}

// HTTPStatus maps an APIError code to its HTTP status.
func HTTPStatus(code string) int {
	switch code {
	case CodeBadRequest:
		return http.StatusBadRequest
	case CodeMismatch, CodeAbandoned:
		return http.StatusConflict
	case CodeBarrierTimeout:
		return http.StatusGatewayTimeout
	case CodeTopology, CodeUnsupported:
		return http.StatusUnprocessableEntity
	case CodeNotFound:
		return http.StatusNotFound
	case CodeRankGone:
		return http.StatusGone
	}
	return http.StatusBadGateway
}

func writeErr(w http.ResponseWriter, err error) {
	var ae *APIError
	if !errors.As(err, &ae) {
		msg := err.Error()
		if errors.Is(err, context.Canceled) {
			msg = "request cancelled: " + msg
		}
		ae = &APIError{Code: CodeSetupFailed, Message: strings.TrimSpace(msg)}
	}
	writeJSON(w, HTTPStatus(ae.Code), errorBody{Error: ae})
}
