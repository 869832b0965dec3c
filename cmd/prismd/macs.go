// This file owns GET /v1/macs on the control socket: the MAC table listing
// that 'prismctl show macs' prints.

package main

import (
	"encoding/json"
	"net"
	"net/http"
	"time"
)

// MACsResponse is the body of GET /v1/macs. prismctl mirrors it.
type MACsResponse struct {
	// AgingSeconds is the configured MAC aging time.
	AgingSeconds int `json:"aging_seconds"`
	// Learned and Local count the entries of each kind in Entries.
	Learned int `json:"learned"`
	Local   int `json:"local"`
	// Entries are sorted by port index (the node MAC last), then MAC.
	Entries []MACEntryJSON `json:"entries"`
}

// MACEntryJSON is one MAC table row.
type MACEntryJSON struct {
	MAC string `json:"mac"`
	// Port is the port name ("" for the node MAC); PortIndex its index
	// (-1 for the node MAC).
	Port      string `json:"port"`
	PortIndex int    `json:"port_index"`
	// AgeSeconds is the time since the station was last seen (0 for local MACs).
	AgeSeconds int `json:"age_seconds"`
	// Local marks the switch's own MACs: never learned, never aged.
	Local bool `json:"local"`
}

func (d *daemon) macs(w http.ResponseWriter, r *http.Request) {
	// d.cfg belongs to the signal loop (reload); ask the dataplane.
	out := MACsResponse{AgingSeconds: int(d.dp.MACAging() / time.Second), Entries: []MACEntryJSON{}}
	for _, e := range d.dp.MACTable() {
		out.Entries = append(out.Entries, MACEntryJSON{MAC: net.HardwareAddr(e.MAC[:]).String(), Port: e.PortName,
			PortIndex: e.Port, AgeSeconds: int(e.Age / time.Second), Local: e.Local})
		if e.Local {
			out.Local++
		} else {
			out.Learned++
		}
	}
	w.Header().Set("Content-Type", "application/json")
	_ = json.NewEncoder(w).Encode(out)
}
