// Package mmsg owns the batched AF_PACKET system calls and the
// transmit-only socket that prismd's two raw-socket users share: the
// switch's port sockets (dataplane/internal/afpacket) and the ranks'
// sockets (host/internal/rawio).
//
// Recv and Send hold pre-built mmsghdr/iovec arrays, so a batch of frames
// costs one recvmmsg or sendmmsg and no allocation; Recv's read function is
// built once, for RawConn.Read. SendAll is the transmit loop both sockets
// run over a Send: it skips a frame the kernel rejects instead of losing
// the rest of the batch.
//
// Neither type is safe for concurrent use; sockets pool Send values and own
// one Recv per reader.
package mmsg
