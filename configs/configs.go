// Package configs carries the shipped configuration files inside the binary, so that
// `omniserve serve` runs from any directory: the default file is read from disk when present
// (operators edit it there) and from here when it is not.
package configs

import _ "embed"

//go:embed omni-cpu.yaml
var defaultCPU []byte

// DefaultName is the default config's path relative to the repository (and to a release tree).
const DefaultName = "configs/omni-cpu.yaml"

// Default returns a copy of the embedded default configuration (configs/omni-cpu.yaml).
func Default() []byte { return append([]byte(nil), defaultCPU...) }
