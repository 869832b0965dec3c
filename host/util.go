package host

import (
	"bytes"
	"io"
	"time"
)

func bytesReader(b []byte) io.Reader { return bytes.NewReader(b) }

// epoch anchors the monotonic nanosecond clock the stream windows use.
var epoch = time.Now()

func mono() int64 { return int64(time.Since(epoch)) }
