// This file owns the rank's configuration and where it may come from: code,
// the PRISM_* environment or a JSON file. Flags are parsed by cmd/prismctl.

package host

import (
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"strconv"
	"strings"
	"time"

	"github.com/prismd/prismd/control/am"
)

// Config configures a Comm.
type Config struct {
	// Rank is this process's rank, 0..Size-1 (PRISM_RANK).
	Rank int `json:"rank"`
	// Size is the number of ranks (PRISM_SIZE).
	Size int `json:"size"`
	// Iface is the interface toward the leaf switch (PRISM_IFACE).
	Iface string `json:"iface"`
	// Job identifies the job; ranks of one job share it (PRISM_JOB).
	Job uint64 `json:"job"`
	// Group is the communicator within the job (PRISM_GROUP, default 0).
	Group uint16 `json:"group"`
	// Coordinator is the runtime channel's URL, e.g. http://10.0.0.1:7000
	// (PRISM_COORDINATOR).
	Coordinator string `json:"coordinator"`
	// Node is this host's name in the topology (PRISM_NODE; default: the
	// hostname).
	Node string `json:"node"`
	// NodeIface is the interface's name in the topology when it differs
	// from Iface (PRISM_NODE_IFACE; default: the host's only link).
	NodeIface string `json:"node_iface,omitempty"`
	// ConnectTimeout bounds how long NewComm and each request retry an
	// unreachable coordinator, and how long one waits for its answer
	// (PRISM_CONNECT_TIMEOUT, e.g. "5s"; default 10s): a coordinator
	// that drops packets or is stopped fails the request with
	// ErrUnreachable then. A call waiting at the AM's barrier is not
	// bounded by it (ranks may arrive late), but checks that the AM
	// still answers and fails with ErrUnreachable about 15 s after it
	// stopped. In a JSON file: a duration string ("5s") or integer
	// nanoseconds.
	ConnectTimeout time.Duration `json:"connect_timeout,omitempty"`
	// PersistentShapes is how many collective shapes the Comm keeps set up
	// as persistent collectives (PRISM_PERSISTENT_SHAPES; 0: 4, negative:
	// none). From the second call of an AllReduce shape (root, element
	// type and count, Options) on, the call runs as the next invocation of
	// that shape's persistent collective, with no AM round trip (Reduce
	// calls always go through the AM: only the root learns how one ended,
	// and the AM's barrier keeps the ranks' calls paired; ReduceInit makes
	// a persistent one explicitly); calls of
	// one shape then run one at a time, in call order. Each kept shape
	// holds a context on every switch of its tree until the Comm closes or
	// a newer shape takes its place. Every rank must set the same value.
	PersistentShapes int `json:"persistent_shapes,omitempty"`
	// Notify, when set, receives what the library has to say while a call
	// waits for others (the ranks an AM barrier still waits for, every
	// 15 s after the first 5: a job whose last rank never started says
	// so instead of hanging silently until the barrier timeout), that a
	// collective's RESULT stalled (after 5 s without one, then every 15
	// s, when its Timeout is at least 10 s: what it received and when it
	// fails), and that the AM no longer knows a finished collective (it
	// restarted). It may be called from any goroutine, and concurrently.
	Notify func(msg string) `json:"-"`
}

// ConfigFromEnv reads PRISM_RANK, PRISM_SIZE, PRISM_IFACE, PRISM_JOB,
// PRISM_GROUP, PRISM_COORDINATOR, PRISM_NODE, PRISM_NODE_IFACE,
// PRISM_CONNECT_TIMEOUT (a duration: "5s") and PRISM_PERSISTENT_SHAPES. If
// PRISM_CONFIG names a JSON file, it is read first and the environment
// overrides it.
func ConfigFromEnv() (Config, error) {
	var c Config
	if p := os.Getenv("PRISM_CONFIG"); p != "" {
		var err error
		if c, err = LoadConfig(p); err != nil {
			return c, err
		}
	}
	ints := []struct {
		name string
		dst  *int
	}{{"PRISM_RANK", &c.Rank}, {"PRISM_SIZE", &c.Size}, {"PRISM_PERSISTENT_SHAPES", &c.PersistentShapes}}
	for _, e := range ints {
		if v := os.Getenv(e.name); v != "" {
			n, err := strconv.Atoi(v)
			if err != nil {
				return c, fmt.Errorf("host: %s=%q is not an integer", e.name, v)
			}
			*e.dst = n
		}
	}
	if v := os.Getenv("PRISM_JOB"); v != "" {
		n, err := strconv.ParseUint(v, 0, 64)
		if err != nil {
			return c, fmt.Errorf("host: PRISM_JOB=%q is not an unsigned integer", v)
		}
		c.Job = n
	}
	if v := os.Getenv("PRISM_GROUP"); v != "" {
		n, err := strconv.ParseUint(v, 0, 16)
		if err != nil {
			return c, fmt.Errorf("host: PRISM_GROUP=%q is not a 16-bit unsigned integer", v)
		}
		c.Group = uint16(n)
	}
	if v := os.Getenv("PRISM_CONNECT_TIMEOUT"); v != "" {
		d, err := parseTimeout(v)
		if err != nil {
			return c, fmt.Errorf("host: PRISM_CONNECT_TIMEOUT=%q: %v (Config.ConnectTimeout)", v, err)
		}
		c.ConnectTimeout = d
	}
	for name, dst := range map[string]*string{"PRISM_IFACE": &c.Iface, "PRISM_COORDINATOR": &c.Coordinator,
		"PRISM_NODE": &c.Node, "PRISM_NODE_IFACE": &c.NodeIface} {
		if v := os.Getenv(name); v != "" {
			*dst = v
		}
	}
	return c, nil
}

// ConfigKeys are the keys of a config file (LoadConfig), for help texts
// and errors.
const ConfigKeys = "rank, size, iface, job, group, coordinator, node, node_iface, connect_timeout, persistent_shapes"

// LoadConfig reads a JSON file with the Config's keys (rank, size, iface,
// job, group, coordinator, node, node_iface, connect_timeout: a duration
// string such as "5s" or integer nanoseconds, persistent_shapes).
func LoadConfig(path string) (Config, error) {
	// The file's connect_timeout is read apart: time.Duration decodes
	// from integer nanoseconds only, and "5s" failed.
	var f struct {
		Config
		ConnectTimeout json.RawMessage `json:"connect_timeout,omitempty"`
	}
	b, err := os.ReadFile(path)
	if err != nil {
		return f.Config, fmt.Errorf("host: config: %w", err)
	}
	dec := json.NewDecoder(bytesReader(b))
	dec.DisallowUnknownFields()
	if err := dec.Decode(&f); err != nil {
		return Config{}, fmt.Errorf("host: config %s: %w (the keys are %s)", path, err, ConfigKeys)
	}
	c := f.Config
	if raw := strings.TrimSpace(string(f.ConnectTimeout)); raw != "" && raw != "null" {
		var d time.Duration
		var s string
		var n int64
		switch {
		case json.Unmarshal(f.ConnectTimeout, &s) == nil:
			d, err = parseTimeout(s)
		case json.Unmarshal(f.ConnectTimeout, &n) == nil:
			d = time.Duration(n)
			if d < 0 {
				err = errors.New("negative")
			}
		default:
			err = errors.New("not a duration")
		}
		if err != nil {
			return Config{}, fmt.Errorf("host: config %s: connect_timeout %s: %v: write a duration such as \"5s\" (Config.ConnectTimeout)", path, raw, err)
		}
		c.ConnectTimeout = d
	}
	return c, nil
}

// parseTimeout reads a non-negative duration ("5s", "1m30s", "0").
func parseTimeout(s string) (time.Duration, error) {
	d, err := time.ParseDuration(strings.TrimSpace(s))
	if err != nil {
		return 0, errors.New("not a duration (write e.g. 5s, 500ms or 1m)")
	}
	if d < 0 {
		return 0, errors.New("negative")
	}
	return d, nil
}

// Validate says what is missing or wrong, and how to fix it.
func (c *Config) Validate() error {
	var errs []error
	// Each hint names the Config field first (this is the library; the
	// same setting is a prismctl flag and a PRISM_* variable).
	if c.Size < 1 {
		errs = append(errs, fmt.Errorf("size %d: set Config.Size (prismctl --size, PRISM_SIZE) to the number of ranks", c.Size))
	}
	if c.Size > am.MaxRanks {
		errs = append(errs, fmt.Errorf("size %d: at most %d ranks per communicator (Config.Size, prismctl --size, PRISM_SIZE)", c.Size, am.MaxRanks))
	}
	if c.Rank < 0 || (c.Size >= 1 && c.Rank >= c.Size) {
		errs = append(errs, fmt.Errorf("rank %d is outside 0..%d: set Config.Rank (prismctl --rank, PRISM_RANK)", c.Rank, c.Size-1))
	}
	if c.Iface == "" {
		errs = append(errs, errors.New("no interface: set Config.Iface (prismctl --iface, PRISM_IFACE) to the interface toward the leaf switch"))
	}
	if c.Coordinator == "" {
		errs = append(errs, errors.New("no coordinator: set Config.Coordinator (prismctl --coordinator, PRISM_COORDINATOR), e.g. http://10.0.0.1:7000"))
	}
	if c.ConnectTimeout < 0 {
		errs = append(errs, fmt.Errorf("connect timeout %v is negative: set Config.ConnectTimeout (PRISM_CONNECT_TIMEOUT) to a positive duration, or 0 for 10s", c.ConnectTimeout))
	}
	if len(errs) > 0 {
		return fmt.Errorf("host: invalid config: %w", errors.Join(errs...))
	}
	return nil
}
