// This file owns the robustness and differential test. Frames: every strict
// prefix of every valid frame, seeded random corruptions of them, and random
// garbage. Rules: tshark never shows a Lua error or the dissector's internal-
// error item; every prefix is reported as truncated or as a length mismatch;
// and a corrupted frame carries prismd expert info exactly when package parser
// (what a prismd node runs) rejects it, so the dissector flags what a node
// drops and nothing else.

package wireshark

import (
	"bytes"
	"fmt"
	"math/rand/v2"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"

	"github.com/prismd/prismd/parser"
)

// expertFields are the dissector's expert items (prismd.lua, `e` table).
var expertFields = []string{
	"prismd.expert.malformed", "prismd.expert.truncated", "prismd.expert.length", "prismd.expert.reserved",
	"prismd.expert.version", "prismd.expert.unknown", "prismd.expert.rule", "prismd.expert.internal",
}

// parserVerdict decodes a whole frame with package parser, with no
// per-operation limits (the dissector does not know them either).
func parserVerdict(f []byte) error {
	if len(f) < parser.EthLen+parser.CWLen {
		return parser.ErrTruncated
	}
	switch parser.Class(f[parser.CWOff+1]) {
	case parser.ClassControl:
		var x parser.Control
		return x.Decode(f, parser.Limits{})
	case parser.ClassData, parser.ClassResult:
		var x parser.Data
		return x.Decode(f, parser.Limits{})
	case parser.ClassProgress:
		var x parser.Progress
		return x.Decode(f, parser.Limits{})
	}
	_, err := parser.Classify(f)
	return err
}

// verdict is what tshark showed for one frame.
type verdict struct {
	experts  map[string]bool // prismd expert fields present
	luaError bool
	messages string
}

func TestDissectorRobust(t *testing.T) {
	t.Parallel() // each test runs its own tshark; they share nothing
	valid := validCases(t)
	var frames [][]byte
	// Prefixes: every length from the first PRISM byte to one short of the
	// frame. Only unpadded frames: a prefix of those always cuts a declared
	// structure.
	for _, c := range valid {
		if strings.HasSuffix(c.name, "-padded") {
			continue
		}
		for n := parser.EthLen + 1; n < len(c.frame); n++ {
			frames = append(frames, slices.Clone(c.frame[:n]))
		}
	}
	nPrefix := len(frames)

	// Corruptions: 1-3 random bytes of the PRISM part replaced, and random
	// garbage after a valid control word. Fixed seed: a failure reproduces.
	rng := rand.New(rand.NewPCG(0x5052_4953, 0x4d44))
	for _, c := range valid {
		for range 150 {
			b := slices.Clone(c.frame)
			for range 1 + rng.IntN(3) {
				// Half of the hits land in the first 80 bytes after the Ethernet
				// header, where the headers and the extension are: uniform hits
				// would mostly land in values.
				span := len(b) - parser.EthLen
				if rng.IntN(2) == 0 {
					span = min(span, 80)
				}
				b[parser.EthLen+rng.IntN(span)] = byte(rng.Uint32())
			}
			frames = append(frames, b)
		}
	}
	for range 200 {
		b := append(ethHdr(), 0x10, byte(1+rng.IntN(4)))
		garbage := make([]byte, rng.IntN(400))
		for i := range garbage {
			garbage[i] = byte(rng.Uint32())
		}
		frames = append(frames, append(b, garbage...))
	}

	pcap := filepath.Join(t.TempDir(), "robust.pcap")
	writePcap(t, pcap, frames)
	got := runTsharkVerdicts(t, pcap, len(frames))

	var fails []string
	for i, f := range frames {
		v := got[i]
		id := fmt.Sprintf("frame %d (len %d, % x...)", i+1, len(f), f[parser.EthLen:min(len(f), parser.EthLen+8)])
		if v.luaError || v.experts["prismd.expert.internal"] {
			fails = append(fails, fmt.Sprintf("%s: Lua/internal error: %s", id, v.messages))
			continue
		}
		if i < nPrefix {
			if !v.experts["prismd.expert.truncated"] && !v.experts["prismd.expert.length"] {
				fails = append(fails, fmt.Sprintf("%s: prefix not reported as truncated: %q", id, v.messages))
			}
			continue
		}
		err := parserVerdict(f)
		if flagged := len(v.experts) > 0; flagged != (err != nil) {
			fails = append(fails, fmt.Sprintf("%s: parser says %v, dissector experts %q", id, err, v.messages))
		}
	}
	for i, s := range fails {
		if i == 20 {
			t.Errorf("... and %d more", len(fails)-20)
			break
		}
		t.Error(s)
	}
	t.Logf("%d frames (%d prefixes, %d corrupted or random), %d failures", len(frames), nPrefix, len(frames)-nPrefix, len(fails))
}

// runTsharkVerdicts runs tshark once and returns, per frame, which prismd
// expert items it shows and whether a Lua error occurred.
func runTsharkVerdicts(t *testing.T, pcap string, n int) []verdict {
	t.Helper()
	bin, err := exec.LookPath("tshark")
	if err != nil {
		t.Fatalf("tshark not found (%v): run make deps (installs tshark)", err)
	}
	args := []string{"-n", "-X", "lua_script:" + luaScript(t), "-r", pcap, "-T", "fields", "-E", "occurrence=a", "-e", "frame.number"}
	for _, f := range expertFields {
		args = append(args, "-e", f)
	}
	args = append(args, "-e", "_ws.lua.error", "-e", "_ws.expert.message")
	home := t.TempDir()
	cmd := exec.Command(bin, args...)
	cmd.Env = append(os.Environ(), "HOME="+home, "XDG_CONFIG_HOME="+filepath.Join(home, ".config"))
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	if err := cmd.Run(); err != nil {
		t.Fatalf("tshark: %v\nstderr:\n%s", err, stderr.String())
	}
	checkStderr(t, stderr.String())
	out := make([]verdict, n)
	lines := strings.Split(strings.TrimRight(stdout.String(), "\n"), "\n")
	if len(lines) != n {
		t.Fatalf("tshark printed %d lines, want %d", len(lines), n)
	}
	for _, line := range lines {
		cols := strings.Split(line, "\t")
		if len(cols) != 1+len(expertFields)+2 {
			t.Fatalf("unexpected tshark line %q", line)
		}
		num, err := strconv.Atoi(cols[0])
		if err != nil || num < 1 || num > n {
			t.Fatalf("unexpected frame number in %q", line)
		}
		v := verdict{experts: map[string]bool{}, luaError: cols[1+len(expertFields)] != "", messages: cols[2+len(expertFields)]}
		for j, f := range expertFields {
			if cols[1+j] != "" {
				v.experts[f] = true
			}
		}
		out[num-1] = v
	}
	return out
}
