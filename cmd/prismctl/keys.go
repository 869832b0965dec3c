// This file owns 'prismctl keys': per-job authentication keys (protocol 8.6)
// for the operator. 'gen' writes a new random key file (mode 0600); 'set',
// 'rm' and 'list' install, remove and list a running prismd's keys over its
// control_listen unix socket (PUT/DELETE /v1/keys/{job}, GET /v1/keys,
// protocol 9.6), found as 'prismctl show' finds it. Hosts use the same key
// file with --auth-key-file on the bitmap commands (mcast, moe).
//
// A key is never printed: output names keys by fingerprint only.

package main

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"strconv"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/prismd/prismd/deploy"
	"github.com/prismd/prismd/internal/authkey"
)

func init() {
	register("keys", "per-job authentication keys: generate a key file, install/remove/list keys on a prismd (gen|set|rm|list)",
		func(args []string) int { return runKeys(args, os.Stdout, os.Stderr) })
}

const keysUsage = `usage: prismctl keys gen FILE
       prismctl keys set --job J --key-file FILE [--socket PATH | --netns NS [--state-dir DIR]]
       prismctl keys rm --job J [--socket PATH | --netns NS [--state-dir DIR]]
       prismctl keys list [--socket PATH | --netns NS [--state-dir DIR]] [--json]`

func runKeys(args []string, stdout, stderr io.Writer) int {
	if len(args) == 0 {
		fmt.Fprintln(stderr, keysUsage)
		return 2
	}
	switch args[0] {
	case "gen":
		return keysGen(args[1:], stdout, stderr)
	case "set", "rm", "list":
		return keysRemote(args[0], args[1:], stdout, stderr)
	case "-h", "--help", "help":
		fmt.Fprintln(stderr, keysUsage)
		return 0
	}
	fmt.Fprintf(stderr, "prismctl keys: unknown subcommand %q\n%s\n", args[0], keysUsage)
	return 2
}

func keysFlagErr(stderr io.Writer, sub string, err error) int {
	fmt.Fprintf(stderr, "prismctl keys %s: bad flags:\n  %v\nrun 'prismctl keys %s -h' for all flags\n", sub, err, sub)
	return 2
}

func keysGen(args []string, stdout, stderr io.Writer) int {
	fs := flag.NewFlagSet("keys gen", flag.ContinueOnError)
	fs.SetOutput(stderr)
	fs.Usage = func() {
		fmt.Fprintln(stderr, "usage: prismctl keys gen FILE\n\nWrites a new random 32-byte job key, as hex, to FILE (created with mode 0600; an existing FILE is never overwritten).")
	}
	if err := fs.Parse(args); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			return 0
		}
		return 2
	}
	switch {
	case fs.NArg() == 0:
		return keysFlagErr(stderr, "gen", errors.New("FILE is missing: where to write the new key, e.g. 'prismctl keys gen job7.key'"))
	case fs.NArg() > 1:
		return keysFlagErr(stderr, "gen", fmt.Errorf("one FILE only, got %d arguments", fs.NArg()))
	}
	path := fs.Arg(0)
	key, err := authkey.Generate()
	if err != nil {
		fmt.Fprintf(stderr, "prismctl keys gen: %v\n", err)
		return 1
	}
	defer clear(key)
	if err := authkey.WriteFile(path, key); err != nil {
		fmt.Fprintf(stderr, "prismctl keys gen: %v\n", err)
		return 1
	}
	fmt.Fprintf(stdout, "wrote a %d-byte key to %s (mode 0600), fingerprint %s\n", len(key), path, authkey.Fingerprint(key))
	return 0
}

// keyInfo mirrors prismd's KeyInfo (cmd/prismd/keys.go).
type keyInfo struct {
	Job         uint64 `json:"job"`
	Fingerprint string `json:"fingerprint"`
	Replaced    bool   `json:"replaced,omitempty"`
}

func keysRemote(sub string, args []string, stdout, stderr io.Writer) int {
	fs := flag.NewFlagSet("keys "+sub, flag.ContinueOnError)
	fs.SetOutput(stderr)
	sock := fs.String("socket", "", "control socket of the prismd (default "+defaultSocket+")")
	ns := fs.String("netns", "", "network namespace of a lab node (pl-<lab>-<node>): use that node's socket in the lab's state directory (--state-dir)")
	stateDir := fs.String("state-dir", deploy.DefaultStateDir, "with --netns: the --state-dir the lab was brought up with")
	var job, keyFile *string
	var asJSON *bool
	if sub != "list" {
		job = fs.String("job", "", "Job ID (unsigned decimal) whose key this is")
	}
	if sub == "set" {
		keyFile = fs.String("key-file", os.Getenv("PRISM_AUTH_KEY_FILE"), "the job key file (hex; mode 0600 or 0400; 'prismctl keys gen' writes one) (PRISM_AUTH_KEY_FILE)")
	}
	if sub == "list" {
		asJSON = fs.Bool("json", false, "print the raw JSON")
	}
	if err := fs.Parse(args); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			return 0
		}
		return 2
	}
	if fs.NArg() > 0 {
		return keysFlagErr(stderr, sub, fmt.Errorf("unexpected argument %q: all options are flags", fs.Arg(0)))
	}
	var jobID uint64
	if job != nil {
		if *job == "" {
			return keysFlagErr(stderr, sub, errors.New("--job is required: the Job ID of the job the key belongs to, e.g. --job 7"))
		}
		j, err := strconv.ParseUint(*job, 10, 64)
		if err != nil {
			return keysFlagErr(stderr, sub, fmt.Errorf("--job %q is not a Job ID: want an unsigned decimal, e.g. --job 7", *job))
		}
		jobID = j
	}
	if *sock != "" && *ns != "" {
		return keysFlagErr(stderr, sub, errors.New("use --socket or --netns, not both"))
	}
	var body []byte
	if sub == "set" {
		if *keyFile == "" {
			return keysFlagErr(stderr, sub, errors.New("--key-file is required: the job's key file ('prismctl keys gen FILE' makes one)"))
		}
		key, err := authkey.ReadFile(*keyFile)
		if err != nil {
			return keysFlagErr(stderr, sub, fmt.Errorf("--key-file: %v", err))
		}
		body, _ = json.Marshal(map[string]string{"key": authkey.Format(key)})
		clear(key)
		defer clear(body)
	}
	path := *sock
	if *ns != "" {
		p, err := socketForNetNSIn(*stateDir, *ns)
		if err != nil {
			fmt.Fprintf(stderr, "prismctl keys %s: %v\n", sub, err)
			return 1
		}
		path = p
	}
	if path == "" {
		path = defaultSocket
	}
	method, url := map[string]string{"set": "PUT", "rm": "DELETE", "list": "GET"}[sub], "/v1/keys"
	if sub != "list" {
		url += "/" + strconv.FormatUint(jobID, 10)
	}
	code, resp, err := doUnix(path, method, url, body)
	if err != nil {
		fmt.Fprintf(stderr, "prismctl keys %s: %v\n", sub, err)
		return 1
	}
	if code != http.StatusOK {
		fmt.Fprintf(stderr, "prismctl keys %s: %s\n", sub, refusal(path, url, code, resp))
		return 1
	}
	switch sub {
	case "set", "rm":
		var ki keyInfo
		if err := json.Unmarshal(resp, &ki); err != nil {
			fmt.Fprintf(stderr, "prismctl keys %s: answer from %s: %v\n", sub, path, err)
			return 1
		}
		if sub == "rm" {
			fmt.Fprintf(stdout, "job %d: key %s removed from %s\n", ki.Job, ki.Fingerprint, path)
			return 0
		}
		note := ""
		if ki.Replaced {
			note = " (it replaced the job's earlier key)"
		}
		fmt.Fprintf(stdout, "job %d: key %s installed on %s%s\n", ki.Job, ki.Fingerprint, path, note)
		// Said every time: a user who keys a job and runs 'prismctl
		// allreduce' on it got no tag and no word (protocol 8.6: only a
		// bitmap job's frames carry the extension that holds it).
		fmt.Fprintf(stdout, "  it authenticates the job's bitmap operations (mcast, moe, bitmap collectives); "+
			"'prismctl allreduce' and 'bench' frames carry no tag and rely on the switches' binding checks\n")
		return 0
	}
	if *asJSON {
		stdout.Write(resp)
		return 0
	}
	var kl struct {
		Keys []keyInfo `json:"keys"`
	}
	if err := json.Unmarshal(resp, &kl); err != nil {
		fmt.Fprintf(stderr, "prismctl keys list: answer from %s: %v\n", path, err)
		return 1
	}
	if len(kl.Keys) == 0 {
		fmt.Fprintf(stdout, "no job keys installed on %s\n", path)
		return 0
	}
	tw := tabwriter.NewWriter(stdout, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "JOB\tFINGERPRINT")
	for _, k := range kl.Keys {
		fmt.Fprintf(tw, "%d\t%s\n", k.Job, k.Fingerprint)
	}
	tw.Flush()
	return 0
}

// refusal explains a non-200 answer: prismd's error message when it sent
// one ({"error": {"code", "message"}}), else what the status means.
func refusal(sock, url string, code int, body []byte) string {
	var e struct {
		Error struct {
			Code    string `json:"code"`
			Message string `json:"message"`
		} `json:"error"`
	}
	if json.Unmarshal(body, &e) == nil && e.Error.Message != "" {
		return fmt.Sprintf("%s refused: %s", sock, e.Error.Message)
	}
	if code == http.StatusNotFound || code == http.StatusMethodNotAllowed {
		return fmt.Sprintf("%s does not serve %s (a prismd older than this prismctl, or built without the engine?)", sock, url)
	}
	return fmt.Sprintf("%s %s: HTTP %d: %s", sock, url, code, strings.TrimSpace(string(body)))
}

// doUnix sends one HTTP request over the unix socket sock.
func doUnix(sock, method, path string, body []byte) (int, []byte, error) {
	c := &http.Client{
		Timeout: 5 * time.Second,
		Transport: &http.Transport{DialContext: func(ctx context.Context, _, _ string) (net.Conn, error) {
			var d net.Dialer
			return d.DialContext(ctx, "unix", sock)
		}},
	}
	req, err := http.NewRequest(method, "http://prismd"+path, bytes.NewReader(body))
	if err != nil {
		return 0, nil, err
	}
	if body != nil {
		req.Header.Set("Content-Type", "application/json")
	}
	resp, err := c.Do(req)
	if err != nil {
		return 0, nil, fmt.Errorf("%s: %w (is prismd running with control_listen: %s? installing keys needs write access to the socket, usually root)", sock, err, sock)
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(io.LimitReader(resp.Body, 1<<20))
	return resp.StatusCode, b, err
}
