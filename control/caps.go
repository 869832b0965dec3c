// This file owns the node's capability records: what CAPS_RESPONSE
// advertises and what STAGE is checked against (the same table, so the node
// never accepts what it does not advertise, nor advertises what it rejects).

package control

import (
	"github.com/prismd/prismd/kulisch"
	"github.com/prismd/prismd/parser"
)

// Limits are the per-operation resource bounds every capability record
// advertises. Zero fields take the defaults below.
type Limits struct {
	MaxVectorLen       uint32
	MaxTerms           uint32
	MaxMTU             uint16
	MaxBindings        uint16
	MaxWindowIntervals uint16
	MaxReplayDepth     uint16
	MaxWindowBytes     uint32
	MaxWindowElements  uint32
	// MaxOps is the number of operation contexts the node holds (all
	// workers together), advertised in the page header.
	MaxOps uint16
}

// Default limits. Window elements and bytes bound the per-operation
// accumulator ring and replay memory: 1 Mi elements of Kulisch-4096 would be
// ~1 GiB, so the engine's MaxRingBytes further limits what a worker accepts
// (NO_RESOURCES), while these are per-operation maxima (UNSUPPORTED).
func (l Limits) withDefaults() Limits {
	if l.MaxVectorLen == 0 {
		l.MaxVectorLen = 1 << 31
	}
	if l.MaxTerms == 0 {
		l.MaxTerms = 1 << 20
	}
	if l.MaxMTU == 0 {
		l.MaxMTU = parser.MTUJumbo
	}
	if l.MaxBindings == 0 {
		l.MaxBindings = parser.MaxBindings
	}
	if l.MaxWindowIntervals == 0 {
		l.MaxWindowIntervals = 1024
	}
	if l.MaxReplayDepth == 0 {
		l.MaxReplayDepth = 1024
	}
	if l.MaxWindowBytes == 0 {
		l.MaxWindowBytes = 64 << 20
	}
	if l.MaxWindowElements == 0 {
		l.MaxWindowElements = 1 << 20
	}
	if l.MaxOps == 0 {
		l.MaxOps = 1024
	}
	return l
}

// Records returns every capability record, complete tuples only:
// FP32_ARRIVAL with FP32 input and partial and FP32 or AUTO output;
// KULISCH_FIXED with INT8/FP16/BF16/FP32 input, KULISCH or AUTO partial and
// FP32/FP16/BF16/INT8/KULISCH/AUTO output, widths 64..4096.
func Records(l Limits) []parser.CapRecord {
	l = l.withDefaults()
	base := parser.CapRecord{MaxVectorLen: l.MaxVectorLen, MaxTerms: l.MaxTerms, MaxMTU: l.MaxMTU,
		MaxBindings: l.MaxBindings, MaxWindowIntervals: l.MaxWindowIntervals, MaxReplayDepth: l.MaxReplayDepth,
		MaxWindowBytes: l.MaxWindowBytes, MaxWindowElements: l.MaxWindowElements}
	var rs []parser.CapRecord
	for _, out := range []parser.Format{parser.FormatFP32, parser.FormatAuto} {
		r := base
		r.InputFormat, r.AccPolicy, r.PartialPolicy, r.OutputFormat = parser.FormatFP32, parser.AccFP32Arrival, parser.FormatFP32, out
		rs = append(rs, r)
	}
	for _, in := range []parser.Format{parser.FormatINT8, parser.FormatFP16, parser.FormatBF16, parser.FormatFP32} {
		for _, part := range []parser.Format{parser.FormatKulisch, parser.FormatAuto} {
			for _, out := range []parser.Format{parser.FormatFP32, parser.FormatFP16, parser.FormatBF16, parser.FormatINT8, parser.FormatKulisch, parser.FormatAuto} {
				r := base
				r.InputFormat, r.AccPolicy, r.PartialPolicy, r.OutputFormat = in, parser.AccKulischFixed, part, out
				// The least W a STAGE of one term passes (the STAGE rule
				// counts every input in the FP32 domain: 278 bits +
				// ceil(log2 Max Terms), protocol 5.1): advertised as the
				// format's floor of 64, it named widths every STAGE of
				// the tuple refused.
				r.MinKulischWidth = uint16(kulisch.MinWidthFor(kulisch.FP32, 1))
				r.MaxKulischWidth = kulisch.MaxWidth
				rs = append(rs, r)
			}
		}
	}
	return rs
}

// pages is the number of CAPS_RESPONSE pages for n records.
func pages(n int) int { return max(1, (n+parser.MaxCapRecords-1)/parser.MaxCapRecords) }

// covers reports whether some record covers the context and, when not, the
// byte offset (within the STAGE body) of the first field no record covers.
func covers(rs []parser.CapRecord, c *parser.ContextRecord) (ok bool, detail uint16) {
	tupleHit := false
	for i := range rs {
		r := &rs[i]
		if r.InputFormat != c.InputFormat || r.AccPolicy != c.AccPolicy || r.PartialPolicy != c.PartialPolicy || r.OutputFormat != c.OutputFormat {
			continue
		}
		tupleHit = true
		switch {
		case r.MaxKulischWidth != 0 && (c.KulischWidth < r.MinKulischWidth || c.KulischWidth > r.MaxKulischWidth):
			detail = 6
		case c.VectorLen > r.MaxVectorLen:
			detail = 8
		case c.MTU > r.MaxMTU:
			detail = 12
		case uint16(c.BindingCount) > r.MaxBindings:
			detail = 14
		case c.WindowIntervals > r.MaxWindowIntervals:
			detail = 16
		case c.ReplayDepth > r.MaxReplayDepth:
			detail = 18
		case c.WindowBytes > r.MaxWindowBytes:
			detail = 20
		case c.WindowElements > r.MaxWindowElements:
			detail = 24
		case c.MaxTerms > r.MaxTerms:
			detail = 28
		default:
			return true, parser.NoDetail
		}
	}
	if !tupleHit {
		return false, 2 // the tuple starts at Input Format
	}
	return false, detail
}
