package xdp

// This file owns the XDP program and its XSKMAP. The program is a dozen
// instructions, assembled here with cilium/ebpf/asm so building prismd needs
// no C toolchain:
//
//	if frame >= 14 bytes && dst == port MAC && EtherType != 0x88B5:
//	        return XDP_PASS          // the host's own traffic (ARP, ssh, ...)
//	return bpf_redirect_map(&xsks, ctx->rx_queue_index, XDP_PASS)
//
// The last argument of bpf_redirect_map is the action when the map has no
// socket at that index (Linux 5.3+), so a queue without a socket still
// reaches the host stack instead of being dropped.

import (
	"encoding/binary"
	"errors"
	"fmt"

	"github.com/cilium/ebpf"
	"github.com/cilium/ebpf/asm"
	"github.com/cilium/ebpf/link"
	"golang.org/x/sys/unix"
)

// struct xdp_md field offsets (include/uapi/linux/bpf.h).
const (
	xdpMdData         = 0
	xdpMdDataEnd      = 4
	xdpMdRxQueueIndex = 16
	xdpPass           = 2 // XDP_PASS
	prismEtherType    = 0x88B5
)

// program is the loaded XDP program, its XSKMAP and, once attached, its link.
type program struct {
	prog *ebpf.Program
	xsks *ebpf.Map
	lnk  link.Link
}

// loadProgram creates an XSKMAP of queues entries and the program. mac is
// the port address whose non-PRISM traffic goes to the host stack (all zero:
// none). frags marks the program multi-buffer aware (BPF_F_XDP_HAS_FRAGS),
// required for frames longer than one page.
func loadProgram(queues int, mac [6]byte, frags bool) (*program, error) {
	xsks, err := ebpf.NewMap(&ebpf.MapSpec{Name: "prismd_xsks", Type: ebpf.XSKMap, KeySize: 4, ValueSize: 4,
		MaxEntries: uint32(queues)})
	if err != nil {
		return nil, fmt.Errorf("create XSKMAP: %w", err)
	}
	var insns asm.Instructions
	insns = append(insns, asm.Mov.Reg(asm.R6, asm.R1))
	if mac != [6]byte{} {
		// Loads are in host byte order; compare against the same bytes
		// read the same way.
		lo := binary.NativeEndian.Uint32(mac[0:4])
		hi := binary.NativeEndian.Uint16(mac[4:6])
		et := binary.NativeEndian.Uint16([]byte{prismEtherType >> 8, prismEtherType & 0xff})
		insns = append(insns,
			asm.LoadMem(asm.R2, asm.R6, xdpMdData, asm.Word),
			asm.LoadMem(asm.R3, asm.R6, xdpMdDataEnd, asm.Word),
			asm.Mov.Reg(asm.R4, asm.R2),
			asm.Add.Imm(asm.R4, 14),
			asm.JGT.Reg(asm.R4, asm.R3, "redirect"), // shorter than a header: the dataplane counts it
			asm.LoadMem(asm.R5, asm.R2, 0, asm.Word),
			asm.LoadImm(asm.R4, int64(lo), asm.DWord),
			asm.JNE.Reg(asm.R5, asm.R4, "redirect"),
			asm.LoadMem(asm.R5, asm.R2, 4, asm.Half),
			asm.JNE.Imm(asm.R5, int32(hi), "redirect"),
			asm.LoadMem(asm.R5, asm.R2, 12, asm.Half),
			asm.JEq.Imm(asm.R5, int32(et), "redirect"),
			asm.Mov.Imm(asm.R0, xdpPass),
			asm.Return(),
		)
	}
	insns = append(insns,
		asm.LoadMem(asm.R2, asm.R6, xdpMdRxQueueIndex, asm.Word).WithSymbol("redirect"),
		asm.LoadMapPtr(asm.R1, xsks.FD()),
		asm.Mov.Imm(asm.R3, xdpPass),
		asm.FnRedirectMap.Call(),
		asm.Return(),
	)
	spec := &ebpf.ProgramSpec{Name: "prismd_xsk", Type: ebpf.XDP, AttachType: ebpf.AttachXDP,
		Instructions: insns, License: "Dual MIT/GPL"}
	if frags {
		spec.Flags = unix.BPF_F_XDP_HAS_FRAGS
	}
	prog, err := ebpf.NewProgram(spec)
	if err != nil {
		xsks.Close()
		return nil, fmt.Errorf("load XDP program: %w", err)
	}
	return &program{prog: prog, xsks: xsks}, nil
}

// register puts socket fd at the map index of receive queue queue.
func (p *program) register(queue, fd int) error {
	if err := p.xsks.Put(uint32(queue), uint32(fd)); err != nil {
		return fmt.Errorf("XSKMAP[%d] = socket: %w", queue, err)
	}
	return nil
}

// attach links the program to interface ifindex, in driver (native) mode or
// generic (SKB) mode. The link is a BPF link: closing it, or the process
// exiting, detaches the program.
func (p *program) attach(ifindex int, native bool) error {
	flags := link.XDPGenericMode
	if native {
		flags = link.XDPDriverMode
	}
	l, err := link.AttachXDP(link.XDPOptions{Program: p.prog, Interface: ifindex, Flags: flags})
	if err != nil {
		if errors.Is(err, unix.EBUSY) || errors.Is(err, unix.EEXIST) {
			return fmt.Errorf("%w (another XDP program is attached; see `ip link show`, remove it with `ip link set dev IFACE xdp off`)", err)
		}
		return err
	}
	p.lnk = l
	return nil
}

func (p *program) close() {
	if p.lnk != nil {
		_ = p.lnk.Close()
		p.lnk = nil
	}
	_ = p.prog.Close()
	_ = p.xsks.Close()
}
