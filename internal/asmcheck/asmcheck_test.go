package asmcheck

import (
	"strings"
	"testing"
)

// TestLegacySSE: the two legacy moves of the function that uses Y
// registers are reported, with their lines; the SSE-only and the VEX-only
// functions are not.
func TestLegacySSE(t *testing.T) {
	got, err := LegacySSE("testdata/mixed.s")
	if err != nil {
		t.Fatal(err)
	}
	want := []string{
		"testdata/mixed.s:5: ·bad: MOVSD  x+0(FP), X1",
		"testdata/mixed.s:7: ·bad: MOVQ   AX, X2",
	}
	if strings.Join(got, "\n") != strings.Join(want, "\n") {
		t.Errorf("reported:\n%s\nwant:\n%s", strings.Join(got, "\n"), strings.Join(want, "\n"))
	}
}

func TestLegacySSEMissingFile(t *testing.T) {
	if _, err := LegacySSE("testdata/none.s"); err == nil {
		t.Error("no error for a missing file")
	}
}
