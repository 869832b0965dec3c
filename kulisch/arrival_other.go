//go:build !amd64

package kulisch

// Without the amd64 kernels every loop of ArrivalVector is the scalar one.

func addFP32Bulk(s []float32, vals []byte) int { return 0 }
func putFP32Bulk(dst []byte, s []float32) int  { return 0 }
func fillBulk(s []float32, bits uint32) int    { return 0 }
