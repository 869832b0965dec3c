// This file owns the one sizing rule hosts and the AM must follow for BITMAP
// jobs: a token's merged value has to fit one frame.

package bitmap

import (
	"github.com/prismd/prismd/kulisch"
	"github.com/prismd/prismd/parser"
)

// MaxTokenElements is the largest Element Count a token (chunk) of a BITMAP
// context described by cr may have so that every node can emit its merged
// partial, and the root its result, in one frame: extLen is the largest
// endpoint-set extension the job's frames carry (16 + set body, + 16 with
// AUTH). Under KULISCH_FIXED with a KULISCH or AUTO partial policy the bound
// assumes KULISCH values (AUTO needs them whenever a sum is not exactly an
// FP32/FP16/BF16/INT8 value, which is the common case). A token larger than
// this is answered with ACCUMULATION_INEXACT by the first switch that merges
// it (see doc.go, Aggregation unit).
func MaxTokenElements(cr *parser.ContextRecord, extLen int) int {
	budget := kulisch.BodyBudget(int(cr.MTU), extLen) - parser.GroupDescLen
	width := func(f parser.Format) int {
		switch f {
		case parser.FormatAuto:
			if cr.AccPolicy == parser.AccKulischFixed {
				return 1 + int(cr.KulischWidth)/8
			}
			return 4
		case parser.FormatKulisch:
			return 1 + int(cr.KulischWidth)/8
		}
		return f.Width(0)
	}
	w := max(width(cr.PartialPolicy), width(cr.OutputFormat), width(cr.InputFormat))
	if w == 0 || budget < w {
		return 0
	}
	return min(budget/w, 0xFFFF)
}

// lateGuardNs is how long after emitting a token a contribution for bits it
// already sent up is still treated as a duplicate rather than forwarded on
// PARENT (handle.go, lateForward): longer than a merged frame's queueing
// difference to the next merge point, shorter than a host retransmission
// interval.
const lateGuardNs = int64(1e6)
