// This file owns the per-job authentication keys' runtime channel on the
// control socket (docs/protocol.md 9.6): PUT/DELETE /v1/keys/{job} and
// GET /v1/keys. Keys go into the node's Keyring, which every worker's
// BITMAP shard reads on each frame of the job (engine/bitmap).
//
// These routes exist only on the control_listen unix socket, whose file
// mode (0660) and directory are the access control; the metrics_listen TCP
// server never gets them (daemon_keys_test.go proves it). A key is never
// logged, never written to disk and never served back: listings and
// answers carry its fingerprint (authkey.Fingerprint) only.

package main

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"strconv"

	"github.com/prismd/prismd/engine/bitmap"
	"github.com/prismd/prismd/internal/authkey"
)

// maxKeyBody bounds a PUT body: the longest key's hex and its JSON wrapping
// fit many times over.
const maxKeyBody = 4096

// KeyPut is the body of PUT /v1/keys/{job}.
type KeyPut struct {
	Key string `json:"key"` // authkey.MinLen..MaxLen bytes as hex
}

// KeyInfo names an installed key: its job and fingerprint, never the key.
// It is the answer to PUT and DELETE and an entry of GET /v1/keys.
type KeyInfo struct {
	Job         uint64 `json:"job"`
	Fingerprint string `json:"fingerprint"`
	// Replaced (PUT only): the job had a key, which this one replaced.
	Replaced bool `json:"replaced,omitempty"`
}

// KeysResponse is the body of GET /v1/keys, sorted by job.
type KeysResponse struct {
	Keys []KeyInfo `json:"keys"`
}

// keyError is the error body, shaped as the runtime channel's (9.4).
type keyError struct {
	Error struct {
		Code    string `json:"code"`
		Message string `json:"message"`
	} `json:"error"`
}

type keyAPI struct {
	kr  *bitmap.Keyring
	log *slog.Logger
}

// registerKeyRoutes adds the key endpoints to the control socket's mux.
func registerKeyRoutes(mux *http.ServeMux, kr *bitmap.Keyring, log *slog.Logger) {
	a := &keyAPI{kr: kr, log: log}
	mux.HandleFunc("GET /v1/keys", a.list)
	mux.HandleFunc("PUT /v1/keys/{job}", a.put)
	mux.HandleFunc("DELETE /v1/keys/{job}", a.del)
}

func writeJSON(w http.ResponseWriter, code int, v any) {
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(code)
	_ = json.NewEncoder(w).Encode(v)
}

func keyFail(w http.ResponseWriter, status int, code, format string, args ...any) {
	var e keyError
	e.Error.Code, e.Error.Message = code, fmt.Sprintf(format, args...)
	writeJSON(w, status, e)
}

func jobOf(w http.ResponseWriter, r *http.Request) (uint64, bool) {
	s := r.PathValue("job")
	j, err := strconv.ParseUint(s, 10, 64)
	if err != nil {
		keyFail(w, http.StatusBadRequest, "bad_request", "job %q is not a Job ID: want an unsigned 64-bit decimal, e.g. /v1/keys/7", s)
		return 0, false
	}
	return j, true
}

func (a *keyAPI) list(w http.ResponseWriter, r *http.Request) {
	out := KeysResponse{Keys: []KeyInfo{}}
	for _, j := range a.kr.Jobs() {
		if k := a.kr.Get(j); k != nil {
			out.Keys = append(out.Keys, KeyInfo{Job: j, Fingerprint: authkey.Fingerprint(k)})
		}
	}
	writeJSON(w, http.StatusOK, out)
}

func (a *keyAPI) put(w http.ResponseWriter, r *http.Request) {
	job, ok := jobOf(w, r)
	if !ok {
		return
	}
	body, err := io.ReadAll(http.MaxBytesReader(w, r.Body, maxKeyBody))
	if err != nil {
		keyFail(w, http.StatusBadRequest, "bad_request", "body larger than %d bytes: want {\"key\": \"<hex>\"}", maxKeyBody)
		return
	}
	var req KeyPut
	if msg := decodeKeyPut(body, &req); msg != "" {
		clear(body)
		keyFail(w, http.StatusBadRequest, "bad_request", "%s", msg)
		return
	}
	clear(body)
	key, err := authkey.Parse(req.Key)
	if err != nil {
		// authkey's errors name lengths and offsets, never key bytes.
		keyFail(w, http.StatusBadRequest, "bad_request", "%v", err)
		return
	}
	replaced := a.kr.Get(job) != nil
	a.kr.Set(job, key)
	info := KeyInfo{Job: job, Fingerprint: authkey.Fingerprint(key), Replaced: replaced}
	clear(key) // the keyring holds its own copy
	a.log.Info("job key installed", "job", job, "fingerprint", info.Fingerprint, "replaced", replaced)
	writeJSON(w, http.StatusOK, info)
}

// decodeKeyPut parses a PUT body strictly. Its messages never quote the
// body: a malformed body may hold the key, and answers never carry one.
func decodeKeyPut(body []byte, req *KeyPut) string {
	const want = `want {"key": "<hex>"}`
	d := json.NewDecoder(bytes.NewReader(body))
	d.DisallowUnknownFields()
	if err := d.Decode(req); err != nil {
		var se *json.SyntaxError
		var te *json.UnmarshalTypeError
		switch {
		case errors.As(err, &se):
			return fmt.Sprintf("body is not valid JSON (syntax error at byte %d): %s", se.Offset, want)
		case errors.As(err, &te):
			return fmt.Sprintf("body has the wrong type at byte %d: %s", te.Offset, want)
		case errors.Is(err, io.ErrUnexpectedEOF):
			// Truncated ({"key": ...): a syntax error at the end, which the
			// decoder reports as an early EOF.
			return fmt.Sprintf("body is not valid JSON (syntax error at byte %d): %s", len(body), want)
		case errors.Is(err, io.EOF):
			return "empty body: " + want
		}
		return "body has a field other than \"key\", or is not one JSON object: " + want
	}
	if len(bytes.TrimSpace(body[d.InputOffset():])) != 0 {
		return "body has data after the JSON object: " + want
	}
	if req.Key == "" {
		return "no \"key\" in the body: " + want
	}
	return ""
}

func (a *keyAPI) del(w http.ResponseWriter, r *http.Request) {
	job, ok := jobOf(w, r)
	if !ok {
		return
	}
	k := a.kr.Get(job)
	if k == nil {
		keyFail(w, http.StatusNotFound, "not_found", "no key installed for job %d (GET /v1/keys, or 'prismctl keys list', lists them)", job)
		return
	}
	fp := authkey.Fingerprint(k)
	a.kr.Set(job, nil)
	a.log.Info("job key removed", "job", job, "fingerprint", fp)
	writeJSON(w, http.StatusOK, KeyInfo{Job: job, Fingerprint: fp})
}
