package am

import (
	"net"
	"strings"
	"testing"
	"time"
)

// New refuses a negative duration, naming the field, instead of running
// with it: a BarrierTimeout of -5s failed every invocation at once with
// "ranks [...] did not arrive within -5s". Zero still means the default.
func TestNewRefusesNegativeDurations(t *testing.T) {
	topo := loadTopo(t, "single")
	conn := func() Conn { return newHub(1).attach(net.HardwareAddr{0x02, 0xaa, 0, 0, 0, 1}) }
	for field, set := range map[string]func(*Config){
		"RTO":               func(c *Config) { c.RTO = -time.Second },
		"CtlTimeout":        func(c *Config) { c.CtlTimeout = -time.Second },
		"BarrierTimeout":    func(c *Config) { c.BarrierTimeout = -5 * time.Second },
		"CapsTTL":           func(c *Config) { c.CapsTTL = -time.Second },
		"Watchdog":          func(c *Config) { c.Watchdog = -time.Second },
		"PrepareTTL":        func(c *Config) { c.PrepareTTL = -time.Second },
		"PersistentRefresh": func(c *Config) { c.PersistentRefresh = -time.Second },
	} {
		cfg := Config{Topology: topo, Conn: conn()}
		set(&cfg)
		m, err := New(cfg)
		if err == nil {
			m.Close()
			t.Errorf("Config.%s negative: accepted", field)
			continue
		}
		if want := "Config." + field + " -"; !strings.Contains(err.Error(), want) || !strings.Contains(err.Error(), "0 for the default") {
			t.Errorf("Config.%s negative: %v; want it to name %q and say 0 is the default", field, err, want)
		}
	}
	cfg := Config{Topology: topo, Conn: conn(), DefaultTimeoutMS: 600001}
	if m, err := New(cfg); err == nil {
		m.Close()
		t.Error("DefaultTimeoutMS 600001 accepted: every request without a timeout would be refused")
	} else if !strings.Contains(err.Error(), "Config.DefaultTimeoutMS 600001: use 1..600000") {
		t.Errorf("DefaultTimeoutMS 600001: %v", err)
	}
	m, err := New(Config{Topology: topo, Conn: conn(), DefaultTimeoutMS: 600000})
	if err != nil {
		t.Fatalf("zero durations (the defaults), DefaultTimeoutMS 600000: %v", err)
	}
	defer m.Close()
	if m.cfg.BarrierTimeout != 2*time.Minute || m.cfg.RTO != 20*time.Millisecond {
		t.Errorf("defaults: barrier %v, RTO %v", m.cfg.BarrierTimeout, m.cfg.RTO)
	}
}
