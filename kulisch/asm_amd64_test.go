package kulisch

import (
	"testing"

	"github.com/prismd/prismd/internal/asmcheck"
)

// TestKernelsAreVEXOnly: no legacy SSE instruction in a kernel that uses
// 256-bit registers (internal/asmcheck says why: the lane kernel lost 77%
// of its time to three such moves).
func TestKernelsAreVEXOnly(t *testing.T) { asmcheck.Check(t, "arrival_amd64.s") }
