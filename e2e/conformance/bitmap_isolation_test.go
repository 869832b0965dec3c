package conformance

import (
	"crypto/hmac"
	"crypto/rand"
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/prismd/prismd/deploy"
)

// bmVerifyTag checks the AUTH tag of a received DATA/RESULT (bytes after
// the Ethernet header) under key (8.6): the first 16 bytes of
// HMAC-SHA256(key, control word .. end of body with the tag zeroed).
func bmVerifyTag(p []byte, key []byte) bool {
	if len(p) < 2+dataHdr+20 {
		return false
	}
	el := int(be.Uint16(p[2+dataHdr:]))
	bl := int(be.Uint16(p[2+34:]))
	end := 2 + dataHdr + el + bl
	if el < 36 || end > len(p) {
		return false
	}
	m := append([]byte(nil), p[:end]...)
	tag := append([]byte(nil), m[2+dataHdr+el-16:2+dataHdr+el]...)
	for i := 2 + dataHdr + el - 16; i < 2+dataHdr+el; i++ {
		m[i] = 0
	}
	h := hmac.New(sha256.New, key)
	h.Write(m)
	return hmac.Equal(tag, h.Sum(nil)[:16])
}

func bmFingerprint(key []byte) string {
	s := sha256.Sum256(key)
	return hex.EncodeToString(s[:4])
}

// testTenant: 8.5. A contribution whose Tenant differs from the context's
// is dropped before it touches any state; the aggregate excludes it.
func (b *bmEnv) testTenant(t *testing.T) {
	s := b.activate(t, bmSpec{Tenant: 7, Timeout: 500})
	n := int(s.VecLen)
	v := [4][]float32{nil, bmVals(1, n), bmVals(2, n), bmVals(3, n)}
	const tok = 0xE1
	before := b.metrics()
	h := b.hosts[0].mark()
	from := h
	// h3's P-BM under tenant 8 and tenant 0 first: if either touched the
	// aggregation, h3's real contribution would be a duplicate and the sum
	// would be wrong; h4's endpoints under tenant 8: if merged, the
	// aggregate would complete without h4's real contribution.
	b.send(t, 2, b.contribution(s, 2, bmExt(encList, 8, tok, 0, bmMasks[2]...), bmVals(9, n)), nil)
	b.send(t, 2, b.contribution(s, 2, bmExt(encList, 0, tok, 0, bmMasks[2]...), bmVals(8, n)), nil)
	b.send(t, 3, b.contribution(s, 3, bmExt(encList, 8, tok, 0, bmMasks[3]...), bmVals(9, n)), nil)
	time.Sleep(30 * time.Millisecond)
	b.send(t, 1, b.contribution(s, 1, bmExt(encFlat, 7, tok, 0, bmMasks[1]...), v[1]), nil)
	b.send(t, 2, b.contribution(s, 2, bmExt(encFlat, 7, tok, 0, bmMasks[2]...), v[2]), nil)
	time.Sleep(50 * time.Millisecond)
	if xs := b.emittedFor(s, h, tok); len(xs) > 0 {
		t.Fatalf("an aggregate went up without h4's tenant-7 contribution (P-BM %v): a tenant-8 frame was merged (8.5)", xs[0].Set)
	}
	b.send(t, 3, b.contribution(s, 3, bmExt(encFlat, 7, tok, 0, bmMasks[3]...), v[3]), nil)
	x, ok := b.waitEmitted(s, &from, tok, time.Second)
	if !ok {
		t.Fatal("no aggregate after the tenant-7 contributions")
	}
	b.checkEmitted(t, s, x, tok, bmABM(), bmSum(v[1], v[2], v[3]), false)
	after := b.metrics()
	if d := bmDelta(before, after, bmSeries("tenant_mismatch")); d != 3 {
		t.Errorf("3 contributions of another tenant: %s grew by %v, want 3 (10) (%s)", bmSeries("tenant_mismatch"), d, dropDiff(before, after))
	}
	if d := bmDelta(before, after, bmDuplicates); d != 0 {
		t.Errorf("duplicates counted %v: a mismatched tenant's P-BM touched the aggregation state (8.5)", d)
	}
	b.abort(t, s)

	// A context without tenant (0) drops a frame that names one.
	s0 := b.activate(t, bmSpec{})
	before = b.metrics()
	m := b.marks()
	b.send(t, 0, b.multicast(s0, bmExt(encList, 5, 0xE2, 0, 0, 64), bmVals(1, n)), nil)
	time.Sleep(80 * time.Millisecond)
	for k := 1; k <= 3; k++ {
		if xs := b.collect(s0, k, m[k], classResult); len(xs) > 0 {
			t.Errorf("tenant-0 context: h%d got a copy of a tenant-5 RESULT (8.5)", k+1)
		}
	}
	if d := bmDelta(before, b.metrics(), bmSeries("tenant_mismatch")); d != 1 {
		t.Errorf("tenant-5 RESULT in a tenant-0 context: tenant_mismatch grew by %v, want 1", d)
	}
	b.abort(t, s0)
}

// testAuth: 8.6 with the job key installed over prismd's control socket
// (9.6): frames without AUTH or with a wrong tag are dropped (auth_failed);
// signed frames are accepted and everything the node derives is signed;
// once the key is removed, tags are ignored and derived frames unsigned.
func (b *bmEnv) testAuth(t *testing.T) {
	key := make([]byte, 32)
	rand.Read(key)
	other := make([]byte, 32)
	rand.Read(other)
	job := b.jobID ^ 0x5A5A0000
	st, body := b.keyRequest(t, "PUT", fmt.Sprintf("/v1/keys/%d", job), `{"key":"`+hex.EncodeToString(key)+`"}`)
	if want := fmt.Sprintf(`{"job":%d,"fingerprint":"%s"}`+"\n", job, bmFingerprint(key)); st != 200 || body != want {
		t.Fatalf("PUT the job key: %d %q, want 200 %q (9.6)", st, body, want)
	}
	keyed := true
	defer func() {
		if keyed {
			b.keyRequest(t, "DELETE", fmt.Sprintf("/v1/keys/%d", job), "")
		}
	}()
	s := b.defaults(bmSpec{ID: ident{Job: job, Group: 3, GroupGen: 1, Op: 0x200, OpGen: 1}, Timeout: 500})
	s = b.activate(t, s)
	n := int(s.VecLen)
	vals := bmVals(1, n)
	dbm := []uint32{0, 64, 200}
	rx := func(t *testing.T, m [4]int) [4][]bmRx {
		var r [4][]bmRx
		for k := 0; k < 4; k++ {
			r[k] = b.collect(s, k, m[k], classResult)
		}
		return r
	}
	// Rejected frames (auth_failed, no copy).
	type tc struct {
		name  string
		build func() []byte
	}
	mk := func(tok uint64, xf uint8) dataFrame {
		return b.multicast(s, bmExt(encList, 0, tok, xf, dbm...), vals)
	}
	signed := func(d dataFrame, k []byte) []byte {
		p := d.encode()
		signFrame(p, k)
		return p
	}
	bad := []tc{
		{"no_auth", func() []byte { return mk(0xF1, 0).encode() }},
		{"zero_tag", func() []byte { return mk(0xF2, xfAuth).encode() }},
		{"other_key", func() []byte { return signed(mk(0xF3, xfAuth), other) }},
		{"value_changed_after_signing", func() []byte {
			p := signed(mk(0xF4, xfAuth), key)
			p[len(p)-1] ^= 0x01
			return p
		}},
		{"token_changed_after_signing", func() []byte {
			p := signed(mk(0xF5, xfAuth), key)
			p[2+dataHdr+15] ^= 0x01
			return p
		}},
	}
	for _, c := range bad {
		before := b.metrics()
		m := b.marks()
		if err := b.hosts[0].send(b.port[0], c.build()); err != nil {
			t.Fatal(err)
		}
		got := b.waitDelta(before, func(text string) float64 { return series(text, bmSeries("auth_failed")) }, 1, 300*time.Millisecond)
		if got != 1 {
			t.Errorf("%s: %s grew by %v, want 1 (8.6, 10) (%s)", c.name, bmSeries("auth_failed"), got, dropDiff(before, b.metrics()))
		}
		for k, xs := range rx(t, m) {
			if len(xs) > 0 {
				t.Errorf("%s: h%d got a copy of a frame without a valid tag (8.6)", c.name, k+1)
			}
		}
	}
	// A signed RESULT: copies, each signed anew under the job key.
	m := b.marks()
	d := mk(0xF6, xfAuth)
	b.send(t, 0, d, key)
	time.Sleep(100 * time.Millisecond)
	got := rx(t, m)
	for k := 1; k <= 3; k++ {
		if len(got[k]) != 1 {
			t.Errorf("signed RESULT: h%d got %d copies, want 1", k+1, len(got[k]))
			continue
		}
		x := got[k][0]
		b.checkResultCopy(t, s, x, d, bmMasks[k][:1])
		if x.D.Ext == nil || x.D.Ext.XFlags&xfAuth == 0 || !bmVerifyTag(x.F.Payload, key) {
			t.Errorf("signed RESULT: h%d copy is not signed with the job key (8.6: a node that changes covered bytes computes a new tag)", k+1)
		}
	}
	// Aggregation: an unsigned contribution is dropped; the signed ones
	// merge and the aggregate is signed.
	const tok = 0xF7
	before := b.metrics()
	h := b.hosts[0].mark()
	from := h
	v := [4][]float32{nil, bmVals(1, n), bmVals(2, n), bmVals(3, n)}
	b.send(t, 1, b.contribution(s, 1, bmExt(encList, 0, tok, 0, bmMasks[1]...), bmVals(9, n)), nil)
	b.send(t, 3, b.contribution(s, 3, bmExt(encList, 0, tok, xfAuth, bmMasks[3]...), bmVals(9, n)), other)
	time.Sleep(30 * time.Millisecond)
	for k := 1; k <= 2; k++ {
		b.send(t, k, b.contribution(s, k, bmExt(encFlat, 0, tok, xfAuth, bmMasks[k]...), v[k]), key)
	}
	time.Sleep(50 * time.Millisecond)
	if xs := b.emittedFor(s, h, tok); len(xs) > 0 {
		t.Fatalf("aggregate sent up without h4's signed contribution: P-BM %v", xs[0].Set)
	}
	b.send(t, 3, b.contribution(s, 3, bmExt(encFlat, 0, tok, xfAuth, bmMasks[3]...), v[3]), key)
	x, ok := b.waitEmitted(s, &from, tok, time.Second)
	if !ok {
		t.Fatal("no aggregate of signed contributions")
	}
	b.checkEmitted(t, s, x, tok, bmABM(), bmSum(v[1], v[2], v[3]), false)
	if x.D.Ext == nil || x.D.Ext.XFlags&xfAuth == 0 || !bmVerifyTag(x.F.Payload, key) {
		t.Errorf("the aggregate of a keyed job is not signed with the job key (8.6)")
	}
	if dd := bmDelta(before, b.metrics(), bmSeries("auth_failed")); dd != 2 {
		t.Errorf("unsigned and wrongly signed contributions: auth_failed grew by %v, want 2", dd)
	}

	// Key removed: AUTH tags are ignored (lengths still checked) and what
	// the node derives is sent without AUTH (8.6).
	st, body = b.keyRequest(t, "DELETE", fmt.Sprintf("/v1/keys/%d", job), "")
	keyed = false
	if want := fmt.Sprintf(`{"job":%d,"fingerprint":"%s"}`+"\n", job, bmFingerprint(key)); st != 200 || body != want {
		t.Errorf("DELETE the job key: %d %q, want 200 %q (9.6)", st, body, want)
	}
	m = b.marks()
	d1 := mk(0xF8, xfAuth) // zero tag
	b.send(t, 0, d1, nil)
	d2 := mk(0xF9, 0)
	b.send(t, 0, d2, nil)
	time.Sleep(100 * time.Millisecond)
	got = rx(t, m)
	for k := 1; k <= 3; k++ {
		if len(got[k]) != 2 {
			t.Errorf("no key: h%d got %d copies of 2 RESULTs (one with a zero AUTH tag, one without AUTH), want 2 (8.6: jobs without a key ignore the tag)", k+1, len(got[k]))
			continue
		}
		for _, x := range got[k] {
			orig := d1
			if x.token() == 0xF9 {
				orig = d2
			}
			b.checkResultCopy(t, s, x, orig, bmMasks[k][:1])
			if x.D.Ext != nil && x.D.Ext.XFlags&xfAuth != 0 {
				t.Errorf("no key: h%d copy of token %#x carries AUTH (8.6: a switch holding no key sends what it derives without AUTH)", k+1, x.token())
			}
		}
	}
	b.abort(t, s)
}

// testKeysAPI: the job-key endpoints of prismd's control socket (9.6),
// byte for byte where the spec shows them.
func (b *bmEnv) testKeysAPI(t *testing.T) {
	const k7 = "000102030405060708090a0b0c0d0e0f101112131415161718191a1b1c1d1e1f"
	kb, _ := hex.DecodeString(k7)
	if fp := bmFingerprint(kb); fp != "630dcd29" {
		t.Errorf("9.6 example: SHA-256 of the key 00..1f starts %s, the spec prints 630dcd29", fp)
	}
	type step struct {
		method, path, body string
		status             int
		want               string // exact answer; prefix: when it ends with "*"
	}
	steps := []step{
		{"GET", "/v1/keys", "", 200, `{"keys":[]}` + "\n"},
		{"PUT", "/v1/keys/7", `{"key":"` + k7 + `"}`, 200, `{"job":7,"fingerprint":"630dcd29"}` + "\n"},
		{"PUT", "/v1/keys/7", `{"key":"` + k7 + `"}`, 200, `{"job":7,"fingerprint":"630dcd29","replaced":true}` + "\n"},
		// Upper case with white space around the digits: the same key.
		{"PUT", "/v1/keys/7", `{"key":"  ` + strings.ToUpper(k7) + ` "}`, 200, `{"job":7,"fingerprint":"630dcd29","replaced":true}` + "\n"},
		{"PUT", "/v1/keys/18446744073709551615", `{"key":"` + k7 + k7 + `"}`, 200, `{"job":18446744073709551615,"fingerprint":"` + bmFingerprint(append(append([]byte(nil), kb...), kb...)) + `"}` + "\n"},
		{"GET", "/v1/keys", "", 200, `{"keys":[{"job":7,"fingerprint":"630dcd29"},{"job":18446744073709551615,"fingerprint":"` + bmFingerprint(append(append([]byte(nil), kb...), kb...)) + `"}]}` + "\n"},
		{"DELETE", "/v1/keys/18446744073709551615", "", 200, `*`},
		{"DELETE", "/v1/keys/7", "", 200, `{"job":7,"fingerprint":"630dcd29"}` + "\n"},
		{"DELETE", "/v1/keys/7", "", 404, `{"error":{"code":"not_found","message":"no key installed for job 7*`},
		{"PUT", "/v1/keys/x7", `{"key":"` + k7 + `"}`, 400, `{"error":{"code":"bad_request","message":"job \"x7\" is not a Job ID*`},
		{"PUT", "/v1/keys/18446744073709551616", `{"key":"` + k7 + `"}`, 400, `{"error":{"code":"bad_request","message":"job \"18446744073709551616\" is not a Job ID*`},
		{"PUT", "/v1/keys/7", `{"key":"` + k7 + `"` + strings.Repeat(" ", 4096) + `}`, 400, `{"error":{"code":"bad_request","message":"body larger than 4096 bytes*`},
		{"PUT", "/v1/keys/7", ``, 400, `{"error":{"code":"bad_request","message":"empty body*`},
		{"PUT", "/v1/keys/7", `{"key":}`, 400, `{"error":{"code":"bad_request","message":"body is not valid JSON (syntax error at byte *`},
		{"PUT", "/v1/keys/7", `hello`, 400, `{"error":{"code":"bad_request","message":"body is not valid JSON (syntax error at byte *`},
		{"PUT", "/v1/keys/7", `{"key":5}`, 400, `{"error":{"code":"bad_request","message":"body has the wrong type at byte *`},
		{"PUT", "/v1/keys/7", `["` + k7 + `"]`, 400, `{"error":{"code":"bad_request","message":"body has the wrong type at byte *`},
		{"PUT", "/v1/keys/7", `{"key":"` + k7 + `","job":7}`, 400, `{"error":{"code":"bad_request","message":"body has a field other than \"key\"*`},
		{"PUT", "/v1/keys/7", `{"key":"` + k7 + `"} {}`, 400, `{"error":{"code":"bad_request","message":"body has data after the JSON object*`},
		{"PUT", "/v1/keys/7", `{}`, 400, `{"error":{"code":"bad_request","message":"no \"key\" in the body*`},
		{"PUT", "/v1/keys/7", `{"key":""}`, 400, `{"error":{"code":"bad_request","message":"no \"key\" in the body*`},
		{"PUT", "/v1/keys/7", `{"key":"` + k7[:10] + `zz` + k7[12:] + `"}`, 400, `{"error":{"code":"bad_request","message":"job key: the key is not hex: character *`},
		{"PUT", "/v1/keys/7", `{"key":"` + k7[:63] + `"}`, 400, `{"error":{"code":"bad_request","message":"job key: the key has an odd number of hex digits (63)*`},
		{"PUT", "/v1/keys/7", `{"key":"` + k7[:32] + `"}`, 400, `{"error":{"code":"bad_request","message":"job key: the key is 16 bytes: want 32 to 256*`},
		{"PUT", "/v1/keys/7", `{"key":"` + strings.Repeat("ab", 257) + `"}`, 400, `{"error":{"code":"bad_request","message":"job key: the key is 257 bytes: want 32 to 256*`},
		{"GET", "/v1/keys", "", 200, `{"keys":[]}` + "\n"},
	}
	for _, s := range steps {
		st, body, ct := b.keyRequestCT(t, s.method, s.path, s.body)
		ok := st == s.status
		if strings.HasSuffix(s.want, "*") {
			ok = ok && strings.HasPrefix(body, strings.TrimSuffix(s.want, "*")) && strings.HasSuffix(body, "\n")
		} else {
			ok = ok && body == s.want
		}
		if !ok {
			t.Errorf("%s %s %.60q: %d %q, want %d %q (9.6)", s.method, s.path, s.body, st, body, s.status, s.want)
		}
		if !strings.HasPrefix(ct, "application/json") {
			t.Errorf("%s %s: Content-Type %q, want application/json (9.6)", s.method, s.path, ct)
		}
		if lb := strings.ToLower(body); strings.Contains(lb, k7[8:40]) || strings.Contains(lb, "abababababab") {
			t.Errorf("%s %s: the answer quotes the key or the body (9.6: never)", s.method, s.path)
		}
	}
	// A body cut short is not valid JSON either (9.6: "not JSON").
	t.Run("truncated_json", func(t *testing.T) {
		for _, body := range []string{`{"key":`, `{"key":"` + k7 + `"`, `{`} {
			st, rb := b.keyRequest(t, "PUT", "/v1/keys/7", body)
			want := `{"error":{"code":"bad_request","message":"body is not valid JSON (syntax error at byte `
			if st != 400 || !strings.HasPrefix(rb, want) {
				t.Errorf("(finding B%d) PUT body %.20q: %d %q, want 400 %q... (9.6)", bmFTruncJSON, body, st, rb, want)
			}
		}
	})
	// Another method: refused by the server (405).
	if st, _ := b.keyRequest(t, "POST", "/v1/keys/7", `{"key":"`+k7+`"}`); st != 405 {
		t.Errorf("POST /v1/keys/7: %d, want 405 (9.6)", st)
	}
	// The key endpoints exist on the control socket only: 404 on the
	// metrics listener.
	resp, err := b.lab.HTTPClient("sw1").Get("http://" + deploy.MetricsAddr + "/v1/keys")
	if err != nil {
		t.Errorf("GET /v1/keys on the metrics listener: %v", err)
	} else {
		resp.Body.Close()
		if resp.StatusCode != 404 {
			t.Errorf("GET /v1/keys on the metrics listener: %d, want 404 (9.6)", resp.StatusCode)
		}
	}
}
