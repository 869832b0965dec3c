// Package e2e holds prismd's end-to-end tests: real network namespaces and
// veth pairs built by deploy/labtest from the shipped topologies
// (deploy/lab/single.yaml, single-afxdp.yaml, spine-leaf.yaml, fat-tree.yaml), real prismd
// switches, the Aggregation Manager on one host's interface and ranks on
// the host namespaces, either in-process (package host on a socket opened
// inside the namespace with Lab.Do) or as 'prismctl allreduce' processes
// started with Lab.Exec (the ones a test kills).
//
// Results are checked against an independent oracle: the exact sum of the
// inputs in math/big, rounded once to nearest-even binary32.
//
// The tests need root; they skip, saying so, only when not root. CI runs them
// as root. PRISMD_SOAK=1 makes the vectors and repetitions larger.
//
// This package has no non-test code and owns nothing but the tests.
package e2e
