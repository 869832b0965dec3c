// Package layering holds no code: its test checks that the packages import
// one another only in the directions docs/architecture.md draws, so that
// the picture stays true as the code grows.
package layering
