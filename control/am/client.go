// This file owns the client side of the runtime channel, used by the rank
// library and prismctl. Requests are idempotent on the AM side, so a
// connection failure is retried with the same body.

package am

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"strings"
	"time"
)

// ErrUnreachable is wrapped when the coordinator cannot be reached.
var ErrUnreachable = errors.New("coordinator unreachable")

// Client talks to one coordinator.
type Client struct {
	// URL is the coordinator's base URL, e.g. http://10.0.0.1:7000.
	URL string
	// HTTP is the client used; nil means one without an overall timeout
	// (POST /v1/begin blocks at the barrier for as long as ranks take).
	HTTP *http.Client
	// RetryFor bounds how long connection failures are retried (default 10s:
	// ranks may start a moment before the coordinator).
	RetryFor time.Duration
}

// NewClient returns a client for base URL u ("host:port" gets http://).
func NewClient(u string) *Client {
	if !strings.Contains(u, "://") {
		u = "http://" + u
	}
	return &Client{URL: strings.TrimRight(u, "/")}
}

func (c *Client) do(ctx context.Context, method, path string, in, out any) error {
	hc := c.HTTP
	if hc == nil {
		hc = &http.Client{}
	}
	var body []byte
	if in != nil {
		var err error
		if body, err = json.Marshal(in); err != nil {
			return err
		}
	}
	retry := c.RetryFor
	if retry == 0 {
		retry = 10 * time.Second
	}
	deadline := time.Now().Add(retry)
	backoff := 50 * time.Millisecond
	for {
		req, err := http.NewRequestWithContext(ctx, method, c.URL+path, bytes.NewReader(body))
		if err != nil {
			return err
		}
		if in != nil {
			req.Header.Set("Content-Type", "application/json")
		}
		resp, err := hc.Do(req)
		if err != nil {
			if ctx.Err() != nil {
				return ctx.Err()
			}
			if time.Now().Add(backoff).After(deadline) {
				return fmt.Errorf("%w at %s: %v (is 'prismctl am' running and listening there?)", ErrUnreachable, c.URL, err)
			}
			select {
			case <-time.After(backoff):
			case <-ctx.Done():
				return ctx.Err()
			}
			backoff = min(2*backoff, time.Second)
			continue
		}
		b, err := io.ReadAll(resp.Body)
		resp.Body.Close()
		if err != nil {
			return fmt.Errorf("%w at %s: reading the answer: %v", ErrUnreachable, c.URL, err)
		}
		if resp.StatusCode/100 != 2 {
			var eb errorBody
			if json.Unmarshal(b, &eb) == nil && eb.Error != nil {
				return eb.Error
			}
			// Not the AM's JSON error: something else answers there (a
			// prismd's metrics port, another service).
			return fmt.Errorf("coordinator %s: %s %s: HTTP %d: %s (not an answer of 'prismctl am': is --coordinator the AM's --listen address?)",
				c.URL, method, path, resp.StatusCode, strings.TrimSpace(string(b)))
		}
		if out != nil {
			if err := json.Unmarshal(b, out); err != nil {
				return fmt.Errorf("coordinator %s: %s %s: bad answer: %v", c.URL, method, path, err)
			}
		}
		return nil
	}
}

// Begin is POST /v1/begin.
func (c *Client) Begin(ctx context.Context, r BeginRequest) (*Grant, error) {
	var g Grant
	if err := c.do(ctx, http.MethodPost, APIVersion+"/begin", r, &g); err != nil {
		return nil, err
	}
	return &g, nil
}

// Abandon is POST /v1/abandon: the rank gives up r's invocation before its
// grant, and the AM fails it for every rank.
func (c *Client) Abandon(ctx context.Context, r AbandonRequest) (*AbandonResponse, error) {
	var a AbandonResponse
	if err := c.do(ctx, http.MethodPost, APIVersion+"/abandon", r, &a); err != nil {
		return nil, err
	}
	return &a, nil
}

// Done is POST /v1/ops/{id}/done.
func (c *Client) Done(ctx context.Context, id string, d DoneRequest) (*OpStatus, error) {
	var s OpStatus
	if err := c.do(ctx, http.MethodPost, APIVersion+"/ops/"+id+"/done", d, &s); err != nil {
		return nil, err
	}
	return &s, nil
}

// Alive is POST /v1/ops/{id}/alive: the keepalive a rank of a persistent
// operation sends every Grant.KeepaliveMS until it reports done.
func (c *Client) Alive(ctx context.Context, id string, rank int) (*OpStatus, error) {
	var s OpStatus
	if err := c.do(ctx, http.MethodPost, APIVersion+"/ops/"+id+"/alive", AliveRequest{Rank: rank}, &s); err != nil {
		return nil, err
	}
	return &s, nil
}

// Op is GET /v1/ops/{id}.
func (c *Client) Op(ctx context.Context, id string) (*OpStatus, error) {
	var s OpStatus
	if err := c.do(ctx, http.MethodGet, APIVersion+"/ops/"+id, nil, &s); err != nil {
		return nil, err
	}
	return &s, nil
}

// Ops is GET /v1/ops.
func (c *Client) Ops(ctx context.Context) (*OpList, error) {
	var l OpList
	if err := c.do(ctx, http.MethodGet, APIVersion+"/ops", nil, &l); err != nil {
		return nil, err
	}
	return &l, nil
}
