package parser

import "testing"

func examples(testing.TB) []Example { return Examples() }

func TestExamplesDecode(t *testing.T) {
	for _, e := range examples(t) {
		cl, err := Classify(e.Frame)
		if err != nil {
			t.Fatalf("%s: %v", e.Marker, err)
		}
		switch cl {
		case ClassControl:
			var c Control
			err = c.Decode(e.Frame, e.Limits)
		case ClassData, ClassResult:
			var d Data
			err = d.Decode(e.Frame, e.Limits)
		case ClassProgress:
			var g Progress
			err = g.Decode(e.Frame, e.Limits)
		}
		if err != nil {
			t.Errorf("%s: %v", e.Marker, err)
		}
	}
}
