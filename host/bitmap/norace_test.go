//go:build !race

package bitmap

const raceEnabled = false
