// This file owns the package's errors.

package bitmap

import (
	"errors"
	"fmt"
	"sort"
	"strings"
)

var (
	// ErrClosed: the Port was closed during the operation.
	ErrClosed = errors.New("bitmap: port closed")
	// ErrNotInPlan: the host has no part in the plan's operation.
	ErrNotInPlan = errors.New("bitmap: host not in the plan")
	// ErrFailed is wrapped by MissingError.
	ErrFailed = errors.New("bitmap: operation failed")
	// ErrTooLarge: a token or vector does not fit the job's frames.
	ErrTooLarge = errors.New("bitmap: does not fit")
)

// MissingError names the endpoints that never contributed (AllReduce), never
// acknowledged (reliable multicast) or never returned (MoE), after every
// selective retransmission round.
type MissingError struct {
	Op        string // "allreduce", "multicast", "moe"
	Token     uint64 // the chunk, window or token that failed first
	Endpoints []int
	Hosts     []string // the hosts of Endpoints, deduplicated, sorted
	Rounds    int
}

func (e *MissingError) Error() string {
	ids := make([]string, len(e.Endpoints))
	for i, id := range e.Endpoints {
		ids[i] = fmt.Sprint(id)
	}
	rounds := ""
	if e.Rounds > 0 {
		rounds = fmt.Sprintf(" after %d retransmission rounds", e.Rounds)
	}
	return fmt.Sprintf("bitmap %s: token %d incomplete%s: missing endpoints %s (hosts %s)",
		e.Op, e.Token, rounds, strings.Join(ids, ","), strings.Join(e.Hosts, ","))
}

func (e *MissingError) Unwrap() error { return ErrFailed }

func hostsOf(ids []int, hostOf map[int]string) []string {
	m := map[string]bool{}
	for _, id := range ids {
		if h, ok := hostOf[id]; ok {
			m[h] = true
		}
	}
	r := make([]string, 0, len(m))
	for h := range m {
		r = append(r, h)
	}
	sort.Strings(r)
	return r
}
