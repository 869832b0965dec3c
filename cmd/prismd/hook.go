package main

import (
	"net/http"

	"github.com/prismd/prismd/dataplane"
	"github.com/prismd/prismd/metrics"
)

// handlerFactory wires the collective engine into the daemon. nil keeps the
// dataplane's built-in handler, which counts every local PRISM frame as drop
// reason "unsupported". The lead sets it (e.g. in an init in engine_hook.go)
// to something like:
//
//	handlerFactory = func(c *Config) dataplane.HandlerFactory { return engine.NewFactory(engine.Options{...}) }
//
// It receives the validated configuration (am_sources via AMSourceMACs, etc.).
var handlerFactory func(c *Config) dataplane.HandlerFactory

// registerMetrics lets the engine add its collectors to the /metrics
// registry with s.Register; nil adds nothing.
var registerMetrics func(s *metrics.Server) error

// controlRoutes lets the engine add its routes to the control socket's mux
// (GET /v1/ops; the job keys of keys.go, which must never be served on the
// metrics TCP listener); nil adds nothing.
var controlRoutes func(mux *http.ServeMux)

// onReload is told about every accepted reload (e.g. new am_sources); nil
// does nothing.
var onReload func(c *Config)

// onPorts is told the smallest MTU of the port set after every change, so
// the collective engine advertises no larger operation MTU (nil: no engine).
var onPorts func(minMTU int)
