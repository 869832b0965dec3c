// Zero-allocation rejection: every rule of the validation table, every class
// decoder, the extension, Classify, the builder and the authenticator reject
// without allocating, and the error still names the right field.

package parser

import (
	"errors"
	"reflect"
	"strings"
	"testing"

	"github.com/prismd/prismd/internal/alloctest"
)

// rejectWant is what a rejected frame's error says.
type rejectWant struct {
	class  Class
	field  string
	offset int
	reason string
}

// rejectGolden pins Class, Field, Offset and Reason for every rejecting rule
// of the table. It was recorded from the decoders as they were before errors
// moved into the decoder values (each rejection then allocated a fresh
// *FieldError), so it proves that move changed no reported field; a few
// offsets are re-derived by hand from the mutations in TestRejectOffsetsByHand.
var rejectGolden = map[string]rejectWant{
	"short control word":                  {0, "control_word", 14, "truncated"},
	"major version 2":                     {0, "version", 14, "bad_version"},
	"class 0":                             {0, "class", 15, "unknown_class"},
	"class 5":                             {0, "class", 15, "unknown_class"},
	"data truncated header":               {2, "header", 16, "truncated"},
	"data over mtu":                       {0, "frame", 14, "over_mtu"},
	"data reserved":                       {2, "reserved", 54, "reserved_nonzero"},
	"data flags reserved":                 {2, "flags", 49, "reserved_nonzero"},
	"data body past frame":                {2, "body_length", 50, "truncated"},
	"data body shorter than group":        {2, "body_length", 56, "bad_length"},
	"data body longer than groups":        {2, "body_length", 50, "bad_length"},
	"data zero groups":                    {2, "group_count", 48, "bad_count"},
	"data zero groups with elements":      {2, "element_count", 46, "bad_count"},
	"data zero groups with body":          {2, "body_length", 50, "bad_length"},
	"data group count too high":           {2, "body_length", 76, "bad_length"},
	"data element count mismatch":         {2, "element_count", 46, "bad_count"},
	"group count zero":                    {2, "group.count", 56, "bad_count"},
	"group format 0":                      {2, "group.format", 58, "bad_format"},
	"group format AUTO":                   {2, "group.format", 58, "bad_format"},
	"group format 9":                      {2, "group.format", 58, "bad_format"},
	"group format 15":                     {2, "group.format", 58, "bad_format"},
	"f64 in RESULT":                       {3, "group.format", 58, "bad_format"},
	"f64 with EXT":                        {2, "group.format", 86, "bad_format"},
	"f64 bits 11..0 nonzero":              {2, "group.format", 58, "bad_format"},
	"f64 bits 11..0 = 0x800":              {2, "group.format", 58, "bad_format"},
	"f64 group past body":                 {2, "body_length", 56, "bad_length"},
	"f64 subnormal":                       {2, "group.f64_value", 84, "out_of_range"},
	"f64 negative subnormal":              {2, "group.f64_value", 76, "out_of_range"},
	"f64 NaN with payload":                {2, "group.f64_value", 76, "out_of_range"},
	"f64 negative NaN":                    {2, "group.f64_value", 92, "out_of_range"},
	"f64 2^-150":                          {2, "group.f64_value", 68, "out_of_range"},
	"f64 1.5 x 2^-149":                    {2, "group.f64_value", 60, "out_of_range"},
	"f64 2^130 beyond W 280":              {2, "group.f64_value", 92, "out_of_range"},
	"f64 -2^130 beyond W 280":             {2, "group.f64_value", 60, "out_of_range"},
	"scaled in RESULT":                    {3, "group.format", 58, "bad_format"},
	"scaled B 0":                          {2, "group.scaled_bytes", 58, "bad_format"},
	"scaled B 513":                        {2, "group.scaled_bytes", 58, "bad_format"},
	"scaled group past body":              {2, "body_length", 56, "bad_length"},
	"scaled reserved":                     {2, "group.scale_reserved", 62, "reserved_nonzero"},
	"scaled shift + 8B > W":               {2, "group.scale_shift", 60, "out_of_range"},
	"scaled shift past 4096":              {2, "group.scale_shift", 60, "out_of_range"},
	"scaled state 6":                      {2, "group.kulisch_state", 64, "out_of_range"},
	"scaled finite zero":                  {2, "group.kulisch_value", 64, "out_of_range"},
	"scaled +0 nonzero":                   {2, "group.kulisch_value", 74, "out_of_range"},
	"scaled padding nonzero":              {2, "group.padding", 91, "reserved_nonzero"},
	"group fp32 with kulisch bytes":       {2, "group.format", 58, "bad_format"},
	"kulisch bytes vs operation":          {2, "group.kulisch_bytes", 70, "bad_format"},
	"kulisch bytes below 8":               {2, "group.kulisch_bytes", 70, "bad_format"},
	"kulisch state 6":                     {2, "group.kulisch_state", 72, "out_of_range"},
	"kulisch finite zero":                 {2, "group.kulisch_value", 72, "out_of_range"},
	"kulisch +inf nonzero":                {2, "group.kulisch_value", 72, "out_of_range"},
	"group padding nonzero":               {2, "group.padding", 63, "reserved_nonzero"},
	"beyond vector":                       {2, "first_element", 42, "out_of_range"},
	"beyond 2^32":                         {2, "first_element", 42, "out_of_range"},
	"end of vector without LAST":          {3, "flags.last", 49, "out_of_range"},
	"LAST before the end":                 {2, "flags.last", 49, "out_of_range"},
	"inexact without LAST":                {2, "flags.last", 49, "out_of_range"},
	"inexact with elements":               {2, "element_count", 46, "bad_count"},
	"inexact with groups":                 {2, "group_count", 48, "bad_count"},
	"inexact with body":                   {2, "body_length", 50, "bad_length"},
	"ext truncated":                       {2, "ext", 56, "truncated"},
	"ext length past frame":               {2, "ext.length", 56, "truncated"},
	"ext length not multiple of 4":        {2, "ext.length", 56, "bad_length"},
	"ext length too small":                {2, "ext.length", 56, "bad_length"},
	"ext length vs set":                   {2, "set.length", 72, "bad_length"},
	"ext encoding 0":                      {2, "ext.encoding", 58, "bad_format"},
	"ext encoding 4":                      {2, "ext.encoding", 58, "bad_format"},
	"ext xflags reserved":                 {2, "ext.xflags", 59, "reserved_nonzero"},
	"INSTALL in DATA":                     {2, "ext.xflags", 59, "out_of_range"},
	"PARTIAL with INSTALL":                {3, "ext.xflags", 59, "out_of_range"},
	"AUTH without room for tag":           {2, "ext.length", 56, "bad_length"},
	"flat word count 0":                   {2, "set.word_count", 74, "bad_count"},
	"flat word count vs length":           {2, "set.length", 72, "bad_length"},
	"flat empty":                          {2, "set.empty", 76, "bad_count"},
	"list count 0":                        {3, "set.list_count", 72, "bad_count"},
	"list count over cap":                 {3, "set.list_count", 72, "bad_count"},
	"list count vs length":                {3, "set.length", 72, "bad_length"},
	"list reserved":                       {3, "set.reserved", 74, "reserved_nonzero"},
	"list not ascending":                  {3, "set.list_order", 80, "out_of_range"},
	"list duplicate":                      {3, "set.list_order", 80, "out_of_range"},
	"hier block bits 0":                   {2, "set.block_bits", 72, "out_of_range"},
	"hier block bits 65":                  {2, "set.block_bits", 72, "out_of_range"},
	"hier block count 0":                  {2, "set.block_count", 74, "bad_count"},
	"hier upper bit beyond count":         {2, "set.upper", 76, "reserved_nonzero"},
	"hier more upper bits than lowers":    {2, "set.lower_count", 76, "bad_count"},
	"hier fewer upper bits than lowers":   {2, "set.lower_count", 76, "bad_count"},
	"hier empty upper":                    {2, "set.empty", 76, "bad_count"},
	"hier empty lower":                    {2, "set.lower_empty", 84, "bad_count"},
	"control truncated header":            {1, "header", 16, "truncated"},
	"control over mtu":                    {1, "frame", 14, "over_mtu"},
	"control command 0":                   {1, "command", 42, "out_of_range"},
	"control command 9":                   {1, "command", 42, "out_of_range"},
	"control status in request":           {1, "status", 43, "out_of_range"},
	"ack status 8":                        {1, "status", 43, "out_of_range"},
	"fragment count 0":                    {1, "fragment_count", 47, "out_of_range"},
	"fragment count 2 outside caps":       {1, "fragment_count", 47, "out_of_range"},
	"fragment index >= count":             {1, "fragment_index", 46, "out_of_range"},
	"control body past frame":             {1, "body_length", 44, "truncated"},
	"commit with body":                    {1, "body_length", 44, "bad_length"},
	"ack body length":                     {1, "body_length", 44, "bad_length"},
	"ack acked command ACK":               {1, "ack.command", 48, "out_of_range"},
	"ack state 7":                         {1, "ack.state", 49, "out_of_range"},
	"ack reserved":                        {1, "ack.reserved", 59, "reserved_nonzero"},
	"ack fail cause 5":                    {1, "ack.fail_cause", 58, "out_of_range"},
	"ack fail cause while ACTIVE":         {1, "ack.fail_cause", 58, "out_of_range"},
	"caps query length":                   {1, "body_length", 44, "bad_length"},
	"caps query reserved":                 {1, "caps_query.reserved", 49, "reserved_nonzero"},
	"caps record count 17":                {1, "caps.record_count", 48, "bad_count"},
	"caps record count vs length":         {1, "body_length", 44, "bad_length"},
	"caps reserved":                       {1, "caps.reserved", 49, "reserved_nonzero"},
	"caps reserved tail":                  {1, "caps.reserved", 49, "reserved_nonzero"},
	"caps input format":                   {1, "caps.record.input_format", 60, "bad_format"},
	"caps accumulator 2":                  {1, "caps.record.accumulator", 61, "out_of_range"},
	"caps partial":                        {1, "caps.record.partial_policy", 62, "bad_format"},
	"caps output":                         {1, "caps.record.output_format", 63, "bad_format"},
	"stage short body":                    {1, "body_length", 44, "bad_length"},
	"stage role 5":                        {1, "stage.context.role", 48, "out_of_range"},
	"stage collective 4":                  {1, "stage.context.collective", 49, "out_of_range"},
	"stage input kulisch":                 {1, "stage.context.input_format", 50, "bad_format"},
	"stage accumulator 2":                 {1, "stage.context.accumulator", 51, "out_of_range"},
	"stage partial 7":                     {1, "stage.context.partial_policy", 52, "bad_format"},
	"stage output 0":                      {1, "stage.context.output_format", 53, "bad_format"},
	"stage kulisch width odd":             {1, "stage.context.kulisch_width", 54, "out_of_range"},
	"stage kulisch width too big":         {1, "stage.context.kulisch_width", 54, "out_of_range"},
	"stage kulisch width too small for N": {1, "stage.context.kulisch_width", 54, "out_of_range"},
	"stage kulisch width without kulisch": {1, "stage.context.kulisch_width", 54, "out_of_range"},
	"stage vector 0":                      {1, "stage.context.vector_length", 56, "out_of_range"},
	"stage mtu 1400":                      {1, "stage.context.mtu", 60, "out_of_range"},
	"stage binding count 0":               {1, "stage.context.binding_count", 62, "bad_count"},
	"stage binding count 65":              {1, "stage.context.binding_count", 62, "bad_count"},
	"stage set records outside BITMAP":    {1, "stage.context.set_count", 63, "bad_count"},
	"stage window intervals 0":            {1, "stage.context.window_intervals", 64, "out_of_range"},
	"stage replay 0":                      {1, "stage.context.replay_depth", 66, "out_of_range"},
	"stage window bytes < mtu":            {1, "stage.context.window_bytes", 68, "out_of_range"},
	"stage window elements < packet":      {1, "stage.context.window_elements", 72, "out_of_range"},
	"stage max terms 0":                   {1, "stage.context.max_terms", 76, "out_of_range"},
	"stage timeout 0":                     {1, "stage.context.timeout", 80, "out_of_range"},
	"stage timeout 600001":                {1, "stage.context.timeout", 80, "out_of_range"},
	"stage tenant outside BITMAP":         {1, "stage.context.tenant", 84, "out_of_range"},
	"stage bindings past body":            {1, "body_length", 44, "bad_length"},
	"stage body longer than records":      {1, "body_length", 44, "bad_length"},
	"stage binding kind 0":                {1, "stage.binding.kind", 88, "out_of_range"},
	"stage binding kind 5":                {1, "stage.binding.kind", 104, "out_of_range"},
	"stage binding flags":                 {1, "stage.binding.flags", 89, "reserved_nonzero"},
	"progress truncated header":           {4, "header", 16, "truncated"},
	"progress holes truncated":            {4, "hole_count", 56, "truncated"},
	"progress over mtu":                   {4, "frame", 14, "over_mtu"},
	"progress cause without FAILED":       {4, "fail_cause", 58, "reserved_nonzero"},
	"progress hops without FAILED":        {4, "fail_hops", 59, "reserved_nonzero"},
	"progress FAILED cause 5":             {4, "fail_cause", 58, "out_of_range"},
	"progress FAILED hops without cause":  {4, "fail_hops", 59, "reserved_nonzero"},
	"progress flags reserved":             {4, "flags", 55, "reserved_nonzero"},
	"progress status 6":                   {4, "status", 54, "out_of_range"},
	"progress hole count 33":              {4, "hole_count", 56, "bad_count"},
	"progress committed beyond vector":    {4, "committed", 44, "out_of_range"},
	"hole below committed":                {4, "hole", 60, "out_of_range"},
	"hole empty":                          {4, "hole", 60, "out_of_range"},
	"holes overlap":                       {4, "hole", 68, "out_of_range"},
	"hole beyond vector":                  {4, "hole", 68, "out_of_range"},
}

// TestRejectFields checks every rejecting rule's error against the golden
// table, through long-lived decoders (the way the dataplane decodes).
func TestRejectFields(t *testing.T) {
	ex := ruleExamples(t)
	var x decoders
	seen := 0
	for _, r := range rules {
		if r.err == nil {
			continue
		}
		seen++
		want, ok := rejectGolden[r.name]
		if !ok {
			t.Errorf("%s: no rejectGolden entry (add its class, field, offset, reason)", r.name)
			continue
		}
		b, l := ruleFrame(t, ex, r)
		err := x.decode(b, l)
		fe, ok := errors.AsType[*FieldError](err)
		if !ok || !errors.Is(err, r.err) {
			t.Errorf("%s: got %v, want a *FieldError wrapping %v", r.name, err, r.err)
			continue
		}
		got := rejectWant{fe.Class, fe.Field, fe.Offset, fe.Reason()}
		if got != want {
			t.Errorf("%s: got %+v, want %+v", r.name, got, want)
		}
		if msg := err.Error(); !strings.Contains(msg, want.field+": "+r.err.Error()) {
			t.Errorf("%s: message %q", r.name, msg)
		}
	}
	if seen != len(rejectGolden) {
		t.Errorf("%d rejecting rules, %d golden entries: remove stale entries", seen, len(rejectGolden))
	}
}

// TestRejectOffsetsByHand derives some offsets from the mutation alone, an
// oracle independent of the recorded table.
func TestRejectOffsetsByHand(t *testing.T) {
	byHand := map[string]int{
		"major version 2":         CWOff,
		"class 5":                 CWOff + 1,
		"data flags reserved":     dOff + dataFlags,
		"kulisch state 6":         DataBodyOff + 12 + 4,  // state byte of the first Kulisch value
		"group padding nonzero":   DataBodyOff + 4 + 3,   // the pad byte after 3 INT8 values
		"scaled reserved":         DataBodyOff + 4 + 2,   // Scale Word bytes 2-3
		"scaled shift + 8B > W":   DataBodyOff + 4,       // Scale Word Shift
		"scaled state 6":          DataBodyOff + 4 + 4,   // state byte of the first scaled value
		"scaled +0 nonzero":       DataBodyOff + 8 + 2*5, // the third value (1 + B = 5 bytes each)
		"f64 subnormal":           DataBodyOff + 4 + 3*8, // the fourth binary64 value
		"f64 2^-150":              DataBodyOff + 4 + 8,   // the second binary64 value
		"f64 with EXT":            DataBodyOff + 28 + 2,  // Format Word after the 28-byte extension
		"list not ascending":      sOff + 8,              // the second LIST entry
		"hier empty lower":        sOff + 12,             // first lower bitmap, after one upper word
		"ack reserved":            cBody + 11,            // ACK body byte 11
		"ack fail cause 5":        cBody + 10,            // ACK body byte 10
		"caps partial":            cBody + 14,            // partial policy of the first record
		"stage mtu 1400":          stageCtx + ctxMTU,     // = ACK Detail ctxMTU
		"stage binding kind 5":    cBody + ContextRecordLen + BindingLen,
		"stage binding flags":     cBody + ContextRecordLen + bndFlags,
		"hole below committed":    ProgressHoleOff,           // the first hole
		"holes overlap":           ProgressHoleOff + HoleLen, // the second hole
		"hole beyond vector":      ProgressHoleOff + HoleLen,
		"progress status 6":       pOff + prgStatus,
		"control command 9":       cOff + ctlCmd,
		"fragment index >= count": cOff + ctlFragIdx,
	}
	ex := ruleExamples(t)
	var x decoders
	n := 0
	for _, r := range rules {
		off, ok := byHand[r.name]
		if !ok {
			continue
		}
		n++
		b, l := ruleFrame(t, ex, r)
		fe, ok := errors.AsType[*FieldError](x.decode(b, l))
		if !ok || fe.Offset != off || fe.Field != r.field {
			t.Errorf("%s: got %+v, want %s at %d", r.name, fe, r.field, off)
		}
	}
	if n != len(byHand) {
		t.Fatalf("%d of %d hand-derived rules found in the table", n, len(byHand))
	}
}

// TestRejectAllocsTable: every rejection of the validation table, of every
// class and reason, costs 0 allocations, counted the way the dataplane
// counts it (Reason of the returned error).
func TestRejectAllocsTable(t *testing.T) {
	ex := ruleExamples(t)
	var x decoders
	reasons := map[string]bool{}
	for _, r := range rules {
		if r.err == nil {
			continue
		}
		b, l := ruleFrame(t, ex, r)
		want := Reason(r.err)
		n := alloctest.PerRun(50, func() {
			err := x.decode(b, l)
			if Reason(err) != want || !errors.Is(err, r.err) {
				panic(r.name + ": " + Reason(err))
			}
		})
		if n != 0 {
			t.Errorf("%s: %v allocs per rejection, want 0", r.name, n)
		}
		reasons[want] = true
	}
	// The table covers every frame reason but auth_failed (TestRejectAllocsOther).
	for _, r := range Reasons {
		if !reasons[r] && r != "auth_failed" && r != "invalid" {
			t.Errorf("reason %s not covered by the table", r)
		}
	}
}

// TestRejectAllocsOther covers the rejections outside the table: a class
// decoder handed another class or a short frame, the DecodePRISM variants,
// Ext.Decode, the authenticator, the builder and StageDetail.
func TestRejectAllocsOther(t *testing.T) {
	ctl, dat, prg := exampleFrame(t, "control-commit"), exampleFrame(t, "data-fp32"), exampleFrame(t, "progress-holes")
	tagged := exampleFrame(t, "data-hier-ext")
	forged := append([]byte(nil), tagged...)
	forged[HdrOff+opJob+7] ^= 1
	stage := exampleFrame(t, "control-stage")
	badStage := exampleFrame(t, "control-stage")
	put16(badStage, stageCtx+ctxMTU, 1400)
	badExt := exampleFrame(t, "result-install-list")[DataBodyOff:]
	put16(badExt, ExtHdrLen, 0) // LIST count 0
	var x decoders
	var e Ext
	a := NewAuthenticator([]byte("prism-example-key"))
	var bld DataBuilder
	buf := make([]byte, 100)
	h := DataFields{Class: ClassData}
	cases := []struct {
		name string
		want error
		f    func() error
	}{
		{"control decodes data", ErrClass, func() error { return x.c.Decode(dat, Limits{}) }},
		{"data decodes control", ErrClass, func() error { return x.d.Decode(stage, Limits{}) }},
		{"progress decodes data", ErrClass, func() error { return x.g.Decode(dat, Limits{}) }},
		{"control short ethernet", ErrTruncated, func() error { return x.c.Decode(ctl[:10], Limits{}) }},
		{"data short ethernet", ErrTruncated, func() error { return x.d.Decode(dat[:10], Limits{}) }},
		{"progress short ethernet", ErrTruncated, func() error { return x.g.Decode(prg[:10], Limits{}) }},
		{"control DecodePRISM", ErrTruncated, func() error { return x.c.DecodePRISM(ctl[EthLen:EthLen+5], Limits{}) }},
		{"data DecodePRISM", ErrMTU, func() error { return x.d.DecodePRISM(dat[EthLen:], Limits{MTU: 20}) }},
		{"progress DecodePRISM", ErrRange, func() error { return x.g.DecodePRISM(prg[EthLen:], Limits{VectorLen: 10}) }},
		{"ext decode", ErrCount, func() error { _, err := e.Decode(badExt, ClassResult, Limits{}); return err }},
		{"auth forged", ErrAuth, func() error { return a.Verify(forged) }},
		{"auth untagged", ErrAuth, func() error { return a.Verify(dat) }},
		{"auth sign untagged", ErrLength, func() error { return a.Sign(dat) }},
		{"builder short buffer", ErrMTU, func() error { return bld.Reset(buf[:40], &h, nil, 0) }},
		{"builder group", ErrCount, func() error {
			bld.Reset(buf, &h, nil, 0)
			_, err := bld.AddGroup(FormatINT8, 0, 0)
			return err
		}},
		{"stage detail", ErrRange, func() error {
			err := x.c.Decode(badStage, Limits{})
			if d, ok := StageDetail(err); !ok || d != ctxMTU {
				panic("stage detail")
			}
			return err
		}},
	}
	for _, c := range cases {
		if err := c.f(); !errors.Is(err, c.want) || Reason(err) == "invalid" {
			t.Errorf("%s: got %v, want %v", c.name, err, c.want)
			continue
		}
		if n := alloctest.PerRun(50, func() { _ = Reason(c.f()) }); n != 0 {
			t.Errorf("%s: %v allocs per rejection, want 0", c.name, n)
		}
	}
}

// TestErrorLifetime pins the contract of the returned error: it lives in the
// decoder value, the next Decode on that value reuses it, a copy keeps what
// it said, and other values are independent.
func TestErrorLifetime(t *testing.T) {
	ex := ruleExamples(t)
	frame := func(name string) ([]byte, Limits) {
		for _, r := range rules {
			if r.name == name {
				return ruleFrame(t, ex, r)
			}
		}
		t.Fatalf("no rule %q", name)
		return nil, Limits{}
	}
	stateFrame, stateLim := frame("kulisch state 6")
	padFrame, padLim := frame("group padding nonzero")
	var d, other Data
	err1 := d.Decode(stateFrame, stateLim)
	kept := *err1.(*FieldError) // what a caller that keeps the error does
	if err := other.Decode(padFrame, padLim); err == nil || err == err1 {
		t.Fatalf("two values share an error: %v", err)
	}
	if kept != *err1.(*FieldError) {
		t.Fatal("a Decode on another value changed the error")
	}
	err2 := d.Decode(padFrame, padLim)
	if err2 != err1 || err1.(*FieldError).Field != "group.padding" {
		t.Fatalf("the next Decode did not reuse the error: %v then %v", err1, err2)
	}
	if kept.Field != "group.kulisch_state" || kept.Offset != DataBodyOff+12+4 || !errors.Is(&kept, ErrRange) {
		t.Fatalf("the copy changed: %+v", kept)
	}
	// A rejected decode zeroes the value but for the error it returns; a
	// later success leaves no error behind to compare unequal.
	if d.Op != (OpKey{}) || d.Body != nil {
		t.Fatalf("rejected decode left %+v", d)
	}
	var fresh Data
	good := exampleFrame(t, "data-mixed")
	if d.Decode(good, exLim) != nil || fresh.Decode(good, exLim) != nil || !reflect.DeepEqual(d, fresh) {
		t.Fatal("a success after a rejection differs from a fresh decode")
	}
	// Classify's errors are shared and never change.
	_, e1 := Classify(good[:15])
	_, e2 := Classify(good[:15])
	if e1 != e2 || e1.(*FieldError).Offset != EthLen {
		t.Fatalf("classify errors %v %v", e1, e2)
	}
}

// TestSetNames: the STAGE spellings of the endpoint-set fields are the
// extension spellings with "stage." in front, field by field.
func TestSetNames(t *testing.T) {
	ev, sv := reflect.ValueOf(extSetNames), reflect.ValueOf(stageSetNames)
	for i := 0; i < ev.NumField(); i++ {
		e, s := ev.Field(i).String(), sv.Field(i).String()
		if !strings.HasPrefix(e, "set") || s != "stage."+e {
			t.Errorf("%s: %q vs %q", ev.Type().Field(i).Name, e, s)
		}
	}
}
