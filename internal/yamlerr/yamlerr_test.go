package yamlerr

import (
	"fmt"
	"strings"
	"testing"

	yaml "go.yaml.in/yaml/v3"
)

// The messages come from the YAML library itself, decoding real documents,
// so a change in its wording fails here rather than in front of a user.
func TestDescribe(t *testing.T) {
	type port struct {
		Name string `yaml:"name"`
		MTU  int    `yaml:"mtu"`
	}
	type doc struct {
		MTU     int     `yaml:"mtu"`
		Percent float64 `yaml:"percent"`
		Ring    bool    `yaml:"ring"`
		Ports   []port  `yaml:"ports"`
	}
	for _, c := range []struct{ src, want string }{
		{"mtu: abc\n", `mtu: "abc" is not a whole number`},
		{"percent: lots\n", `percent: "lots" is not a number`},
		{"ring: maybe\n", `ring: "maybe" is not true or false`},
		{"ports:\n  - {name: eth0, mtu: big}\n", `mtu: "big" is not a whole number`},
		{"mtu: 1500\nring: 'sure'\n", `ring: "sure" is not true or false`},
		// Right value, in quotes: the quotes are what is wrong.
		{"ring: \"false\"\n", `ring: "false" is in quotes, which makes it a string, not true or false; remove the quotes`},
		{"ports:\n  - {name: eth0, mtu: '9000'}\n", `mtu: "9000" is in quotes, which makes it a string, not a whole number; remove the quotes`},
		// The library shortens a long value in its message ("02:00:0...").
		{"mtu: 02:00:00:00:00:aa\n", `mtu: "02:00:00:00:00:aa" is not a whole number`},
	} {
		var d doc
		err := yaml.Unmarshal([]byte(c.src), &d)
		te, ok := err.(*yaml.TypeError)
		if !ok || len(te.Errors) != 1 {
			t.Fatalf("%q: %v, want one type error", c.src, err)
		}
		var line int
		var msg string
		if _, e := fmtSscanLine(te.Errors[0], &line, &msg); e != nil {
			t.Fatalf("%q: %q: %v", c.src, te.Errors[0], e)
		}
		if got := Describe([]byte(c.src), line, msg); got != c.want {
			t.Errorf("%q: Describe(%d, %q) = %q, want %q", c.src, line, msg, got, c.want)
		}
	}
	if got := Describe([]byte("a: b\n"), 1, "did not find expected key"); got != "" {
		t.Errorf("another message: %q, want \"\"", got)
	}
}

// fmtSscanLine splits the library's "line N: MESSAGE".
func fmtSscanLine(s string, line *int, msg *string) (int, error) {
	n, err := fmt.Sscanf(s, "line %d:", line)
	if err != nil {
		return n, err
	}
	*msg = strings.TrimSpace(s[strings.Index(s, ":")+1:])
	return n, nil
}

// TestKeyNotUTF8: a value that is not UTF-8 names no key, and does not
// panic (the config fuzzer found regexp.MustCompile failing on it).
func TestKeyNotUTF8(t *testing.T) {
	if k, full := Key([]byte("mtu: \xff\xfe00\n"), 1, "\xff\xfe00"); k != "" || full != "" {
		t.Fatalf("Key = %q, %q; want none", k, full)
	}
}
