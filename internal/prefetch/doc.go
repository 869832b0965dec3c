// Package prefetch asks the CPU to start loading memory the caller is about
// to read, so that a frame's cache misses overlap the work on the frame
// before it instead of stalling the first code that reads it.
package prefetch
