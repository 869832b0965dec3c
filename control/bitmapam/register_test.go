package bitmapam

import (
	"errors"
	"strings"
	"testing"

	"github.com/prismd/prismd/control/am"
	"github.com/prismd/prismd/parser"
)

// TestRegisterErrorGroups: a refusal repeated for every operation of a job
// is stated once with the operations it concerns, distinct refusals each
// once, in switch order.
func TestRegisterErrorGroups(t *testing.T) {
	held := func(node string) error {
		return &am.NodeError{Node: node, Cmd: parser.CmdStage, Status: parser.StatusBadState, State: parser.StateActive, Detail: parser.NoDetail}
	}
	e := &RegisterError{Phase: "STAGE", Errs: map[string]error{
		"l1 (operation 1)": held("l1"), "l1 (operation 2)": held("l1"), "l1 (operation 3)": held("l1"),
		"s1 (operation 2)": &am.NodeError{Node: "s1", Cmd: parser.CmdStage, Err: am.ErrNoAck},
	}, Orphan: []string{"s1 (operation 2)"}}
	want := "bitmapam: STAGE failed: node l1 refused STAGE: BAD_STATE (state ACTIVE) [operations 1, 2, 3]; " +
		"node s1: STAGE: " + am.ErrNoAck.Error() + " [operation 2]; rollback incomplete: no ABORT acknowledgement from s1 (operation 2)"
	if got := e.Error(); got != want {
		t.Errorf("Error():\n got %s\nwant %s", got, want)
	}
}

// TestHeldElsewhere: a STAGE failure is set up again under a newer
// generation only when every refusal says an older generation is held
// (BAD_STATE with an installed state: +1) or this one was retired
// (STALE_GENERATION: +2^20), as the AM's setup retry does.
func TestHeldElsewhere(t *testing.T) {
	ne := func(node string, st parser.Status, state parser.OpState) error {
		return &am.NodeError{Node: node, Cmd: parser.CmdStage, Status: st, State: state}
	}
	for _, tc := range []struct {
		name string
		errs map[string]error
		bump uint32
		held string
	}{
		{"older held", map[string]error{"l1 (operation 1)": ne("l1", parser.StatusBadState, parser.StateActive),
			"l1 (operation 2)": ne("l1", parser.StatusBadState, parser.StateActive), "s1 (operation 1)": ne("s1", parser.StatusBadState, parser.StateStaged)},
			1, "l1 (ACTIVE), s1 (STAGED)"},
		{"stale", map[string]error{"l1 (operation 1)": ne("l1", parser.StatusStaleGeneration, parser.StateNone)}, 1 << 20, ""},
		{"both", map[string]error{"l1 (operation 1)": ne("l1", parser.StatusStaleGeneration, parser.StateNone),
			"l2 (operation 1)": ne("l2", parser.StatusBadState, parser.StateActive)}, 1 << 20, "l2 (ACTIVE)"},
		{"bad state, nothing installed", map[string]error{"l1 (operation 1)": ne("l1", parser.StatusBadState, parser.StateNone)}, 0, ""},
		{"one other refusal", map[string]error{"l1 (operation 1)": ne("l1", parser.StatusBadState, parser.StateActive),
			"l2 (operation 1)": ne("l2", parser.StatusNoResources, parser.StateNone)}, 0, ""},
		{"no answer", map[string]error{"l1 (operation 1)": &am.NodeError{Node: "l1", Cmd: parser.CmdStage, Err: am.ErrNoAck}}, 0, ""},
		{"not a node error", map[string]error{"l1 (operation 1)": errors.New("frame too long")}, 0, ""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			bump, held := (&RegisterError{Phase: "STAGE", Errs: tc.errs}).heldElsewhere()
			if bump != tc.bump || strings.Join(held, ", ") != tc.held {
				t.Errorf("bump %d held %q, want %d %q", bump, strings.Join(held, ", "), tc.bump, tc.held)
			}
		})
	}
}
