package asmcheck

import (
	"bufio"
	"fmt"
	"os"
	"regexp"
	"strings"
	"testing"
)

var (
	// ymm matches a 256-bit register operand.
	ymm = regexp.MustCompile(`\bY([0-9]|1[0-5])\b`)
	// xmm matches a 128-bit register operand.
	xmm = regexp.MustCompile(`\bX([0-9]|1[0-5])\b`)
)

// LegacySSE lists "file:line: FUNC: INSTR" for every legacy SSE
// instruction in a TEXT function of the Go assembly file path that also
// names a Y register. An instruction is legacy SSE when it has an X
// register operand and its mnemonic does not start with V (VEX): MOVQ
// AX, X1 and MOVSD x+0(FP), X1 are, VMOVQ AX, X1 is not.
func LegacySSE(path string) ([]string, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	type ins struct {
		line int
		text string
	}
	var (
		fn     string
		usesY  bool
		body   []ins
		report []string
	)
	flush := func() {
		if usesY {
			for _, i := range body {
				report = append(report, fmt.Sprintf("%s:%d: %s: %s", path, i.line, fn, i.text))
			}
		}
		fn, usesY, body = "", false, nil
	}
	sc := bufio.NewScanner(f)
	for n := 1; sc.Scan(); n++ {
		line := sc.Text()
		if i := strings.Index(line, "//"); i >= 0 {
			line = line[:i]
		}
		line = strings.TrimSpace(line)
		if strings.HasPrefix(line, "TEXT ") {
			flush()
			fn = strings.TrimSuffix(strings.TrimSuffix(strings.Fields(line)[1], ","), "(SB)")
			continue
		}
		if fn == "" || line == "" || strings.HasSuffix(line, ":") {
			continue
		}
		fields := strings.Fields(line)
		mn := fields[0]
		ops := strings.Join(fields[1:], " ")
		if ymm.MatchString(ops) {
			usesY = true
		}
		if !xmm.MatchString(ops) || strings.HasPrefix(mn, "V") {
			continue
		}
		body = append(body, ins{n, line})
	}
	flush()
	return report, sc.Err()
}

// Check fails t for every legacy SSE instruction LegacySSE finds in the
// files at paths, or for a file it cannot read.
func Check(t testing.TB, paths ...string) {
	t.Helper()
	for _, p := range paths {
		bad, err := LegacySSE(p)
		if err != nil {
			t.Fatal(err)
		}
		for _, b := range bad {
			t.Errorf("legacy SSE in a function with 256-bit AVX: %s (use the VEX form)", b)
		}
	}
}
