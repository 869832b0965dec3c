// This file owns the one unsafe concern of package deploy: the SIOCETHTOOL
// ioctls that turn offloads off on a lab interface, the same requests
// `ethtool -K IF tx off rx off tso off gso off gro off` makes, without a
// fork and exec per interface (about 15 ms each; a 20-node lab has 38).

package deploy

import (
	"encoding/binary"
	"fmt"
	"os"
	"strings"
	"unsafe"

	"golang.org/x/sys/unix"
)

// ethSSFeatures is ETH_SS_FEATURES, the string set naming feature bits.
const ethSSFeatures = 4

// ethGStringLen is ETH_GSTRING_LEN.
const ethGStringLen = 32

// offloadFeature reports whether feature name belongs to one of the groups
// ethtool's -K tx, rx, tso, gso and gro switch (ethtool's off_flag_def).
func offloadFeature(name string) bool {
	switch {
	case strings.HasPrefix(name, "tx-checksum-"): // tx
		return true
	case name == "rx-checksum": // rx
		return true
	case strings.HasPrefix(name, "tx-tcp") && strings.HasSuffix(name, "-segmentation"): // tso
		return true
	case name == "tx-generic-segmentation": // gso
		return true
	case name == "rx-gro": // gro
		return true
	}
	return false
}

// ifreqData is struct ifreq with the ifr_data member of the union.
type ifreqData struct {
	name [unix.IFNAMSIZ]byte
	data unsafe.Pointer
	_    [24 - unsafe.Sizeof(uintptr(0))]byte // rest of the 24-byte union
}

// ethtool issues one SIOCETHTOOL request; buf starts with the command word
// and is modified in place. A positive return (e.g. ETHTOOL_F_UNSUPPORTED
// for fixed features) is not an error.
func ethtool(fd int, ifc string, buf []uint32) error {
	var ifr ifreqData
	copy(ifr.name[:unix.IFNAMSIZ-1], ifc)
	ifr.data = unsafe.Pointer(&buf[0])
	_, _, errno := unix.Syscall(unix.SYS_IOCTL, uintptr(fd), unix.SIOCETHTOOL, uintptr(unsafe.Pointer(&ifr)))
	if errno != 0 {
		return os.NewSyscallError(fmt.Sprintf("ioctl SIOCETHTOOL %#x %s", buf[0], ifc), errno)
	}
	return nil
}

// featureNames returns the kernel's feature names, indexed by bit.
func featureNames(fd int, ifc string) ([]string, error) {
	// struct ethtool_sset_info: cmd, reserved, u64 sset_mask, u32 data[].
	info := []uint32{unix.ETHTOOL_GSSET_INFO, 0, 1 << ethSSFeatures, 0, 0}
	if err := ethtool(fd, ifc, info); err != nil {
		return nil, err
	}
	if info[2]&(1<<ethSSFeatures) == 0 {
		return nil, fmt.Errorf("deploy: %s: kernel reports no feature strings", ifc)
	}
	n := int(info[4])
	// struct ethtool_gstrings: cmd, string_set, len, u8 data[len*32].
	gs := make([]uint32, 3+n*ethGStringLen/4)
	gs[0], gs[1], gs[2] = unix.ETHTOOL_GSTRINGS, ethSSFeatures, uint32(n)
	if err := ethtool(fd, ifc, gs); err != nil {
		return nil, err
	}
	raw := make([]byte, n*ethGStringLen)
	for i, w := range gs[3:] {
		binary.NativeEndian.PutUint32(raw[4*i:], w)
	}
	names := make([]string, n)
	for i := range names {
		s := raw[i*ethGStringLen : (i+1)*ethGStringLen]
		if j := strings.IndexByte(string(s), 0); j >= 0 {
			s = s[:j]
		}
		names[i] = string(s)
	}
	return names, nil
}

// offloadsOffHere turns offloads off on ifaces of the calling thread's
// namespace, where fd is an AF_INET socket opened.
func offloadsOffHere(fd int, ifaces []string) error {
	for _, ifc := range ifaces {
		names, err := featureNames(fd, ifc)
		if err != nil {
			return err
		}
		// struct ethtool_sfeatures: cmd, size, then size blocks of
		// {valid, requested}; requested stays 0 for "off".
		words := (len(names) + 31) / 32
		sf := make([]uint32, 2+2*words)
		sf[0], sf[1] = unix.ETHTOOL_SFEATURES, uint32(words)
		for bit, name := range names {
			if offloadFeature(name) {
				sf[2+2*(bit/32)] |= 1 << (bit % 32)
			}
		}
		if err := ethtool(fd, ifc, sf); err != nil {
			return fmt.Errorf("deploy: offloads off on %s: %w", ifc, err)
		}
	}
	return nil
}
