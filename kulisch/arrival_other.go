//go:build !amd64

package kulisch

// Without the amd64 kernels every loop of ArrivalVector is the scalar one.

// haveAVX2 is false off amd64; tests switch it like on amd64.
var haveAVX2 = false

// haveAVX512 is false off amd64 (the tests switch it like on amd64).
var haveAVX512 = false

func addFP32Bulk(s []float32, vals []byte) int { return 0 }
func putFP32Bulk(dst []byte, s []float32) int  { return 0 }
func fillBulk(s []float32, bits uint32) int    { return 0 }

func laneAddBulk(lane []float64, vals []byte, flags []uint8, lim float64) int   { return 0 }
func laneAdd64Bulk(lane []float64, vals []byte, flags []uint8, lim float64) int { return 0 }
func laneCopyBulk(dst []byte, lane []float64, flags, nlo, hi []uint8) int       { return 0 }
func laneOutBulk(dst []byte, lane []float64, flags, nlo, hi []uint8) int        { return 0 }
func laneExactBulk(lane []float64, flags, nlo, hi []uint8) int                  { return 0 }
