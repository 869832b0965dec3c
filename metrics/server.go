package metrics

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
	"github.com/prometheus/client_golang/prometheus/promhttp"
)

// Server owns prismd's prometheus.Registry and, once Serve is called, the
// HTTP listener serving /metrics.
type Server struct {
	reg *prometheus.Registry
	srv *http.Server
	ln  net.Listener
}

// New builds the registry: the dataplane collector for src (nil to omit),
// prismd_build_info, and the Go and process collectors.
func New(src Source, b BuildInfo) (*Server, error) {
	s := &Server{reg: prometheus.NewRegistry()}
	cs := []prometheus.Collector{
		NewBuildInfo(b),
		collectors.NewGoCollector(),
		collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}),
	}
	if src != nil {
		cs = append(cs, NewCollector(src))
	}
	for _, c := range cs {
		if err := s.reg.Register(c); err != nil {
			return nil, fmt.Errorf("metrics: register: %w", err)
		}
	}
	return s, nil
}

// Register adds a collector, e.g. the engine's; the same rules as
// prometheus.Registry.Register apply (unique, consistent descriptors).
func (s *Server) Register(c prometheus.Collector) error { return s.reg.Register(c) }

// Registry returns the registry, for tests (testutil.GatherAndCompare).
func (s *Server) Registry() *prometheus.Registry { return s.reg }

// Handler is the /metrics handler.
func (s *Server) Handler() http.Handler {
	return promhttp.HandlerFor(s.reg, promhttp.HandlerOpts{ErrorLog: slogAdapter{}, Registry: s.reg})
}

// Serve listens on addr ("host:port") and serves /metrics in the background.
// It returns once the listener is bound, so a bad address fails at once.
func (s *Server) Serve(addr string) error {
	ln, err := net.Listen("tcp", addr)
	if err != nil {
		return fmt.Errorf("metrics: listen on %q: %w (set metrics_listen to a free host:port, or empty to disable)", addr, err)
	}
	mux := http.NewServeMux()
	mux.Handle("/metrics", s.Handler())
	s.ln = ln
	s.srv = &http.Server{Handler: mux, ReadHeaderTimeout: 10 * time.Second}
	go func() {
		if err := s.srv.Serve(ln); err != nil && !errors.Is(err, http.ErrServerClosed) {
			slog.Error("metrics server stopped", "err", err)
		}
	}()
	return nil
}

// Addr returns the bound address (after Serve), or nil.
func (s *Server) Addr() net.Addr {
	if s.ln == nil {
		return nil
	}
	return s.ln.Addr()
}

// Close stops the HTTP server.
func (s *Server) Close() error {
	if s.srv == nil {
		return nil
	}
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
	defer cancel()
	return s.srv.Shutdown(ctx)
}

type slogAdapter struct{}

func (slogAdapter) Println(v ...any) { slog.Error("metrics", "err", fmt.Sprint(v...)) }
