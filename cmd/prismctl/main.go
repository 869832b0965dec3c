// Command prismctl is the operator's and rank's tool for prismd: it builds labs,
// runs the Aggregation Manager, runs collectives and inspects running switches.
//
// Each subcommand lives in its own file and registers itself in init, so the
// pieces stay independent: lab.go, am.go, allreduce.go, show.go, mcast.go, ...
package main

import (
	"bytes"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"slices"
	"sort"
	"strings"
)

// command is one prismctl subcommand. run gets the arguments after the
// subcommand name and returns the process exit code.
type command struct {
	summary string
	run     func(args []string) int
}

var commands = map[string]command{}

// register adds a subcommand; called from init functions only.
func register(name, summary string, run func(args []string) int) {
	if _, dup := commands[name]; dup {
		panic("prismctl: subcommand registered twice: " + name)
	}
	commands[name] = command{summary: summary, run: run}
}

func usage(w io.Writer) {
	fmt.Fprintln(w, "usage: prismctl <command> [arguments]")
	fmt.Fprintln(w, "\ncommands:")
	names := make([]string, 0, len(commands))
	for n := range commands {
		names = append(names, n)
	}
	sort.Strings(names)
	for _, n := range names {
		fmt.Fprintf(w, "  %-10s %s\n", n, commands[n].summary)
	}
	fmt.Fprintln(w, "\nRun 'prismctl <command> -h' for the command's flags.")
}

// isHelp reports whether arg asks for help rather than naming something.
func isHelp(arg string) bool { return arg == "-h" || arg == "--help" || arg == "help" }

// parseFlags parses args into fs. Help that was asked for (-h, --help) goes
// to stdout with exit code 0, so it can be paged and is not an error; a bad
// flag goes to stderr with the usage, exit code 2. ok is false in both
// cases and rc is the exit code. fs's Usage must write to fs.Output().
func parseFlags(fs *flag.FlagSet, args []string) (rc int, ok bool) {
	var buf bytes.Buffer
	fs.SetOutput(&buf)
	err := fs.Parse(args)
	fs.SetOutput(nil) // later messages (fs.Usage on a bad argument) go to stderr
	switch {
	case err == nil:
		return 0, true
	case errors.Is(err, flag.ErrHelp):
		os.Stdout.Write(buf.Bytes())
		return 0, false
	default:
		os.Stderr.Write(buf.Bytes())
		return 2, false
	}
}

// subUsage is a subcommand's fs.Usage: its synopsis, then its flags.
func subUsage(fs *flag.FlagSet, synopsis string) func() {
	return func() {
		fmt.Fprintln(fs.Output(), "usage:", synopsis)
		fs.PrintDefaults()
	}
}

func main() {
	if len(os.Args) < 2 {
		usage(os.Stderr)
		os.Exit(2)
	}
	if isHelp(os.Args[1]) {
		// 'prismctl help lab' is 'prismctl lab -h'.
		if len(os.Args) == 2 {
			usage(os.Stdout)
			return
		}
		os.Args = []string{os.Args[0], os.Args[2], "-h"}
	}
	c, ok := commands[os.Args[1]]
	if !ok {
		fmt.Fprintf(os.Stderr, "prismctl: unknown command %q\n\n", os.Args[1])
		usage(os.Stderr)
		os.Exit(2)
	}
	os.Exit(c.run(os.Args[2:]))
}

// pickSub checks a command's subcommand (args[0]) against subs: with none,
// or an unknown one, the usage goes to stderr (exit 2), help to stdout
// (exit 0); ok means args[0] is one of subs.
func pickSub(cmd string, args, subs []string, usage func(io.Writer)) (rc int, ok bool) {
	switch {
	case len(args) == 0:
		usage(os.Stderr)
		return 2, false
	case isHelp(args[0]):
		usage(os.Stdout)
		return 0, false
	case !slices.Contains(subs, args[0]):
		fmt.Fprintf(os.Stderr, "prismctl %s: unknown subcommand %q; use %s or %s\n", cmd, args[0],
			strings.Join(subs[:len(subs)-1], ", "), subs[len(subs)-1])
		usage(os.Stderr)
		return 2, false
	}
	return 0, true
}
