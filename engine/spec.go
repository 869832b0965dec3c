// This file owns Spec, what STAGE installs into the engine, and its
// structural validation (what bindings each role and collective needs).

package engine

import (
	"fmt"
	"time"

	"github.com/prismd/prismd/kulisch"
	"github.com/prismd/prismd/parser"
)

// Binding is one local binding of an operation: a directed collective edge
// resolved to a physical port and peer MAC.
type Binding struct {
	Kind    parser.BindingKind
	Rank    bool   // the peer is a rank (else a switch)
	Stream  uint16 // contributor ID (CONTRIBUTOR, PARENT) or Result Path ID (RESULT_*)
	LocalEP uint16
	PeerEP  uint16
	Port    int
	PeerMAC [6]byte
}

// Spec is one operation's local context as STAGE installs it.
type Spec struct {
	Op         parser.OpKey
	Role       parser.Role
	Collective parser.Collective
	Tuple      kulisch.Tuple
	// KulischWidth W in bits (0 when the tuple uses no Kulisch format).
	KulischWidth int
	VectorLen    uint32
	MTU          int
	// Window limits per stream (docs/protocol.md 5.1).
	WindowIntervals int
	ReplayDepth     int
	WindowBytes     int
	WindowElements  uint32
	MaxTerms        uint32
	// Timeout is the contributor inactivity bound.
	Timeout  time.Duration
	Bindings []Binding
}

// SpecError names the part of a Spec that is wrong. Binding is the binding
// index, or -1 for a context field.
type SpecError struct {
	Binding int
	Field   string
	Why     string
}

func (e *SpecError) Error() string {
	if e.Binding < 0 {
		return fmt.Sprintf("engine: spec %s: %s", e.Field, e.Why)
	}
	return fmt.Sprintf("engine: spec binding %d %s: %s", e.Binding, e.Field, e.Why)
}

// SpecFromStage converts a validated STAGE into a Spec.
func SpecFromStage(op parser.OpKey, st *parser.Stage) Spec {
	c := &st.Context
	s := Spec{
		Op: op, Role: c.Role, Collective: c.Collective,
		Tuple: kulisch.Tuple{Input: kulisch.Format(c.InputFormat), Acc: kulisch.Policy(c.AccPolicy),
			Partial: kulisch.Format(c.PartialPolicy), Output: kulisch.Format(c.OutputFormat)},
		KulischWidth: int(c.KulischWidth), VectorLen: c.VectorLen, MTU: int(c.MTU),
		WindowIntervals: int(c.WindowIntervals), ReplayDepth: int(c.ReplayDepth),
		WindowBytes: int(c.WindowBytes), WindowElements: c.WindowElements, MaxTerms: c.MaxTerms,
		Timeout: time.Duration(c.TimeoutMs) * time.Millisecond,
	}
	for i := 0; i < st.NBindings(); i++ {
		b := st.Binding(i)
		s.Bindings = append(s.Bindings, Binding{Kind: b.Kind, Rank: b.Flags&parser.BindingFlagRank != 0,
			Stream: b.Stream, LocalEP: b.LocalEP, PeerEP: b.PeerEP, Port: int(b.Port), PeerMAC: b.PeerMAC})
	}
	return s
}

// Validate checks what the engine needs beyond the wire rules: the tuple and
// width (kulisch), and that the bindings fit the role and collective. ports
// is the node's port count (0 = do not check ports).
func (s *Spec) Validate(ports int) error {
	if s.Collective != parser.CollReduce && s.Collective != parser.CollAllReduce {
		return &SpecError{-1, "collective", "only REDUCE and ALLREDUCE are implemented"}
	}
	if err := s.Tuple.ValidateStage(s.KulischWidth, s.MaxTerms); err != nil {
		return &SpecError{-1, "tuple", err.Error()}
	}
	if s.VectorLen == 0 || !parser.IsDefinedMTU(s.MTU) || s.WindowIntervals < 1 || s.ReplayDepth < 1 ||
		s.WindowBytes < s.MTU || s.WindowElements < uint32(parser.MaxPacketElements(s.MTU)) || s.Timeout <= 0 {
		return &SpecError{-1, "limits", "vector length, MTU or window limits out of range"}
	}
	var nContrib, nParent, nIn, nOut int
	type key struct {
		out    bool
		result bool
		stream uint16
	}
	seen := map[key]bool{}
	eps := map[uint16]bool{}
	for i, b := range s.Bindings {
		if ports > 0 && (b.Port < 0 || b.Port >= ports) {
			return &SpecError{i, "port", fmt.Sprintf("port %d of %d", b.Port, ports)}
		}
		if b.PeerMAC == ([6]byte{}) || b.PeerMAC[0]&1 != 0 {
			return &SpecError{i, "peer_mac", "zero or group MAC"}
		}
		k := key{stream: b.Stream}
		switch b.Kind {
		case parser.KindContributor:
			nContrib++
		case parser.KindParent:
			nParent++
			k.out = true
		case parser.KindResultIn:
			nIn++
			k.result = true
		case parser.KindResultOut:
			nOut++
			k.out, k.result = true, true
		default:
			return &SpecError{i, "kind", "unknown binding kind"}
		}
		if seen[k] {
			return &SpecError{i, "stream", fmt.Sprintf("duplicate stream %d", b.Stream)}
		}
		seen[k] = true
		// Incoming streams are told apart by their Local Endpoint too
		// (docs/protocol.md 5.1); an outgoing binding's may repeat one.
		if b.Kind == parser.KindContributor || b.Kind == parser.KindResultIn {
			if eps[b.LocalEP] {
				return &SpecError{i, "local_endpoint", fmt.Sprintf("two incoming bindings share local endpoint %d", b.LocalEP)}
			}
			eps[b.LocalEP] = true
		}
	}
	if nContrib == 0 {
		return &SpecError{-1, "bindings", "no CONTRIBUTOR binding"}
	}
	switch s.Role {
	case parser.RoleSingle, parser.RoleRoot:
		if nParent != 0 || nIn != 0 {
			return &SpecError{-1, "bindings", s.Role.String() + " has no PARENT or RESULT_IN binding"}
		}
		if nOut == 0 {
			return &SpecError{-1, "bindings", s.Role.String() + " needs a RESULT_OUT binding"}
		}
	case parser.RoleLeaf, parser.RoleInternal:
		if nParent != 1 {
			return &SpecError{-1, "bindings", s.Role.String() + " needs exactly one PARENT binding"}
		}
		if nIn > 1 || (nIn == 1) != (nOut > 0) {
			return &SpecError{-1, "bindings", "a relay needs one RESULT_IN and at least one RESULT_OUT, or neither"}
		}
	default:
		return &SpecError{-1, "role", "unknown role"}
	}
	if s.Role == parser.RoleSingle || s.Role == parser.RoleLeaf {
		for i, b := range s.Bindings {
			if b.Kind == parser.KindContributor && !b.Rank && s.Role == parser.RoleSingle {
				return &SpecError{i, "flags", "SINGLE contributors are ranks"}
			}
		}
	}
	return nil
}

// ringElements is the number of accumulators: the element window, but never
// more than the vector (a short vector needs no larger ring).
func (s *Spec) ringElements() uint32 { return min(s.WindowElements, s.VectorLen) }

// RingBytes is the accumulator memory the spec's element window needs.
func (s *Spec) RingBytes() int {
	per := 4
	if s.Tuple.Acc == kulisch.KulischFixed {
		per = 8*((s.KulischWidth+31)/32+2) + 1
	}
	return int(s.ringElements()) * per
}
