package stream

import (
	"testing"

	"github.com/prismd/prismd/internal/asmcheck"
)

// TestKernelsAreVEXOnly: no legacy SSE instruction in the NH kernel, which
// uses 256-bit registers (internal/asmcheck says why).
func TestKernelsAreVEXOnly(t *testing.T) { asmcheck.Check(t, "hash_amd64.s") }
