package xdp

// This file owns every unsafe operation of the package: the socket options
// x/sys/unix has no typed wrapper for (UMEM registration, ring sizes, mmap
// offsets, statistics), mapping the rings and viewing their descriptor
// arrays as Go slices, the TX kick and the ethtool channel query.

import (
	"os"
	"runtime"
	"unsafe"

	"golang.org/x/sys/unix"
)

func setsockopt(fd, opt int, p unsafe.Pointer, size uintptr) error {
	_, _, e := unix.Syscall6(unix.SYS_SETSOCKOPT, uintptr(fd), unix.SOL_XDP, uintptr(opt), uintptr(p), size, 0)
	if e != 0 {
		return e
	}
	return nil
}

func getsockopt(fd, opt int, p unsafe.Pointer, size uintptr) error {
	l := uint32(size)
	_, _, e := unix.Syscall6(unix.SYS_GETSOCKOPT, uintptr(fd), unix.SOL_XDP, uintptr(opt), uintptr(p), uintptr(unsafe.Pointer(&l)), 0)
	if e != 0 {
		return e
	}
	return nil
}

// registerUMEM tells the kernel that mem, cut into chunk-byte chunks, is this
// socket's packet memory. Headroom 0: the kernel still leaves
// XDP_PACKET_HEADROOM in front of received data in copy mode.
func registerUMEM(fd int, mem []byte, chunk uint32) error {
	reg := unix.XDPUmemReg{Addr: uint64(uintptr(unsafe.Pointer(&mem[0]))), Len: uint64(len(mem)), Size: chunk}
	if err := setsockopt(fd, unix.XDP_UMEM_REG, unsafe.Pointer(&reg), unsafe.Sizeof(reg)); err != nil {
		return os.NewSyscallError("setsockopt XDP_UMEM_REG", err)
	}
	return nil
}

func setRingSize(fd, opt int, entries uint32, name string) error {
	n := entries
	if err := setsockopt(fd, opt, unsafe.Pointer(&n), unsafe.Sizeof(n)); err != nil {
		return os.NewSyscallError("setsockopt "+name, err)
	}
	return nil
}

func setU32(fd, opt int, v uint32) error {
	return setsockopt(fd, opt, unsafe.Pointer(&v), unsafe.Sizeof(v))
}

func mmapOffsets(fd int) (unix.XDPMmapOffsets, error) {
	var off unix.XDPMmapOffsets
	if err := getsockopt(fd, unix.XDP_MMAP_OFFSETS, unsafe.Pointer(&off), unsafe.Sizeof(off)); err != nil {
		return off, os.NewSyscallError("getsockopt XDP_MMAP_OFFSETS", err)
	}
	return off, nil
}

func statistics(fd int) (unix.XDPStatistics, error) {
	var st unix.XDPStatistics
	if err := getsockopt(fd, unix.XDP_STATISTICS, unsafe.Pointer(&st), unsafe.Sizeof(st)); err != nil {
		return st, os.NewSyscallError("getsockopt XDP_STATISTICS", err)
	}
	return st, nil
}

// mapRing maps one ring of entries descriptors of descSize bytes at page
// offset pgoff and returns the mapping, its indices and a pointer to the
// descriptor array.
func mapRing(fd int, off unix.XDPRingOffset, entries uint32, descSize uintptr, pgoff int64, name string) ([]byte, ring, unsafe.Pointer, error) {
	size := int(off.Desc) + int(entries)*int(descSize)
	mem, err := unix.Mmap(fd, pgoff, size, unix.PROT_READ|unix.PROT_WRITE, unix.MAP_SHARED|unix.MAP_POPULATE)
	if err != nil {
		return nil, ring{}, nil, os.NewSyscallError("mmap "+name, err)
	}
	u32 := func(o uint64) *uint32 { return (*uint32)(unsafe.Pointer(&mem[o])) }
	r := newRing(u32(off.Producer), u32(off.Consumer), u32(off.Flags), entries)
	return mem, r, unsafe.Pointer(&mem[off.Desc]), nil
}

func addrSlice(p unsafe.Pointer, n uint32) []uint64 { return unsafe.Slice((*uint64)(p), n) }

func descSlice(p unsafe.Pointer, n uint32) []unix.XDPDesc { return unsafe.Slice((*unix.XDPDesc)(p), n) }

const (
	addrSize = unsafe.Sizeof(uint64(0))
	descSize = unsafe.Sizeof(unix.XDPDesc{})
)

// sendtoKick asks the kernel to transmit the TX ring (copy mode sends from
// inside this call). MSG_DONTWAIT is mandatory: AF_XDP refuses blocking
// sends. The call never waits for anything but CPU (in copy mode it runs the
// whole transmit path, often including the receiver's softirq, so it is
// long), so it is made raw like the AF_PACKET backend's sendmmsg: the
// goroutine keeps its P instead of having the runtime's sysmon take it back
// and hand it to another thread during every kick.
func sendtoKick(fd int) unix.Errno {
	_, _, e := unix.RawSyscall6(unix.SYS_SENDTO, uintptr(fd), 0, 0, unix.MSG_DONTWAIT, 0, 0)
	return e
}

// ethtoolChannels is struct ethtool_channels.
type ethtoolChannels struct {
	Cmd                                         uint32
	MaxRx, MaxTx, MaxOther, MaxCombined         uint32
	RxCount, TxCount, OtherCount, CombinedCount uint32
}

// rxQueues returns the number of active receive queues of interface name
// (ETHTOOL_GCHANNELS: rx + combined channels), or ok=false when the driver
// does not report channels.
func rxQueues(name string) (n int, ok bool, err error) {
	fd, err := unix.Socket(unix.AF_INET, unix.SOCK_DGRAM|unix.SOCK_CLOEXEC, 0)
	if err != nil {
		return 0, false, os.NewSyscallError("socket", err)
	}
	defer unix.Close(fd)
	// Both on the heap: ifr carries a pointer to ch as a plain integer,
	// which would not follow ch if a goroutine stack moved.
	ch := &ethtoolChannels{Cmd: unix.ETHTOOL_GCHANNELS}
	ifr := new(struct {
		name [unix.IFNAMSIZ]byte
		data uintptr
		_    [16]byte // struct ifreq is 40 bytes on 64-bit
	})
	copy(ifr.name[:], name)
	ifr.data = uintptr(unsafe.Pointer(ch))
	_, _, e := unix.Syscall(unix.SYS_IOCTL, uintptr(fd), unix.SIOCETHTOOL, uintptr(unsafe.Pointer(ifr)))
	runtime.KeepAlive(ch)
	if e == unix.EOPNOTSUPP {
		return 0, false, nil
	}
	if e != 0 {
		return 0, false, os.NewSyscallError("ioctl ETHTOOL_GCHANNELS", e)
	}
	return int(ch.RxCount + ch.CombinedCount), true, nil
}
