// This file owns 'prismctl tcpcopy': the TCP peer of 'prismctl mcast' in
// scripts/bench-bitmap.sh. 'send' copies one file to several receivers over
// TCP, in parallel (one connection each, the fair peer of a multicast) or
// one after another; 'recv' accepts one copy, writes it and answers with the
// SHA-256 of what it got, so the sender reports a verified delivery to every
// receiver, as 'mcast send' does. The frames are ordinary IPv4 through the
// switches' learning bridge: no PRISM involved.

package main

import (
	"bufio"
	"bytes"
	"crypto/sha256"
	"encoding/binary"
	"encoding/hex"
	"errors"
	"flag"
	"fmt"
	"io"
	"net"
	"os"
	"strings"
	"sync"
	"time"
)

func init() {
	register("tcpcopy", "copy a file to several hosts over TCP, the peer of 'mcast' (send|recv)", runTCPCopy)
}

func tcpcopyUsage(w io.Writer) {
	fmt.Fprintln(w, "usage: prismctl tcpcopy send --file F --to 10.0.0.2:7100,10.0.0.3:7100 [--sequential]")
	fmt.Fprintln(w, "       prismctl tcpcopy recv --out F [--listen :7100]")
}

func runTCPCopy(args []string) int {
	if rc, ok := pickSub("tcpcopy", args, []string{"send", "recv"}, tcpcopyUsage); !ok {
		return rc
	}
	if args[0] == "send" {
		return tcpSend(args[1:])
	}
	return tcpRecv(args[1:])
}

// tcpBuf is the copy buffer: large enough that a syscall moves many
// segments at a jumbo MTU.
const tcpBuf = 1 << 20

func tcpSend(args []string) int {
	fs := flag.NewFlagSet("tcpcopy send", flag.ContinueOnError)
	file := fs.String("file", "", "file to send")
	to := fs.String("to", "", "comma-separated receivers, host:port")
	sequential := fs.Bool("sequential", false, "copy to one receiver after the other (default: all at once, one connection each)")
	timeout := fs.Duration("timeout", 10*time.Minute, "give up after this long")
	if rc, ok := parseFlags(fs, args); !ok {
		return rc
	}
	if *file == "" || *to == "" {
		return flagErr(fs, errors.New("--file and --to are required"))
	}
	f, err := os.Open(*file)
	if err != nil {
		fmt.Fprintf(os.Stderr, "prismctl tcpcopy send: %v\n", err)
		return 1
	}
	defer f.Close()
	fi, err := f.Stat()
	if err != nil {
		fmt.Fprintf(os.Stderr, "prismctl tcpcopy send: %v\n", err)
		return 1
	}
	size := fi.Size()
	dsts := strings.Split(*to, ",")
	deadline := time.Now().Add(*timeout)
	// Timed like 'mcast send': the digest of the file is part of the work.
	start := time.Now()
	h := sha256.New()
	if _, err := io.Copy(h, io.NewSectionReader(f, 0, size)); err != nil {
		fmt.Fprintf(os.Stderr, "prismctl tcpcopy send: reading %s: %v\n", *file, err)
		return 1
	}
	want := h.Sum(nil)
	took := make([]time.Duration, len(dsts))
	errs := make([]error, len(dsts))
	one := func(i int) {
		t0 := time.Now()
		errs[i] = tcpSendOne(dsts[i], io.NewSectionReader(f, 0, size), size, want, deadline)
		took[i] = time.Since(t0)
	}
	if *sequential {
		for i := range dsts {
			one(i)
		}
	} else {
		var wg sync.WaitGroup
		for i := range dsts {
			wg.Add(1)
			go func() { defer wg.Done(); one(i) }()
		}
		wg.Wait()
	}
	total := time.Since(start)
	mode := "parallel"
	if *sequential {
		mode = "sequential"
	}
	rc := 0
	for i, d := range dsts {
		if errs[i] != nil {
			fmt.Fprintf(os.Stderr, "prismctl tcpcopy send: %s: %v\n", d, errs[i])
			rc = 1
			continue
		}
		fmt.Printf("%s: %d bytes in %v, SHA-256 verified by the receiver\n", d, size, took[i].Round(time.Millisecond))
	}
	fmt.Printf("sent %s (%d bytes) to %d receivers over TCP (%s) in %v (%.1f MB/s per receiver)\n", *file, size, len(dsts), mode,
		total.Round(time.Millisecond), float64(size)/total.Seconds()/1e6)
	return rc
}

// tcpSendOne sends size (8 bytes, big endian), the data, and checks the
// receiver's SHA-256 reply.
func tcpSendOne(addr string, r io.Reader, size int64, want []byte, deadline time.Time) error {
	var c net.Conn
	var err error
	// The receiver may still be starting: retry the connect briefly.
	for i := 0; i < 50; i++ {
		if c, err = net.DialTimeout("tcp", addr, 2*time.Second); err == nil {
			break
		}
		time.Sleep(100 * time.Millisecond)
	}
	if err != nil {
		return err
	}
	defer c.Close()
	_ = c.SetDeadline(deadline)
	var hdr [8]byte
	binary.BigEndian.PutUint64(hdr[:], uint64(size))
	if _, err := c.Write(hdr[:]); err != nil {
		return err
	}
	if _, err := io.CopyBuffer(c, r, make([]byte, tcpBuf)); err != nil {
		return err
	}
	got := make([]byte, sha256.Size)
	if _, err := io.ReadFull(c, got); err != nil {
		return fmt.Errorf("no digest from the receiver: %w", err)
	}
	if !bytes.Equal(got, want) {
		return fmt.Errorf("receiver's SHA-256 %x differs from the file's %x", got, want)
	}
	return nil
}

func tcpRecv(args []string) int {
	fs := flag.NewFlagSet("tcpcopy recv", flag.ContinueOnError)
	out := fs.String("out", "", "where to write the file")
	listen := fs.String("listen", ":7100", "address to accept the copy on")
	timeout := fs.Duration("timeout", 10*time.Minute, "give up after this long")
	if rc, ok := parseFlags(fs, args); !ok {
		return rc
	}
	if *out == "" {
		return flagErr(fs, errors.New("--out is required"))
	}
	ln, err := net.Listen("tcp", *listen)
	if err != nil {
		fmt.Fprintf(os.Stderr, "prismctl tcpcopy recv: %v\n", err)
		return 1
	}
	defer ln.Close()
	if tl, ok := ln.(*net.TCPListener); ok {
		_ = tl.SetDeadline(time.Now().Add(*timeout))
	}
	c, err := ln.Accept()
	if err != nil {
		fmt.Fprintf(os.Stderr, "prismctl tcpcopy recv: %v\n", err)
		return 1
	}
	defer c.Close()
	_ = c.SetDeadline(time.Now().Add(*timeout))
	start := time.Now()
	var hdr [8]byte
	if _, err := io.ReadFull(c, hdr[:]); err != nil {
		fmt.Fprintf(os.Stderr, "prismctl tcpcopy recv: %v\n", err)
		return 1
	}
	size := int64(binary.BigEndian.Uint64(hdr[:]))
	f, err := os.Create(*out)
	if err != nil {
		fmt.Fprintf(os.Stderr, "prismctl tcpcopy recv: %v\n", err)
		return 1
	}
	defer f.Close()
	h := sha256.New()
	w := bufio.NewWriterSize(io.MultiWriter(f, h), tcpBuf)
	n, err := io.CopyBuffer(w, io.LimitReader(c, size), make([]byte, tcpBuf))
	if err == nil {
		err = w.Flush()
	}
	if err == nil && n != size {
		err = fmt.Errorf("connection closed after %d of %d bytes", n, size)
	}
	if err != nil {
		fmt.Fprintf(os.Stderr, "prismctl tcpcopy recv: %v\n", err)
		return 1
	}
	sum := h.Sum(nil)
	if _, err := c.Write(sum); err != nil {
		fmt.Fprintf(os.Stderr, "prismctl tcpcopy recv: %v\n", err)
		return 1
	}
	took := time.Since(start)
	fmt.Printf("received %d bytes into %s in %v (%.1f MB/s), SHA-256 %s\n", size, *out, took.Round(time.Millisecond),
		float64(size)/took.Seconds()/1e6, hex.EncodeToString(sum))
	return 0
}
