// This file owns the (input, accumulator, partial, output) tuple rules that
// capability records and STAGE validation share.

package kulisch

import "fmt"

// Tuple is one arithmetic configuration: input format, accumulator policy,
// partial policy (format of DATA a switch emits) and output format.
type Tuple struct {
	Input   Format
	Acc     Policy
	Partial Format
	Output  Format
}

// TupleError names the offending field of an invalid Tuple.
type TupleError struct {
	Field string // "input", "acc", "partial", "output" or "width"
	Value int
	Why   string
}

func (e *TupleError) Error() string {
	return fmt.Sprintf("kulisch: invalid %s %d: %s", e.Field, e.Value, e.Why)
}

// Unwrap makes errors.Is(err, ErrTuple) (and ErrPolicy for the
// accumulator field, ErrWidth for the width) hold.
func (e *TupleError) Unwrap() []error {
	switch e.Field {
	case "acc":
		return []error{ErrTuple, ErrPolicy}
	case "width":
		return []error{ErrTuple, ErrWidth}
	}
	return []error{ErrTuple}
}

// Validate checks the tuple without the width:
//   - Input is INT8, FP16, BF16 or FP32;
//   - Acc is FP32_ARRIVAL (0x01) or KULISCH_FIXED (0x03); 0x02 and every
//     other ID are rejected;
//   - Partial is FP32 or AUTO under FP32_ARRIVAL, KULISCH or AUTO under
//     KULISCH_FIXED;
//   - Output is FP32 or AUTO under FP32_ARRIVAL (the state is already a
//     rounded FP32; a narrower output would round a second time), and
//     INT8, FP16, BF16, FP32, KULISCH or AUTO under KULISCH_FIXED.
func (t Tuple) Validate() error {
	if t.Input < INT8 || t.Input > FP32 {
		return &TupleError{"input", int(t.Input), "must be INT8, FP16, BF16 or FP32"}
	}
	switch t.Acc {
	case FP32Arrival:
		if t.Partial != FP32 && t.Partial != AUTO {
			return &TupleError{"partial", int(t.Partial), "FP32_ARRIVAL partials are FP32 or AUTO"}
		}
		if t.Output != FP32 && t.Output != AUTO {
			return &TupleError{"output", int(t.Output), "FP32_ARRIVAL results are FP32 or AUTO"}
		}
	case KulischFixed:
		if t.Partial != KULISCH && t.Partial != AUTO {
			return &TupleError{"partial", int(t.Partial), "KULISCH_FIXED partials are KULISCH or AUTO"}
		}
		if t.Output < INT8 || t.Output > AUTO {
			return &TupleError{"output", int(t.Output), "must be a format code 1..6"}
		}
	default:
		return &TupleError{"acc", int(t.Acc), "unassigned accumulator policy"}
	}
	return nil
}

// NeedsWidth reports whether the tuple uses a Kulisch width: KULISCH or
// AUTO transport under KULISCH_FIXED (every valid KULISCH_FIXED tuple).
func (t Tuple) NeedsWidth() bool {
	return t.Acc == KulischFixed && (t.Partial == KULISCH || t.Partial == AUTO ||
		t.Output == KULISCH || t.Output == AUTO)
}

// ValidateWidth checks Validate and the width field: w must be a legal width
// when NeedsWidth, and 0 otherwise.
func (t Tuple) ValidateWidth(w int) error {
	if err := t.Validate(); err != nil {
		return err
	}
	if !t.NeedsWidth() {
		if w != 0 {
			return &TupleError{"width", w, "must be 0 when no Kulisch format is used"}
		}
		return nil
	}
	if ValidWidth(w) != nil {
		return &TupleError{"width", w, "must be a multiple of 8 in 64..4096"}
	}
	return nil
}

// ValidateStage checks ValidateWidth and that w holds the exact sum of
// terms original contributions of the input format (KULISCH_FIXED only).
func (t Tuple) ValidateStage(w int, terms uint32) error {
	if err := t.ValidateWidth(w); err != nil {
		return err
	}
	if t.NeedsWidth() {
		if need := MinWidthFor(t.Input, terms); w < need {
			return fmt.Errorf("%w: W=%d < %d for %d %v terms", ErrOverflow, w, need, terms, t.Input)
		}
	}
	return nil
}

// Base is the concrete format the policy's values always fit losslessly:
// KULISCH under KULISCH_FIXED, FP32 under FP32_ARRIVAL. AUTO never does worse
// than sending every value in Base.
func (p Policy) Base() Format {
	if p == KulischFixed {
		return KULISCH
	}
	return FP32
}
