// This file owns the encoding choice of bitmap-framework section 7: header
// bandwidth against per-hop processing cost, bitmap by default.

package bitmapfwd

// Defaults for ChooseInput. Each value is a point the section 7 text names.
const (
	// DefaultMaxBodyBytes: a 4096-bit flat bitmap plus its 4-byte header.
	// 4096 is the largest bitstring length BIER defines and the widest
	// match switch pipelines are built for; 516 bytes is under 6% of a
	// 9000-byte jumbo frame, the "small percentage" the text accepts.
	DefaultMaxBodyBytes = 4 + 4096/8
	// DefaultListCap: MoE top-K selects K = 2..8 experts; twice the largest
	// leaves room for grouped tokens while keeping the list (and the
	// per-hop list-to-bitmap conversion) bounded.
	DefaultListCap = 16
	// DefaultListMinDomain: "tens of thousands of bits or more". Below
	// 16384 endpoints a flat or hierarchical bitmap is at most 2 KiB, and
	// its single-cycle bit-wise processing is worth more than the bytes a
	// list saves.
	DefaultListMinDomain = 16384
	// DefaultBlockBits: a block per rack scope (a few hundred endpoints);
	// 256 bits is 32 bytes per selected block.
	DefaultBlockBits = 256
)

// ChooseInput describes a job at setup time. Zero fields take the defaults.
type ChooseInput struct {
	// Domain is N, the job's bit space (endpoints), >= 1.
	Domain int
	// Active is K, the members a set carries: the job's size for AllReduce,
	// the maximum experts per token (or token group) for MoE.
	Active int
	// MaxBodyBytes is the header budget for one endpoint-set body.
	MaxBodyBytes int
	// ListCap is the per-job cap on K for a LIST.
	ListCap int
	// ListMinDomain is the smallest N for which a LIST is considered.
	ListMinDomain int
	// BlockBits is the HIER block size (multiple of 64).
	BlockBits int
}

// Choice is Choose's answer: the Params to negotiate, how many FLAT Set IDs
// a full set spans, and the largest body a set of Active members needs.
type Choice struct {
	Params
	SetCount     int // FLAT: copies per full set (1 when the domain fits one bitmap)
	MaxBodyBytes int // worst-case body length for Active members
}

// Choose picks a job's encoding following bitmap-framework section 7:
//
//  1. FLAT covering the whole domain when it fits the header budget: the
//     default, fixed offset and length, single-cycle AND/OR/equality.
//  2. LIST only in the corner the text names: a very large domain
//     (Domain >= ListMinDomain) and a very small K (Active <= ListCap), and
//     a list of ListCap members fits the budget.
//  3. HIER when the worst case (upper bitmap + one lower bitmap for each of
//     min(K, blocks) blocks) fits the budget.
//  4. Otherwise FLAT split into Set IDs (parallel trees / BIER per-set
//     copies), each bitmap as large as the budget allows.
func Choose(in ChooseInput) (Choice, error) {
	if in.Domain < 1 || in.Domain > MaxBits {
		return Choice{}, paramErr(0, "Choose Domain", in.Domain, ErrParam)
	}
	if in.Active < 0 || in.Active > in.Domain {
		return Choice{}, paramErr(0, "Choose Active", in.Active, ErrParam)
	}
	budget := in.MaxBodyBytes
	if budget == 0 {
		budget = DefaultMaxBodyBytes
	}
	if budget < FlatLen(1) {
		return Choice{}, paramErr(0, "Choose MaxBodyBytes", budget, ErrParam)
	}
	listCap := in.ListCap
	if listCap == 0 {
		listCap = DefaultListCap
	}
	if listCap < 0 || listCap > MaxListCount {
		return Choice{}, paramErr(0, "Choose ListCap", listCap, ErrParam)
	}
	minDomain := in.ListMinDomain
	if minDomain == 0 {
		minDomain = DefaultListMinDomain
	}
	bb := in.BlockBits
	if bb == 0 {
		bb = DefaultBlockBits
	}
	if bb < 64 || bb > MaxBlockBits || bb%64 != 0 {
		return Choice{}, paramErr(Hier, "Choose BlockBits", bb, ErrParam)
	}

	words := (in.Domain + 63) / 64
	if words <= MaxWordCount && FlatLen(words) <= budget {
		return Choice{Params: Params{Encoding: Flat, WordCount: words}, SetCount: 1, MaxBodyBytes: FlatLen(words)}, nil
	}
	if in.Domain >= minDomain && in.Active <= listCap {
		// The cap, not K, bounds what a packet may carry: it must fit.
		if l := bodyHeaderLen + listIDLen*listCap; l <= budget {
			return Choice{Params: Params{Encoding: List, ListCap: listCap}, MaxBodyBytes: l}, nil
		}
	}
	if bc := (in.Domain + bb - 1) / bb; bc <= MaxBlockCount {
		worst := bodyHeaderLen + (bc+63)/64*8 + min(in.Active, bc)*bb/8
		if worst <= budget {
			return Choice{Params: Params{Encoding: Hier, BlockBits: bb}, MaxBodyBytes: worst}, nil
		}
	}
	wc := min((budget-bodyHeaderLen)/8, MaxWordCount)
	sc := FlatSetCount(in.Domain, wc)
	if sc > 0xFFFF+1 {
		return Choice{}, paramErr(Flat, "Choose Set IDs needed", sc, ErrTooLarge)
	}
	return Choice{Params: Params{Encoding: Flat, WordCount: wc}, SetCount: sc, MaxBodyBytes: FlatLen(wc)}, nil
}
