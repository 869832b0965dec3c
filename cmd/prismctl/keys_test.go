package main

import (
	"bytes"
	"encoding/hex"
	"encoding/json"
	"flag"
	"io"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"

	"github.com/prismd/prismd/internal/authkey"
)

func keys(args ...string) (int, string, string) {
	var out, errb bytes.Buffer
	code := runKeys(args, &out, &errb)
	return code, out.String(), errb.String()
}

// TestKeysGen: a new key file of 32 random bytes as hex, mode 0600, named
// by its fingerprint; an existing file is refused and left alone.
func TestKeysGen(t *testing.T) {
	p := filepath.Join(t.TempDir(), "job.key")
	code, out, errs := keys("gen", p)
	if code != 0 {
		t.Fatalf("exit %d: %s", code, errs)
	}
	fi, err := os.Stat(p)
	if err != nil || fi.Mode().Perm() != 0o600 {
		t.Fatalf("mode %v, %v", fi.Mode(), err)
	}
	raw, _ := os.ReadFile(p)
	k, err := hex.DecodeString(strings.TrimSpace(string(raw)))
	if err != nil || len(k) != 32 {
		t.Fatalf("file holds %d bytes (%v)", len(k), err)
	}
	if !strings.Contains(out, authkey.Fingerprint(k)) || strings.Contains(out, hex.EncodeToString(k)) {
		t.Fatalf("output %q: want the fingerprint and never the key", out)
	}
	if code, _, errs := keys("gen", p); code != 1 || !strings.Contains(errs, "never overwritten") {
		t.Fatalf("second gen: %d %s", code, errs)
	}
	if again, _ := os.ReadFile(p); !bytes.Equal(again, raw) {
		t.Fatal("the refused gen changed the file")
	}
}

// TestKeysFlagErrors: every misuse exits 2 (1 for a failed request) and
// says what is wrong and what to do.
func TestKeysFlagErrors(t *testing.T) {
	dir := t.TempDir()
	good := filepath.Join(dir, "good.key")
	if code, _, errs := keys("gen", good); code != 0 {
		t.Fatal(errs)
	}
	open := filepath.Join(dir, "open.key")
	raw, _ := os.ReadFile(good)
	os.WriteFile(open, raw, 0o644)
	os.Chmod(open, 0o644)
	short := filepath.Join(dir, "short.key")
	os.WriteFile(short, []byte(strings.Repeat("ab", 16)+"\n"), 0o600)
	t.Setenv("PRISM_AUTH_KEY_FILE", "")
	for _, c := range []struct {
		args []string
		code int
		msg  string
	}{
		{nil, 2, "usage: prismctl keys gen FILE"},
		{[]string{"frob"}, 2, `unknown subcommand "frob"`},
		{[]string{"gen"}, 2, "FILE is missing"},
		{[]string{"gen", "a", "b"}, 2, "one FILE only"},
		{[]string{"set", "--key-file", good}, 2, "--job is required"},
		{[]string{"set", "--job", "seven", "--key-file", good}, 2, `--job "seven" is not a Job ID`},
		{[]string{"set", "--job", "-3", "--key-file", good}, 2, "not a Job ID"},
		{[]string{"set", "--job", "7"}, 2, "--key-file is required"},
		{[]string{"set", "--job", "7", "--key-file", open}, 2, "chmod 600 " + open},
		{[]string{"set", "--job", "7", "--key-file", short}, 2, "the key is 16 bytes: want 32"},
		{[]string{"set", "--job", "7", "--key-file", filepath.Join(dir, "none")}, 2, "no such file"},
		{[]string{"set", "--job", "7", "--key-file", good, "--socket", "/x", "--netns", "y"}, 2, "use --socket or --netns, not both"},
		{[]string{"rm"}, 2, "--job is required"},
		{[]string{"rm", "--job", "7", "extra"}, 2, `unexpected argument "extra"`},
		{[]string{"list", "--job", "7"}, 2, "flag provided but not defined: -job"},
		{[]string{"set", "--job", "7", "--key-file", good, "--socket", filepath.Join(dir, "no.sock")}, 1, "is prismd running"},
	} {
		code, out, errs := keys(c.args...)
		if code != c.code || !strings.Contains(errs, c.msg) {
			t.Errorf("prismctl keys %s: exit %d, stderr %q\nwant exit %d containing %q", strings.Join(c.args, " "), code, errs, c.code, c.msg)
		}
		if out != "" {
			t.Errorf("prismctl keys %s: printed %q on stdout", strings.Join(c.args, " "), out)
		}
		if strings.Contains(errs, strings.TrimSpace(string(raw))[:16]) {
			t.Errorf("prismctl keys %s: the key appears in %q", strings.Join(c.args, " "), errs)
		}
	}
}

// fakeKeyd serves the key endpoints on a unix socket with the shapes of
// protocol 9.6, and records the keys it was given.
type fakeKeyd struct {
	mu   sync.Mutex
	keys map[string][]byte
}

func (f *fakeKeyd) serve(t *testing.T) string {
	sock := filepath.Join(t.TempDir(), "p.sock")
	ln, err := net.Listen("unix", sock)
	if err != nil {
		t.Fatal(err)
	}
	f.keys = map[string][]byte{}
	mux := http.NewServeMux()
	errJSON := func(w http.ResponseWriter, code int, c, msg string) {
		w.WriteHeader(code)
		json.NewEncoder(w).Encode(map[string]any{"error": map[string]string{"code": c, "message": msg}})
	}
	mux.HandleFunc("PUT /v1/keys/{job}", func(w http.ResponseWriter, r *http.Request) {
		var req struct {
			Key string `json:"key"`
		}
		b, _ := io.ReadAll(r.Body)
		if json.Unmarshal(b, &req) != nil {
			errJSON(w, 400, "bad_request", "bad body")
			return
		}
		k, err := authkey.Parse(req.Key)
		if err != nil {
			errJSON(w, 400, "bad_request", err.Error())
			return
		}
		f.mu.Lock()
		_, had := f.keys[r.PathValue("job")]
		f.keys[r.PathValue("job")] = k
		f.mu.Unlock()
		w.Write([]byte(`{"job":` + r.PathValue("job") + `,"fingerprint":"` + authkey.Fingerprint(k) + `"` + map[bool]string{true: `,"replaced":true`}[had] + "}\n"))
	})
	mux.HandleFunc("DELETE /v1/keys/{job}", func(w http.ResponseWriter, r *http.Request) {
		f.mu.Lock()
		k, ok := f.keys[r.PathValue("job")]
		delete(f.keys, r.PathValue("job"))
		f.mu.Unlock()
		if !ok {
			errJSON(w, 404, "not_found", "no key installed for job "+r.PathValue("job"))
			return
		}
		w.Write([]byte(`{"job":` + r.PathValue("job") + `,"fingerprint":"` + authkey.Fingerprint(k) + `"}` + "\n"))
	})
	mux.HandleFunc("GET /v1/keys", func(w http.ResponseWriter, r *http.Request) {
		f.mu.Lock()
		defer f.mu.Unlock()
		s := `{"keys":[`
		if k, ok := f.keys["7"]; ok {
			s += `{"job":7,"fingerprint":"` + authkey.Fingerprint(k) + `"}`
		}
		w.Write([]byte(s + "]}\n"))
	})
	srv := &http.Server{Handler: mux}
	go srv.Serve(ln)
	t.Cleanup(func() { srv.Close() })
	return sock
}

// TestKeysSetListRm drives a fake prismd: set sends the file's key (and
// nothing else) to PUT /v1/keys/7, list and rm print fingerprints, rm of
// an unknown job relays prismd's error, and nothing prints the key.
func TestKeysSetListRm(t *testing.T) {
	var fk fakeKeyd
	sock := fk.serve(t)
	p := filepath.Join(t.TempDir(), "job.key")
	if code, _, errs := keys("gen", p); code != 0 {
		t.Fatal(errs)
	}
	want, err := authkey.ReadFile(p)
	if err != nil {
		t.Fatal(err)
	}
	fp := authkey.Fingerprint(want)
	var outs []string
	run := func(wantCode int, wantOut string, args ...string) {
		t.Helper()
		code, out, errs := keys(args...)
		outs = append(outs, out, errs)
		if code != wantCode || !strings.Contains(out+errs, wantOut) {
			t.Fatalf("prismctl keys %s: exit %d\nstdout %q\nstderr %q\nwant exit %d and %q", strings.Join(args, " "), code, out, errs, wantCode, wantOut)
		}
	}
	run(0, "no job keys installed on "+sock, "list", "--socket", sock)
	run(0, "job 7: key "+fp+" installed on "+sock, "set", "--job", "7", "--key-file", p, "--socket", sock)
	run(0, "'prismctl allreduce' and 'bench' frames carry no tag", "set", "--job", "7", "--key-file", p, "--socket", sock)
	fk.mu.Lock()
	got := fk.keys["7"]
	fk.mu.Unlock()
	if !bytes.Equal(got, want) {
		t.Fatalf("prismd got key %x, the file holds %x", got, want)
	}
	t.Setenv("PRISM_AUTH_KEY_FILE", p)
	run(0, "replaced the job's earlier key", "set", "--job", "7", "--socket", sock)
	run(0, "JOB  FINGERPRINT\n7    "+fp+"\n", "list", "--socket", sock)
	run(0, `{"keys":[{"job":7,"fingerprint":"`+fp+`"}]}`, "list", "--socket", sock, "--json")
	run(0, "job 7: key "+fp+" removed from "+sock, "rm", "--job", "7", "--socket", sock)
	run(1, sock+" refused: no key installed for job 7", "rm", "--job", "7", "--socket", sock)
	for _, o := range outs {
		if strings.Contains(o, hex.EncodeToString(want)[:16]) {
			t.Fatalf("the key was printed: %q", o)
		}
	}
	// A prismd without the key routes.
	old := filepath.Join(t.TempDir(), "old.sock")
	ln, err := net.Listen("unix", old)
	if err != nil {
		t.Fatal(err)
	}
	srv := &http.Server{Handler: http.NewServeMux()}
	go srv.Serve(ln)
	defer srv.Close()
	run(1, "does not serve /v1/keys/7 (a prismd older than this prismctl", "set", "--job", "7", "--key-file", p, "--socket", old)
}

// TestAuthKeyFileFlag: the bitmap commands' --auth-key-file defaults to
// PRISM_AUTH_KEY_FILE and refuses a key file others can read.
func TestAuthKeyFileFlag(t *testing.T) {
	dir := t.TempDir()
	p := filepath.Join(dir, "k")
	if code, _, errs := keys("gen", p); code != 0 {
		t.Fatal(errs)
	}
	t.Setenv("PRISM_AUTH_KEY_FILE", p)
	var mf mcastFlags
	fs := newFlagSet()
	mf.register(fs)
	mf.registerAuth(fs)
	if err := fs.Parse(nil); err != nil {
		t.Fatal(err)
	}
	if err := mf.loadKey(); err != nil || len(mf.authKey) != 32 {
		t.Fatalf("from PRISM_AUTH_KEY_FILE: %d bytes, %v", len(mf.authKey), err)
	}
	os.Chmod(p, 0o640)
	mf = mcastFlags{}
	fs = newFlagSet()
	mf.registerAuth(fs)
	if err := fs.Parse([]string{"--auth-key-file", p}); err != nil {
		t.Fatal(err)
	}
	if err := mf.loadKey(); err == nil || !strings.Contains(err.Error(), "--auth-key-file") || !strings.Contains(err.Error(), "chmod 600") {
		t.Fatalf("mode 0640: %v", err)
	}
	mf = mcastFlags{}
	if err := mf.loadKey(); err != nil || mf.authKey != nil {
		t.Fatalf("no flag: key %x, %v", mf.authKey, err)
	}
}

func newFlagSet() *flag.FlagSet {
	fs := flag.NewFlagSet("t", flag.ContinueOnError)
	fs.SetOutput(io.Discard)
	return fs
}
