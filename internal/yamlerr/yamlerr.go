package yamlerr

import (
	"fmt"
	"regexp"
	"strconv"
	"strings"
)

// typeErr is the library's wrong-type message: the value's tag, the value
// and the Go type it did not fit.
var typeErr = regexp.MustCompile("cannot unmarshal !!(\\w+) `([^`]*)` into (\\S+)")

// words names the Go types of the schemas as a person would.
var words = map[string]string{"int": "a whole number", "uint": "a whole number", "uint16": "a whole number",
	"uint32": "a whole number", "uint64": "a whole number", "float64": "a number", "bool": "true or false",
	"string": "a string", "time.Duration": "a duration such as 500ms or 2s", "[]string": "a list, e.g. [a, b]"}

// Want reads a wrong-type message into the value and what the key wants
// ("a whole number"); ok false for any other message.
func Want(msg string) (val, want string, ok bool) {
	m := typeErr.FindStringSubmatch(msg)
	if m == nil {
		return "", "", false
	}
	if want = words[m[3]]; want == "" {
		want = m[3]
	}
	return m[2], want, true
}

// Key finds the key that holds val on line (1-based) of src, in block
// ("mtu: abc") or flow ("{kind: host, mtu: abc}") style, and the value as
// written (the library shortens long ones to their first characters and
// "..."); "" if no key on the line holds it.
func Key(src []byte, line int, val string) (key, full string) {
	lines := strings.Split(string(src), "\n")
	if line < 1 || line > len(lines) {
		return "", ""
	}
	rest := ""
	if p, ok := strings.CutSuffix(val, "..."); ok {
		val, rest = p, `[^,}#'"\s]*`
	}
	// A value that is not UTF-8 makes no regexp (QuoteMeta leaves its
	// bytes as they are): no key is named then, rather than a panic (the
	// config fuzzer's \xff\xfe00000000).
	re, err := regexp.Compile(`([A-Za-z_][A-Za-z0-9_]*):\s*["']?(` + regexp.QuoteMeta(val) + rest + `)["']?\s*(?:[,}#]|$)`)
	if err != nil {
		return "", ""
	}
	m := re.FindStringSubmatch(lines[line-1])
	if m == nil {
		return "", ""
	}
	return m[1], m[2]
}

// Describe rewrites one wrong-type message found on line of src as
// `KEY: "VAL" is not WANT`, or returns "" when msg is not one or no key
// on the line holds the value.
func Describe(src []byte, line int, msg string) string {
	val, want, ok := Want(msg)
	if !ok {
		return ""
	}
	k, full := Key(src, line, val)
	if k == "" {
		return ""
	}
	if quoted(src, line, k, full) && fits(full, want) {
		// "false" in quotes is a string to YAML: the value is right,
		// the quotes are not.
		return fmt.Sprintf("%s: %q is in quotes, which makes it a string, not %s; remove the quotes", k, full, want)
	}
	return fmt.Sprintf("%s: %q is not %s", k, full, want)
}

// quoted reports whether key's value full is written in quotes on line.
func quoted(src []byte, line int, key, full string) bool {
	l := strings.Split(string(src), "\n")[line-1]
	for _, q := range []string{`"`, `'`} {
		// Compile, not MustCompile: a value that is not UTF-8 makes no
		// regexp (see Key).
		re, err := regexp.Compile(regexp.QuoteMeta(key) + `:\s*` + q + regexp.QuoteMeta(full) + q)
		if err == nil && re.MatchString(l) {
			return true
		}
	}
	return false
}

// fits reports whether v, unquoted, would be what want names.
func fits(v, want string) bool {
	switch want {
	case "true or false":
		_, err := strconv.ParseBool(v)
		return err == nil
	case "a whole number":
		_, err := strconv.ParseInt(v, 0, 64)
		return err == nil
	case "a number":
		_, err := strconv.ParseFloat(v, 64)
		return err == nil
	}
	return false
}
