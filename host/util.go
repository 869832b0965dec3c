package host

import (
	"bytes"
	"io"
	"sync/atomic"
	"time"
)

func bytesReader(b []byte) io.Reader { return bytes.NewReader(b) }

// epoch anchors the monotonic nanosecond clock the stream windows use.
var epoch = time.Now()

// monoSkew is added to mono: tests move the clock forward to stand for a
// process that did not run.
var monoSkew atomic.Int64

func mono() int64 { return int64(time.Since(epoch)) + monoSkew.Load() }
