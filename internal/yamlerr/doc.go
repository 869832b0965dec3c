// Package yamlerr rewrites the YAML library's wrong-type errors for the two
// files people write by hand, a lab topology (deploy) and a prismd
// configuration (cmd/prismd): "cannot unmarshal !!str `abc` into int"
// names neither the key nor the type in words, so it becomes
// `mtu: "abc" is not a whole number`.
package yamlerr
