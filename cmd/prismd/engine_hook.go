package main

import (
	"log/slog"
	"net/http"
	"time"

	"github.com/prismd/prismd/control"
	"github.com/prismd/prismd/dataplane"
	"github.com/prismd/prismd/engine"
	"github.com/prismd/prismd/metrics"
)

// The collective engine: package control implements dataplane.Handler,
// handles CONTROL itself and hands DATA, RESULT and PROGRESS to the worker's
// engine (PRISM contexts) or bitmap shard (BITMAP contexts). One Node per
// daemon run; workers are created by the dataplane through its factory.
var node *control.Node

// frozenAfter is the gap between two engine ticks taken for this process
// not having run (engine.Config.FrozenAfter): a worker with an operation
// ticks every millisecond, 100 ms while every operation only waits.
const frozenAfter = time.Second

func init() {
	handlerFactory = func(c *Config) dataplane.HandlerFactory {
		node = control.NewNode(control.NodeConfig{AMMACs: c.AMSourceMACs(),
			Limits: control.Limits{MaxOps: uint16(c.MaxContexts)},
			// The dataplane calls Flush after every batch (dataplane.Flusher).
			Engine: engine.Config{CoalesceProgress: true, FrozenAfter: frozenAfter, PlainKulischPartials: c.PlainKulischPartials(),
				CompactKulischPartials: c.CompactKulischPartials(), MaxRingBytes: c.AccumulatorMemoryMB << 20}})
		return node.Factory()
	}
	registerMetrics = func(s *metrics.Server) error {
		if node == nil {
			return nil
		}
		if err := s.Register(node.EngineMetrics()); err != nil {
			return err
		}
		if err := s.Register(node.ControlMetrics()); err != nil {
			return err
		}
		if err := s.Register(node.ContextMetrics()); err != nil {
			return err
		}
		return s.Register(node.BitmapMetrics())
	}
	controlRoutes = func(mux *http.ServeMux) {
		if node != nil {
			mux.Handle("GET /v1/ops", control.IntrospectionHandler(node))
			// Job keys (protocol 8.6, 9.6): on this unix socket only.
			registerKeyRoutes(mux, node.Keys(), slog.Default())
		}
	}
	onPorts = func(minMTU int) {
		if node != nil {
			node.SetPortMTU(minMTU)
		}
	}
	onReload = func(c *Config) {
		if node != nil {
			node.SetAMMACs(c.AMSourceMACs())
		}
	}
}
