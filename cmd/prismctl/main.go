// Command prismctl is the operator's and rank's tool for prismd: it builds labs,
// runs the Aggregation Manager, runs collectives and inspects running switches.
//
// Each subcommand lives in its own file and registers itself in init, so the
// pieces stay independent: lab.go, am.go, allreduce.go, show.go, mcast.go, ...
package main

import (
	"fmt"
	"os"
	"sort"
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

func usage() {
	fmt.Fprintln(os.Stderr, "usage: prismctl <command> [arguments]")
	fmt.Fprintln(os.Stderr, "\ncommands:")
	names := make([]string, 0, len(commands))
	for n := range commands {
		names = append(names, n)
	}
	sort.Strings(names)
	for _, n := range names {
		fmt.Fprintf(os.Stderr, "  %-10s %s\n", n, commands[n].summary)
	}
	fmt.Fprintln(os.Stderr, "\nRun 'prismctl <command> -h' for the command's flags.")
}

func main() {
	if len(os.Args) < 2 || os.Args[1] == "-h" || os.Args[1] == "--help" || os.Args[1] == "help" {
		usage()
		if len(os.Args) < 2 {
			os.Exit(2)
		}
		return
	}
	c, ok := commands[os.Args[1]]
	if !ok {
		fmt.Fprintf(os.Stderr, "prismctl: unknown command %q\n\n", os.Args[1])
		usage()
		os.Exit(2)
	}
	os.Exit(c.run(os.Args[2:]))
}
