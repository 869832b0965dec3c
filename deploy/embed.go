// This file owns the topologies shipped in deploy/lab/, embedded so that
// prismctl and tests work from any directory.

package deploy

import (
	"embed"
	"fmt"
	"io/fs"
	"sort"
	"strings"
)

//go:embed lab/*.yaml
var labFiles embed.FS

// Embedded returns a shipped topology file by name, with or without the
// .yaml suffix ("spine-leaf" or "spine-leaf.yaml").
func Embedded(name string) ([]byte, error) {
	name = strings.TrimSuffix(name, ".yaml")
	b, err := labFiles.ReadFile("lab/" + name + ".yaml")
	if err != nil {
		return nil, fmt.Errorf("deploy: no shipped topology %q (have: %s)", name, strings.Join(EmbeddedNames(), ", "))
	}
	return b, nil
}

// EmbeddedNames lists the shipped topologies, sorted, without .yaml.
func EmbeddedNames() []string {
	ents, _ := fs.ReadDir(labFiles, "lab")
	var r []string
	for _, e := range ents {
		r = append(r, strings.TrimSuffix(e.Name(), ".yaml"))
	}
	sort.Strings(r)
	return r
}

// Load parses a topology given as a file path or as the name of a shipped
// one: an existing file wins, so a local edit of a shipped file is used.
func Load(pathOrName string) (*Topology, error) {
	if t, err := ParseFile(pathOrName); err == nil || !isNotExist(err) {
		return t, err
	}
	b, err := Embedded(pathOrName)
	if err != nil {
		return nil, fmt.Errorf("deploy: %q is neither a file nor a shipped topology (have: %s)", pathOrName, strings.Join(EmbeddedNames(), ", "))
	}
	t, err := Parse(b)
	if te, ok := err.(*Error); ok {
		te.File = "embedded:" + pathOrName
	}
	return t, err
}
