package authkey

import (
	"bytes"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
)

var key32 = bytes.Repeat([]byte{0xde, 0xad, 0xbe, 0xef}, 8)

func TestParse(t *testing.T) {
	h := hex.EncodeToString(key32)
	for _, s := range []string{h, strings.ToUpper(h), " " + h + "\n", h + "\r\n"} {
		k, err := Parse(s)
		if err != nil || !bytes.Equal(k, key32) {
			t.Fatalf("Parse(%q) = %x, %v", s, k, err)
		}
	}
	long := strings.Repeat("ab", MaxLen)
	if k, err := Parse(long); err != nil || len(k) != MaxLen {
		t.Fatalf("a %d-byte key: %v", MaxLen, err)
	}
	for _, c := range []struct{ in, msg string }{
		{"", "empty"},
		{"  \n", "empty"},
		{h[:62], "31 bytes"},
		{long + "ab", "257 bytes"},
		{h + "a", "odd number of hex digits (65)"},
		{h[:5] + "x" + h[6:], "character 6 is not"},
		{h[:5] + " " + h[6:], "character 6 is not"},
		{"0x" + h, "character 2 is not"},
	} {
		_, err := Parse(c.in)
		if err == nil || !errors.Is(err, ErrKey) || !strings.Contains(err.Error(), c.msg) {
			t.Errorf("Parse(%.20q...): %v, want an ErrKey containing %q", c.in, err, c.msg)
			continue
		}
		// An error never quotes key material (a bad digit included).
		if strings.Contains(err.Error(), h[:8]) || strings.Contains(err.Error(), "'x'") || strings.Contains(err.Error(), "\"x\"") {
			t.Errorf("error quotes the key: %v", err)
		}
	}
	if err := Check(key32[:31]); err == nil {
		t.Error("Check accepted 31 bytes")
	}
	if err := Check(key32); err != nil {
		t.Error(err)
	}
}

func TestFingerprint(t *testing.T) {
	s := sha256.Sum256(key32)
	if got, want := Fingerprint(key32), hex.EncodeToString(s[:])[:8]; got != want {
		t.Fatalf("Fingerprint = %s, want %s", got, want)
	}
	k2 := append([]byte(nil), key32...)
	k2[31] ^= 1
	if Fingerprint(k2) == Fingerprint(key32) {
		t.Fatal("two keys, one fingerprint")
	}
}

// TestFiles: a generated key round-trips through a 0600 file; existing
// files are never overwritten; files others may read, directories and
// oversized files are refused, saying how to fix it.
func TestFiles(t *testing.T) {
	old := syscall.Umask(0)
	defer syscall.Umask(old)
	dir := t.TempDir()
	k, err := Generate()
	if err != nil || len(k) != GenLen {
		t.Fatalf("Generate: %d bytes, %v", len(k), err)
	}
	if k2, _ := Generate(); bytes.Equal(k, k2) {
		t.Fatal("two generated keys are equal")
	}
	p := filepath.Join(dir, "job.key")
	if err := WriteFile(p, k); err != nil {
		t.Fatal(err)
	}
	fi, err := os.Stat(p)
	if err != nil || fi.Mode().Perm() != 0o600 {
		t.Fatalf("mode %v (%v), want 0600 even with umask 0", fi.Mode(), err)
	}
	raw, _ := os.ReadFile(p)
	if string(raw) != hex.EncodeToString(k)+"\n" {
		t.Fatalf("file holds %q", raw)
	}
	got, err := ReadFile(p)
	if err != nil || !bytes.Equal(got, k) {
		t.Fatalf("ReadFile: %x, %v", got, err)
	}
	if err := WriteFile(p, key32); err == nil || !strings.Contains(err.Error(), "never overwritten") {
		t.Fatalf("overwrite: %v", err)
	}
	if got, _ := ReadFile(p); !bytes.Equal(got, k) {
		t.Fatal("the refused write changed the file")
	}
	if err := WriteFile(filepath.Join(dir, "short.key"), key32[:16]); err == nil {
		t.Fatal("a 16-byte key was written")
	}
	if err := os.Chmod(p, 0o400); err != nil {
		t.Fatal(err)
	}
	if _, err := ReadFile(p); err != nil {
		t.Fatalf("mode 0400: %v", err)
	}
	for _, m := range []os.FileMode{0o644, 0o640, 0o604, 0o700} {
		if err := os.Chmod(p, m); err != nil {
			t.Fatal(err)
		}
		_, err := ReadFile(p)
		if err == nil || !strings.Contains(err.Error(), "chmod 600 "+p) || !strings.Contains(err.Error(), "owner only") {
			t.Errorf("mode %04o: %v, want a refusal saying chmod 600", m, err)
		}
	}
	if _, err := ReadFile(dir); err == nil || !strings.Contains(err.Error(), "not a regular file") {
		t.Errorf("directory: %v", err)
	}
	if _, err := ReadFile(filepath.Join(dir, "none")); err == nil {
		t.Error("a missing file was read")
	}
	big := filepath.Join(dir, "big")
	os.WriteFile(big, bytes.Repeat([]byte("ab"), 2*MaxLen), 0o600)
	if _, err := ReadFile(big); err == nil || !strings.Contains(err.Error(), "larger than any key") {
		t.Errorf("oversized file: %v", err)
	}
	bad := filepath.Join(dir, "bad")
	os.WriteFile(bad, []byte("not a key\n"), 0o600)
	if _, err := ReadFile(bad); err == nil || !strings.Contains(err.Error(), bad) || strings.Contains(err.Error(), "not a key") {
		t.Errorf("malformed file: %v (want the path named, the content not quoted)", err)
	}
}
