// Package xdp owns the AF_XDP sockets of one interface: the UMEM (one
// anonymous mapping of fixed-size chunks per receive queue), the four
// single-producer/single-consumer rings the kernel shares with it (fill,
// completion, RX, TX; mapped with golang.org/x/sys/unix), one XSK socket per
// receive queue bound in copy mode, and the XDP program that steers frames to
// them. The program is built with github.com/cilium/ebpf/asm (no C, no
// clang): it redirects every frame to the XSKMAP entry of its receive queue,
// except frames for the interface's own MAC that are not PRISM (those go to
// the host stack, as the kernel would deliver them next to an AF_PACKET
// socket), and falls back to XDP_PASS when no socket is at that index. It is
// attached through a BPF link, so it is detached when the link is closed and
// also when the process dies: a crashed prismd leaves no program behind.
//
// Like package afpacket it is one of the only two dataplane packages that use
// golang.org/x/sys/unix and unsafe. It knows nothing about bridging or PRISM
// beyond the one EtherType test in the program: it moves byte slices.
package xdp
