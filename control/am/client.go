// This file owns the client side of the runtime channel, used by the rank
// library and prismctl. Requests are idempotent on the AM side, so a
// connection failure is retried with the same body.

package am

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/url"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"
)

// ErrUnreachable is wrapped when the coordinator cannot be reached.
var ErrUnreachable = errors.New("coordinator unreachable")

// Client talks to one coordinator.
type Client struct {
	// URL is the coordinator's base URL, e.g. http://10.0.0.1:7000.
	URL string
	// HTTP is the client used; nil means one without an overall timeout
	// (POST /v1/begin blocks at the barrier for as long as ranks take)
	// whose connection attempts are bounded by RetryFor.
	HTTP *http.Client
	// RetryFor bounds how long connection failures are retried (default 10s:
	// ranks may start a moment before the coordinator), and how long a
	// request but POST /v1/begin waits for its answer in all: a
	// coordinator that drops packets or is stopped (SIGSTOP) accepts no
	// connection or answers nothing, and without a bound the first took
	// the transport's 30 s per attempt and the second hung for good.
	RetryFor time.Duration

	once sync.Once
	hc   *http.Client
}

// minAttempt is the least time an attempt is given to connect and be
// answered, also when less of RetryFor is left.
const minAttempt = time.Second

// httpClient is c.HTTP, or one whose dials give up after RetryFor: the
// default transport's 30 s dial timeout outlasted any RetryFor.
func (c *Client) httpClient(retry time.Duration) *http.Client {
	if c.HTTP != nil {
		return c.HTTP
	}
	c.once.Do(func() {
		tr := http.DefaultTransport.(*http.Transport).Clone()
		tr.DialContext = (&net.Dialer{Timeout: max(retry, minAttempt), KeepAlive: 30 * time.Second}).DialContext
		c.hc = &http.Client{Transport: tr}
	})
	return c.hc
}

// CloseIdleConnections closes the connections to the AM that no request
// uses now (those of a Client's own transport; c.HTTP's are its owner's).
// Left to the transport's 90 s idle timeout, each closed communicator kept
// its connections and their goroutines alive that long.
func (c *Client) CloseIdleConnections() {
	if c.HTTP == nil {
		c.httpClient(0).CloseIdleConnections() // through once: no race with a first request
	}
}

// permanent says whether err is one no retry can mend, and how to mend it.
func permanent(err error) (hint string, ok bool) {
	s := err.Error()
	switch {
	case strings.Contains(s, "server gave HTTP response to HTTPS client"):
		return "the AM speaks plain HTTP: write the coordinator as http://", true
	case strings.Contains(s, "unsupported protocol scheme"):
		return "write the coordinator as http://HOST:PORT (the AM's --listen address)", true
	}
	var ne *net.DNSError
	if errors.As(err, &ne) && ne.IsNotFound {
		return "no such host: check the coordinator's host name, or give its IP address", true
	}
	return "", false
}

// NewClient returns a client for base URL u ("host:port" gets http://).
func NewClient(u string) *Client {
	if !strings.Contains(u, "://") {
		u = "http://" + u
	}
	return &Client{URL: strings.TrimRight(u, "/")}
}

func (c *Client) do(ctx context.Context, method, path string, in, out any) error {
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
	hc := c.httpClient(retry)
	// POST /v1/begin waits at the barrier for as long as the ranks take
	// to arrive, and a done report with wait for the operation's end
	// (the nodes' COMPLETE, a failure's diagnosis): only their
	// connection is bounded (the rank library also watches the AM while
	// it waits at the barrier). Any other request is answered at once by
	// a live AM.
	longPoll := path == APIVersion+"/begin"
	if d, ok := in.(DoneRequest); ok && d.Wait {
		longPoll = true
	}
	start := time.Now()
	deadline := start.Add(retry)
	backoff := 50 * time.Millisecond
	refused := false // some attempt was refused: nothing listens there
	for {
		actx, acancel := ctx, context.CancelFunc(func() {})
		if !longPoll {
			actx, acancel = context.WithTimeout(ctx, max(time.Until(deadline), minAttempt))
		}
		req, err := http.NewRequestWithContext(actx, method, c.URL+path, bytes.NewReader(body))
		if err != nil {
			acancel()
			return err
		}
		if in != nil {
			req.Header.Set("Content-Type", "application/json")
		}
		attempt := time.Now()
		resp, err := hc.Do(req)
		if err != nil {
			acancel()
			if ctx.Err() != nil {
				return ctx.Err()
			}
			if longPoll && time.Since(attempt) >= retry/2 {
				// The AM held the request (a barrier waiting for the
				// other ranks) before the connection broke: it was
				// there, so the retry period starts again. Counted from
				// the first attempt, a begin whose connection a lossy
				// network broke after 10 s at the barrier gave up, and
				// the other ranks were told this one had left.
				deadline = time.Now().Add(retry)
			}
			if hint, ok := permanent(err); ok {
				return fmt.Errorf("%w at %s: %v (%s)", ErrUnreachable, c.URL, err, hint)
			}
			refused = refused || errors.Is(err, syscall.ECONNREFUSED)
			if time.Now().Add(backoff).After(deadline) {
				if refused {
					return fmt.Errorf("%w at %s: connection refused for %v: nothing listens there (is 'prismctl am' running, with this address as its --listen?)",
						ErrUnreachable, c.URL, time.Since(start).Round(time.Millisecond))
				}
				if actx.Err() != nil {
					return fmt.Errorf("%w at %s: no answer to %s %s in %v (is 'prismctl am' running there, and not stopped or hung?)",
						ErrUnreachable, c.URL, method, path, time.Since(start).Round(time.Millisecond))
				}
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
		acancel()
		if err != nil {
			if ctx.Err() != nil {
				return ctx.Err()
			}
			return fmt.Errorf("%w at %s: reading the answer: %v", ErrUnreachable, c.URL, err)
		}
		if resp.StatusCode/100 != 2 {
			var eb errorBody
			if json.Unmarshal(b, &eb) == nil && eb.Error != nil {
				return eb.Error
			}
			// Not the AM's JSON error: something else answers there (a
			// prismd's metrics port, another service).
			return fmt.Errorf("coordinator %s: %s %s: HTTP %d: %s (not an answer of 'prismctl am': is --coordinator the AM's --listen address, and is this command run where that address is the AM's? In a lab, run it in a host's namespace: ip netns exec pl-LAB-h1 prismctl ...)",
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
func (c *Client) Alive(ctx context.Context, id string, r AliveRequest) (*OpStatus, error) {
	var s OpStatus
	if err := c.do(ctx, http.MethodPost, APIVersion+"/ops/"+id+"/alive", r, &s); err != nil {
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

// OpsWhere is GET /v1/ops with f's selection as its query (9.3).
func (c *Client) OpsWhere(ctx context.Context, f OpsFilter) (*OpList, error) {
	q := url.Values{}
	if f.Job != nil {
		q.Set("job", strconv.FormatUint(*f.Job, 10))
	}
	if f.Group != nil {
		q.Set("group", strconv.FormatUint(uint64(*f.Group), 10))
	}
	if f.Seq != nil {
		q.Set("seq", strconv.FormatUint(*f.Seq, 10))
	}
	if f.NoOps {
		q.Set("ops", "0")
	}
	path := APIVersion + "/ops"
	if len(q) > 0 {
		path += "?" + q.Encode()
	}
	var l OpList
	if err := c.do(ctx, http.MethodGet, path, nil, &l); err != nil {
		return nil, err
	}
	return &l, nil
}

// OpsLive is GET /v1/ops?live=1: Ops after the AM asked every node of
// every active operation for its state (Manager.Refresh).
func (c *Client) OpsLive(ctx context.Context) (*OpList, error) {
	var l OpList
	if err := c.do(ctx, http.MethodGet, APIVersion+"/ops?live=1", nil, &l); err != nil {
		return nil, err
	}
	return &l, nil
}

// ErrNoPresence is returned by Presence when the coordinator answers 404
// to it (an AM without presence, or not an AM): the caller stops asking.
var ErrNoPresence = errors.New("the coordinator does not keep rank presence (POST " + APIVersion + "/presence)")

// presenceSilence is how long Presence waits for the AM's next beat
// before it takes the stream for dead (the AM's host went away without
// closing it) and returns.
var presenceSilence = 5 * time.Second

// Presence is POST /v1/presence: it holds the stream open until ctx ends
// (nil), the AM ends it (nil), or it fails (an error; ErrNoPresence if
// the coordinator keeps none). The caller asks again while its
// communicator lives. opened, if not nil, is called once the AM took the
// stream; told, if not nil, with the word ("alive", "failed") and the
// Operation ID of each request line (PresenceAlive, PresenceFailed).
func (c *Client) Presence(ctx context.Context, r PresenceRequest, opened func(), told func(word, id string)) error {
	body, err := json.Marshal(r)
	if err != nil {
		return err
	}
	retry := c.RetryFor
	if retry == 0 {
		retry = 10 * time.Second
	}
	sctx, cancel := context.WithCancelCause(ctx)
	defer cancel(nil)
	req, err := http.NewRequestWithContext(sctx, http.MethodPost, c.URL+APIVersion+"/presence", bytes.NewReader(body))
	if err != nil {
		return err
	}
	req.Header.Set("Content-Type", "application/json")
	silent := errors.New("no beat from the AM")
	watch := time.AfterFunc(presenceSilence, func() { cancel(silent) })
	defer watch.Stop()
	resp, err := c.httpClient(retry).Do(req)
	if err != nil {
		if ctx.Err() != nil {
			return nil
		}
		return fmt.Errorf("%w at %s: presence: %v", ErrUnreachable, c.URL, causeOr(sctx, err))
	}
	defer resp.Body.Close()
	if resp.Header.Get(PresenceHeader) != "1" {
		var eb errorBody
		b, _ := io.ReadAll(io.LimitReader(resp.Body, 1<<16))
		switch {
		case resp.StatusCode == http.StatusBadRequest && json.Unmarshal(b, &eb) == nil && eb.Error != nil:
			return eb.Error
		case resp.StatusCode == http.StatusNotFound:
			return ErrNoPresence
		}
		// A proxy or load balancer in front of a restarting AM (503), or
		// anything else that may pass: asked again later.
		return fmt.Errorf("%w at %s: presence: HTTP %d without the %s header", ErrUnreachable, c.URL, resp.StatusCode, PresenceHeader)
	}
	if opened != nil {
		opened()
	}
	// Protocol 9.9: a line is at most 255 bytes; one longer is not a
	// request (long: the reader is inside such a line).
	br := bufio.NewReaderSize(resp.Body, 255)
	long := false
	for {
		watch.Reset(presenceSilence)
		line, err := br.ReadSlice('\n')
		switch {
		case errors.Is(err, bufio.ErrBufferFull):
			long = true
			continue
		case err != nil:
			if ctx.Err() != nil || errors.Is(err, io.EOF) {
				return nil
			}
			return fmt.Errorf("%w at %s: presence stream: %v", ErrUnreachable, c.URL, causeOr(sctx, err))
		}
		if !long && told != nil {
			for _, word := range []string{PresenceAlive, PresenceFailed} {
				if id, ok := bytes.CutPrefix(line[:len(line)-1], []byte(word)); ok && len(id) > 0 {
					told(strings.TrimSpace(word), string(id))
				}
			}
		}
		long = false
	}
}

// causeOr is why ctx ended, or err if it did not.
func causeOr(ctx context.Context, err error) error {
	if c := context.Cause(ctx); c != nil {
		return c
	}
	return err
}

// PresenceLeave is POST /v1/presence/leave: the communicator closes, and
// the AM fails at once whatever waits for this rank.
func (c *Client) PresenceLeave(ctx context.Context, r PresenceRequest) error {
	return c.do(ctx, http.MethodPost, APIVersion+"/presence/leave", r, nil)
}
