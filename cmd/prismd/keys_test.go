package main

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/prismd/prismd/dataplane"
	"github.com/prismd/prismd/engine/bitmap"
)

// testKey is 32 bytes with a recognisable hex form, so a test can search
// every answer and log line for it.
var testKey = bytes.Repeat([]byte{0xa5, 0x3c, 0x96, 0x0f}, 8)

func fp(k []byte) string { s := sha256.Sum256(k); return hex.EncodeToString(s[:4]) }

func keyMux(kr *bitmap.Keyring, log *bytes.Buffer) *http.ServeMux {
	mux := http.NewServeMux()
	registerKeyRoutes(mux, kr, slog.New(slog.NewTextHandler(log, nil)))
	return mux
}

func do(t *testing.T, h http.Handler, method, path, body string) (int, string) {
	t.Helper()
	rec := httptest.NewRecorder()
	h.ServeHTTP(rec, httptest.NewRequest(method, path, strings.NewReader(body)))
	return rec.Code, rec.Body.String()
}

// TestKeysAPI installs, replaces, lists and removes keys through the
// handlers and checks the keyring the shards read, byte for byte; the
// key's hex (either case) appears in no answer and no log line.
func TestKeysAPI(t *testing.T) {
	kr := bitmap.NewKeyring()
	var log bytes.Buffer
	mux := keyMux(kr, &log)
	hexKey := hex.EncodeToString(testKey)
	var answers []string
	check := func(method, path, body string, wantCode int, want string) {
		t.Helper()
		code, got := do(t, mux, method, path, body)
		answers = append(answers, got)
		if code != wantCode || strings.TrimSpace(got) != want {
			t.Fatalf("%s %s: %d %s\nwant %d %s", method, path, code, got, wantCode, want)
		}
	}
	check("GET", "/v1/keys", "", 200, `{"keys":[]}`)
	check("PUT", "/v1/keys/7", `{"key":"`+hexKey+`"}`, 200, `{"job":7,"fingerprint":"`+fp(testKey)+`"}`)
	if !bytes.Equal(kr.Get(7), testKey) {
		t.Fatalf("keyring holds %x for job 7", kr.Get(7))
	}
	// Upper case and a trailing newline are the same key.
	k2 := append([]byte(nil), testKey...)
	k2[0] ^= 1
	check("PUT", "/v1/keys/18446744073709551615", `{"key": "`+strings.ToUpper(hex.EncodeToString(k2))+`\n"}`, 200,
		`{"job":18446744073709551615,"fingerprint":"`+fp(k2)+`"}`)
	check("PUT", "/v1/keys/7", `{"key":"`+hex.EncodeToString(k2)+`"}`, 200, `{"job":7,"fingerprint":"`+fp(k2)+`","replaced":true}`)
	if !bytes.Equal(kr.Get(7), k2) {
		t.Fatal("replacement not installed")
	}
	check("GET", "/v1/keys", "", 200, `{"keys":[{"job":7,"fingerprint":"`+fp(k2)+`"},{"job":18446744073709551615,"fingerprint":"`+fp(k2)+`"}]}`)
	check("DELETE", "/v1/keys/7", "", 200, `{"job":7,"fingerprint":"`+fp(k2)+`"}`)
	if kr.Get(7) != nil {
		t.Fatal("job 7 still has a key after DELETE")
	}
	check("DELETE", "/v1/keys/7", "", 404, `{"error":{"code":"not_found","message":"no key installed for job 7 (GET /v1/keys, or 'prismctl keys list', lists them)"}}`)
	check("GET", "/v1/keys", "", 200, `{"keys":[{"job":18446744073709551615,"fingerprint":"`+fp(k2)+`"}]}`)
	for _, a := range append(answers, log.String()) {
		for _, k := range [][]byte{testKey, k2} {
			if h := hex.EncodeToString(k); strings.Contains(strings.ToLower(a), h) {
				t.Fatalf("a key was served or logged: %s", a)
			}
		}
	}
	if !strings.Contains(log.String(), "fingerprint="+fp(testKey)) {
		t.Errorf("the install was not logged by fingerprint:\n%s", log.String())
	}
}

// TestKeysAPIErrors: every malformed request is a 400 (404 for unknown
// keys) that says what is wrong, installs nothing, and never echoes the
// key or the body.
func TestKeysAPIErrors(t *testing.T) {
	kr := bitmap.NewKeyring()
	var log bytes.Buffer
	mux := keyMux(kr, &log)
	hexKey := hex.EncodeToString(testKey)
	for _, c := range []struct {
		name, method, path, body string
		code                     int
		msg                      string
	}{
		{"short key", "PUT", "/v1/keys/1", `{"key":"` + hexKey[:62] + `"}`, 400, "the key is 31 bytes: want 32 to 256"},
		{"long key", "PUT", "/v1/keys/1", `{"key":"` + strings.Repeat(hexKey, 9) + `"}`, 400, "the key is 288 bytes: want 32 to 256"},
		{"not hex", "PUT", "/v1/keys/1", `{"key":"` + hexKey[:10] + "g" + hexKey[11:] + `"}`, 400, "character 11 is not 0-9, a-f or A-F"},
		{"odd digits", "PUT", "/v1/keys/1", `{"key":"` + hexKey + `a"}`, 400, "odd number of hex digits (65)"},
		{"empty key", "PUT", "/v1/keys/1", `{"key":""}`, 400, `no \"key\" in the body`},
		{"no key", "PUT", "/v1/keys/1", `{}`, 400, `no \"key\" in the body`},
		{"empty body", "PUT", "/v1/keys/1", ``, 400, "empty body"},
		{"unknown field", "PUT", "/v1/keys/1", `{"key":"` + hexKey + `","` + hexKey + `":1}`, 400, `a field other than \"key\"`},
		{"not JSON", "PUT", "/v1/keys/1", `key=` + hexKey, 400, "syntax error at byte 1"},
		{"bad string", "PUT", "/v1/keys/1", "{\"key\":\"" + hexKey + "\x01\"}", 400, "syntax error at byte"},
		{"truncated", "PUT", "/v1/keys/1", `{"key":`, 400, "body is not valid JSON (syntax error at byte 7)"},
		{"unclosed", "PUT", "/v1/keys/1", `{"key": "` + hexKey + `"`, 400, "body is not valid JSON (syntax error at byte"},
		{"number", "PUT", "/v1/keys/1", `{"key":12}`, 400, "wrong type"},
		{"trailing", "PUT", "/v1/keys/1", `{"key":"` + hexKey + `"} {"key":"` + hexKey + `"}`, 400, "data after the JSON object"},
		{"too large", "PUT", "/v1/keys/1", `{"key":"` + strings.Repeat(" ", 5000) + hexKey + `"}`, 400, "larger than 4096 bytes"},
		{"bad job", "PUT", "/v1/keys/x7", `{"key":"` + hexKey + `"}`, 400, `job \"x7\" is not a Job ID`},
		{"job overflow", "PUT", "/v1/keys/18446744073709551616", `{"key":"` + hexKey + `"}`, 400, "not a Job ID"},
		{"negative job", "DELETE", "/v1/keys/-1", ``, 400, "not a Job ID"},
		{"unknown job", "DELETE", "/v1/keys/99", ``, 404, "no key installed for job 99"},
	} {
		t.Run(c.name, func(t *testing.T) {
			log.Reset()
			code, body := do(t, mux, c.method, c.path, c.body)
			if code != c.code || !strings.Contains(body, c.msg) {
				t.Fatalf("%d %s\nwant %d containing %q", code, body, c.code, c.msg)
			}
			var e keyError
			if err := json.Unmarshal([]byte(body), &e); err != nil || e.Error.Code == "" {
				t.Fatalf("error body %s is not {\"error\": {\"code\", \"message\"}} (%v)", body, err)
			}
			if strings.Contains(strings.ToLower(body), hexKey[:16]) || strings.Contains(log.String(), hexKey[:16]) {
				t.Fatalf("key material echoed: %s / %s", body, log.String())
			}
			if j := kr.Jobs(); len(j) != 0 {
				t.Fatalf("a refused request installed keys for %v", j)
			}
		})
	}
	// Wrong methods are refused by the mux.
	if code, _ := do(t, mux, "POST", "/v1/keys/1", `{"key":"`+hexKey+`"}`); code != http.StatusMethodNotAllowed {
		t.Errorf("POST /v1/keys/1: %d, want 405", code)
	}
	if code, _ := do(t, mux, "PUT", "/v1/keys", `{"key":"`+hexKey+`"}`); code != http.StatusMethodNotAllowed {
		t.Errorf("PUT /v1/keys: %d, want 405", code)
	}
}

// TestKeysOnlyOnControlSocket starts the daemon's servers as prismd does
// (metrics_listen on TCP, control_listen on a unix socket) and shows that
// the key endpoints answer on the unix socket only: on the TCP listener
// PUT, DELETE and GET /v1/keys are refused and change nothing.
func TestKeysOnlyOnControlSocket(t *testing.T) {
	dir := t.TempDir()
	cfg := &Config{MetricsListen: "127.0.0.1:0", ControlListen: filepath.Join(dir, "ctl.sock")}
	opts := dataplane.Options{Logger: slog.New(slog.NewTextHandler(io.Discard, nil))}
	opts.Handler = handlerFactory(cfg) // sets node, as startDaemon does
	dp, err := dataplane.New(opts)
	if err != nil {
		t.Fatal(err)
	}
	d := &daemon{log: opts.Logger, cfg: cfg, dp: dp}
	if err := d.startServers(cfg); err != nil {
		dp.Close()
		t.Fatal(err)
	}
	defer d.close()
	kr := node.Keys()
	unix := &http.Client{Transport: &http.Transport{DialContext: func(ctx context.Context, _, _ string) (net.Conn, error) {
		return (&net.Dialer{}).DialContext(ctx, "unix", cfg.ControlListen)
	}}}
	req := func(c *http.Client, base, method, path, body string) (int, string) {
		t.Helper()
		r, err := http.NewRequest(method, base+path, strings.NewReader(body))
		if err != nil {
			t.Fatal(err)
		}
		resp, err := c.Do(r)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		b, _ := io.ReadAll(resp.Body)
		return resp.StatusCode, string(b)
	}
	hexKey := hex.EncodeToString(testKey)
	if code, body := req(unix, "http://prismd", "PUT", "/v1/keys/3", `{"key":"`+hexKey+`"}`); code != 200 {
		t.Fatalf("PUT on the control socket: %d %s", code, body)
	}
	if !bytes.Equal(kr.Get(3), testKey) {
		t.Fatal("the key did not reach the node's keyring")
	}
	tcp := "http://" + d.metrics.Addr().String()
	if code, _ := req(http.DefaultClient, tcp, "GET", "/metrics", ""); code != 200 {
		t.Fatalf("the TCP listener does not serve /metrics (%d): the test would prove nothing", code)
	}
	for _, c := range []struct{ method, path, body string }{
		{"PUT", "/v1/keys/4", `{"key":"` + hexKey + `"}`},
		{"PUT", "/v1/keys/3", `{"key":"` + strings.Repeat("00", 32) + `"}`},
		{"DELETE", "/v1/keys/3", ""},
		{"GET", "/v1/keys", ""},
	} {
		code, body := req(http.DefaultClient, tcp, c.method, c.path, c.body)
		if code != http.StatusNotFound {
			t.Errorf("%s %s on metrics_listen (TCP): %d %s, want 404", c.method, c.path, code, body)
		}
		if strings.Contains(body, fp(testKey)) {
			t.Errorf("%s %s on TCP served key information: %s", c.method, c.path, body)
		}
	}
	if j := kr.Jobs(); len(j) != 1 || j[0] != 3 || !bytes.Equal(kr.Get(3), testKey) {
		t.Fatalf("requests on the TCP listener changed the keyring: jobs %v", j)
	}
	if code, body := req(unix, "http://prismd", "GET", "/v1/keys", ""); code != 200 || strings.TrimSpace(body) != `{"keys":[{"job":3,"fingerprint":"`+fp(testKey)+`"}]}` {
		t.Fatalf("GET /v1/keys on the control socket: %d %s", code, body)
	}
}

// TestKeysDocExample replays the byte-exact exchange of docs/protocol.md
// 9.6 against the handlers: the document and the daemon agree.
func TestKeysDocExample(t *testing.T) {
	raw, err := os.ReadFile(filepath.Join("..", "..", "docs", "protocol.md"))
	if err != nil {
		t.Fatal(err)
	}
	doc := string(raw)
	i := strings.Index(doc, "#### 9.6 ")
	if i < 0 {
		t.Fatal("docs/protocol.md has no section 9.6")
	}
	doc = doc[i:]
	start := strings.Index(doc, "```\n")
	end := strings.Index(doc[start+4:], "```")
	if start < 0 || end < 0 {
		t.Fatal("section 9.6 has no example block")
	}
	mux := keyMux(bitmap.NewKeyring(), &bytes.Buffer{})
	var method, path, body string
	steps := 0
	for _, line := range strings.Split(strings.TrimSpace(doc[start+4:start+4+end]), "\n") {
		f := strings.Fields(line)
		switch {
		case len(f) >= 2 && (f[0] == "PUT" || f[0] == "GET" || f[0] == "DELETE"):
			method, path = f[0], f[1]
			if rest := strings.TrimSpace(strings.TrimPrefix(strings.TrimPrefix(line, f[0]), " "+f[1])); !strings.HasPrefix(rest, "(") {
				body = rest
			}
		case len(f) >= 1 && len(f[0]) == 3 && f[0][0] >= '1' && f[0][0] <= '5':
			want := strings.TrimSpace(strings.TrimPrefix(line, f[0]))
			code, got := do(t, mux, method, path, body)
			if fmt.Sprint(code) != f[0] || got != want+"\n" {
				t.Fatalf("%s %s %s: %d %q\ndocument: %s %q", method, path, body, code, got, f[0], want+"\n")
			}
			steps++
		default:
			t.Fatalf("unreadable example line %q", line)
		}
	}
	if steps != 5 {
		t.Fatalf("replayed %d exchanges, the example has 5", steps)
	}
}
