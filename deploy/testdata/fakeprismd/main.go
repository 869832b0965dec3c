// Command fakeprismd stands in for bin/prismd in deploy's own tests, so the
// lab machinery (config, start, readiness, stop, rollback) is tested on its
// own: it checks the generated config strictly, joins the ports in a Linux
// bridge so hosts can ping, and serves per-port counters on /metrics.
// FAKEPRISMD_MODE selects misbehaviour: "die" (exit before ready),
// "ignoreterm" (survive SIGTERM), "mute" (never become ready).
package main

import (
	"bytes"
	"flag"
	"fmt"
	"net/http"
	"os"
	"os/signal"
	"syscall"

	"github.com/prismd/prismd/deploy"
	"github.com/vishvananda/netlink"
	"go.yaml.in/yaml/v3"
)

func main() {
	cfgPath := flag.String("config", "", "config file")
	flag.Parse()
	b, err := os.ReadFile(*cfgPath)
	if err != nil {
		fmt.Fprintln(os.Stderr, "fakeprismd:", err)
		os.Exit(1)
	}
	var c deploy.PrismdConfig
	dec := yaml.NewDecoder(bytes.NewReader(b))
	dec.KnownFields(true)
	if err := dec.Decode(&c); err != nil {
		fmt.Fprintln(os.Stderr, "fakeprismd: config:", err)
		os.Exit(1)
	}
	mode := os.Getenv("FAKEPRISMD_MODE")
	fmt.Fprintf(os.Stderr, "fakeprismd: %d ports, mode %q\n", len(c.Ports), mode)
	switch mode {
	case "die":
		fmt.Fprintln(os.Stderr, "fakeprismd: dying on purpose")
		os.Exit(3)
	case "ignoreterm":
		signal.Ignore(syscall.SIGTERM)
	case "mute":
		select {}
	}
	// A killed fakeprismd leaves its bridge; a restarted one replaces it.
	if old, err := netlink.LinkByName("fakebr"); err == nil {
		netlink.LinkDel(old)
	}
	br := &netlink.Bridge{LinkAttrs: netlink.LinkAttrs{Name: "fakebr"}}
	if err := netlink.LinkAdd(br); err != nil {
		fmt.Fprintln(os.Stderr, "fakeprismd: bridge:", err)
		os.Exit(1)
	}
	for _, p := range c.Ports {
		l, err := netlink.LinkByName(p.Name)
		if err == nil {
			err = netlink.LinkSetMasterByIndex(l, br.Index)
		}
		if err != nil {
			fmt.Fprintln(os.Stderr, "fakeprismd: port:", err)
			os.Exit(1)
		}
	}
	netlink.LinkSetUp(br)
	http.HandleFunc("/metrics", func(w http.ResponseWriter, r *http.Request) {
		for _, p := range c.Ports {
			l, err := netlink.LinkByName(p.Name)
			if err != nil || l.Attrs().Statistics == nil {
				continue
			}
			s := l.Attrs().Statistics
			fmt.Fprintf(w, "prismd_port_receive_frames_total{port=%q} %d\n", p.Name, s.RxPackets)
			fmt.Fprintf(w, "prismd_port_transmit_frames_total{port=%q} %d\n", p.Name, s.TxPackets)
		}
	})
	if err := http.ListenAndServe(c.MetricsListen, nil); err != nil {
		fmt.Fprintln(os.Stderr, "fakeprismd:", err)
		os.Exit(1)
	}
}
