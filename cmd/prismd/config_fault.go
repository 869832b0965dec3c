// This file owns the direction sections of a port's fault key (tests and
// labs only): fault.ingress and fault.egress. The original form, egress
// keys directly under fault, stays valid; the two egress forms exclude
// each other.

package main

import (
	"time"

	"github.com/prismd/prismd/dataplane"
)

// EgressFaultConfig impairs frames transmitted on the port: the keys that
// may also sit directly under fault, plus seed.
type EgressFaultConfig struct {
	ReorderPercent float64 `yaml:"reorder_percent"` // 0..100; a float, as yaml would truncate 0.5 into an int's 0
	ReorderDepth   int     `yaml:"reorder_depth"`   // 1..1000 when reorder_percent > 0
	DelayUS        int     `yaml:"delay_us"`        // 0..1000000
	Seed           uint64  `yaml:"seed"`            // reproducible decisions; 0 = a fixed seed
}

// IngressFaultConfig impairs frames received on the port, before the
// dataplane classifies them. Percentages may have fractions (0.1).
type IngressFaultConfig struct {
	DropPercent      float64 `yaml:"drop_percent"`      // 0..100
	DuplicatePercent float64 `yaml:"duplicate_percent"` // 0..100
	ReorderPercent   float64 `yaml:"reorder_percent"`   // 0..100
	ReorderDepth     int     `yaml:"reorder_depth"`     // 1..1000 when reorder_percent > 0
	DelayUS          int     `yaml:"delay_us"`          // 0..1000000
	Seed             uint64  `yaml:"seed"`              // reproducible decisions; 0 = a fixed seed
}

type badFunc func(field, format string, a ...any) error

// validateSections checks fault.ingress and fault.egress; field is
// "ports[i].fault".
func (f *FaultConfig) validateSections(field string, bad badFunc) error {
	if e := f.Egress; e != nil {
		if f.ReorderPercent != 0 || f.ReorderDepth != 0 || f.DelayUS != 0 {
			return bad(field+".egress", "egress keys are also given directly under fault; use one form (fault.egress, or the keys under fault)")
		}
		if err := checkReorder(field+".egress", e.ReorderPercent, e.ReorderDepth, bad); err != nil {
			return err
		}
		if err := checkDelay(field+".egress", e.DelayUS, bad); err != nil {
			return err
		}
	}
	if in := f.Ingress; in != nil {
		for _, p := range []struct {
			key string
			v   float64
		}{{"drop_percent", in.DropPercent}, {"duplicate_percent", in.DuplicatePercent}} {
			if !(p.v >= 0 && p.v <= 100) {
				return bad(field+".ingress."+p.key, "%v is not a percentage; use 0..100 (fractions allowed, e.g. 0.5)", p.v)
			}
		}
		if err := checkReorder(field+".ingress", in.ReorderPercent, in.ReorderDepth, bad); err != nil {
			return err
		}
		if err := checkDelay(field+".ingress", in.DelayUS, bad); err != nil {
			return err
		}
	}
	return nil
}

func checkReorder(field string, pct float64, depth int, bad badFunc) error {
	if !(pct >= 0 && pct <= 100) {
		return bad(field+".reorder_percent", "%v is not a percentage; use 0..100", pct)
	}
	if depth < 0 || depth > 1000 {
		return bad(field+".reorder_depth", "%d is out of range; use 1..1000", depth)
	}
	if pct > 0 && depth == 0 {
		return bad(field+".reorder_depth", "must be >= 1 when reorder_percent > 0 (how many later frames overtake a held one)")
	}
	return nil
}

func checkDelay(field string, us int, bad badFunc) error {
	if us < 0 || us > 1_000_000 {
		return bad(field+".delay_us", "%d is out of range; use 0..1000000 microseconds", us)
	}
	return nil
}

// faultSections fills the direction sections into fault.
func (f *FaultConfig) faultSections(fault *dataplane.Fault) {
	if e := f.Egress; e != nil {
		fault.ReorderPercent, fault.ReorderDepth, fault.Seed = e.ReorderPercent, e.ReorderDepth, e.Seed
		fault.Delay = time.Duration(e.DelayUS) * time.Microsecond
	}
	if in := f.Ingress; in != nil {
		fault.Ingress = dataplane.IngressFault{DropPercent: in.DropPercent, DuplicatePercent: in.DuplicatePercent,
			ReorderPercent: in.ReorderPercent, ReorderDepth: in.ReorderDepth,
			Delay: time.Duration(in.DelayUS) * time.Microsecond, Seed: in.Seed}
	}
}
