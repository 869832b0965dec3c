package authkey

import (
	"crypto/rand"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"strings"
)

const (
	// MinLen is the shortest key section 8.6 allows: 32 random bytes, the
	// HMAC-SHA256 output size, so the key is never the weak link of a tag.
	MinLen = 32
	// MaxLen bounds a key so that a request or a file that is not a key
	// (a log, an image) is refused rather than installed: HMAC hashes keys
	// longer than its 64-byte block anyway.
	MaxLen = 256
	// GenLen is the length Generate returns.
	GenLen = 32
)

// ErrKey is wrapped by every error about a key's form or file.
var ErrKey = errors.New("job key")

// Parse decodes the text form of a key: hex digits (either case), with
// surrounding white space (a trailing newline) ignored. The error never
// contains key material: a bad digit is named by its offset only.
func Parse(s string) ([]byte, error) {
	s = strings.TrimSpace(s)
	if s == "" {
		return nil, fmt.Errorf("%w: the key is empty: want %d to %d bytes as hex (e.g. 'prismctl keys gen FILE' writes one)", ErrKey, MinLen, MaxLen)
	}
	for i := 0; i < len(s); i++ {
		if !isHex(s[i]) {
			return nil, fmt.Errorf("%w: the key is not hex: character %d is not 0-9, a-f or A-F", ErrKey, i+1)
		}
	}
	if len(s)%2 != 0 {
		return nil, fmt.Errorf("%w: the key has an odd number of hex digits (%d): two digits per byte", ErrKey, len(s))
	}
	if n := len(s) / 2; n < MinLen || n > MaxLen {
		return nil, fmt.Errorf("%w: the key is %d bytes: want %d to %d (protocol section 8.6 asks for at least %d random bytes)", ErrKey, n, MinLen, MaxLen, MinLen)
	}
	b := make([]byte, len(s)/2)
	if _, err := hex.Decode(b, []byte(s)); err != nil {
		// Unreachable after the checks above; the error is not wrapped
		// because encoding/hex quotes the offending character.
		return nil, fmt.Errorf("%w: the key is not hex", ErrKey)
	}
	return b, nil
}

func isHex(c byte) bool {
	return '0' <= c && c <= '9' || 'a' <= c && c <= 'f' || 'A' <= c && c <= 'F'
}

// Check reports whether key has a length section 8.6 allows.
func Check(key []byte) error {
	if len(key) < MinLen || len(key) > MaxLen {
		return fmt.Errorf("%w: the key is %d bytes: want %d to %d (protocol section 8.6 asks for at least %d random bytes)", ErrKey, len(key), MinLen, MaxLen, MinLen)
	}
	return nil
}

// Format is the text form Parse reads: lower-case hex.
func Format(key []byte) string { return hex.EncodeToString(key) }

// Fingerprint names a key without revealing it: the first 8 hex digits of
// SHA-256(key). Two nodes holding the same key show the same fingerprint.
func Fingerprint(key []byte) string {
	s := sha256.Sum256(key)
	return hex.EncodeToString(s[:4])
}

// Generate returns GenLen bytes from the system's random source.
func Generate() ([]byte, error) {
	k := make([]byte, GenLen)
	if _, err := rand.Read(k); err != nil {
		return nil, fmt.Errorf("%w: reading random bytes: %v", ErrKey, err)
	}
	return k, nil
}

// WriteFile writes key's text form and a newline to a new file path with
// mode 0600. It refuses an existing path: overwriting a key in use would
// lock its job's hosts out, so replacing one is a deliberate rm first.
func WriteFile(path string, key []byte) error {
	if err := Check(key); err != nil {
		return err
	}
	f, err := os.OpenFile(path, os.O_WRONLY|os.O_CREATE|os.O_EXCL, 0o600)
	if errors.Is(err, fs.ErrExist) {
		return fmt.Errorf("%w: %s already exists; a key file is never overwritten: remove it first or choose another name", ErrKey, path)
	}
	if err != nil {
		return fmt.Errorf("%w: %v", ErrKey, err)
	}
	// The umask cannot widen 0600, but a umask of e.g. 0177 would narrow
	// it to 0400: the mode is set explicitly either way.
	if err := f.Chmod(0o600); err != nil {
		f.Close()
		os.Remove(path)
		return fmt.Errorf("%w: %v", ErrKey, err)
	}
	if _, err := f.WriteString(Format(key) + "\n"); err != nil {
		f.Close()
		os.Remove(path)
		return fmt.Errorf("%w: writing %s: %v", ErrKey, path, err)
	}
	if err := f.Close(); err != nil {
		os.Remove(path)
		return fmt.Errorf("%w: writing %s: %v", ErrKey, path, err)
	}
	return nil
}

// ReadFile reads a key file. The file must be a regular file that only its
// owner may read (mode 0600 or 0400): a key others can read is no longer a
// secret, so such a file is refused, saying how to fix it.
func ReadFile(path string) ([]byte, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, fmt.Errorf("%w: key file: %v", ErrKey, err)
	}
	defer f.Close()
	fi, err := f.Stat()
	if err != nil {
		return nil, fmt.Errorf("%w: key file: %v", ErrKey, err)
	}
	if !fi.Mode().IsRegular() {
		return nil, fmt.Errorf("%w: key file %s is not a regular file", ErrKey, path)
	}
	if perm := fi.Mode().Perm(); perm&^0o600 != 0 {
		return nil, fmt.Errorf("%w: key file %s has mode %04o: a key must be readable by its owner only (0600 or 0400); run 'chmod 600 %s'", ErrKey, path, perm, path)
	}
	// Room for the longest key's hex, white space around it, and one byte
	// more: a larger file is no key.
	const limit = 2*MaxLen + 64
	buf, err := io.ReadAll(io.LimitReader(f, limit))
	if err != nil {
		return nil, fmt.Errorf("%w: reading key file %s: %v", ErrKey, path, err)
	}
	if len(buf) == limit {
		return nil, fmt.Errorf("%w: key file %s is larger than any key (%d bytes as hex at most)", ErrKey, path, MaxLen)
	}
	k, err := Parse(string(buf))
	clear(buf)
	if err != nil {
		return nil, fmt.Errorf("key file %s: %w", path, err)
	}
	return k, nil
}
