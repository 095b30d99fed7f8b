// Package duplex is the vocabulary of a duplex conversation, declared once where every floor
// may import it: the stream's options and turn detection (options.go), the outputs of a stream
// (output.go), and tools with their tool choice (tools.go). The session builds these values,
// the request client hands them to the stage pipeline as they are, and the pipeline's outputs
// come back up in the same types: no floor copies them field by field into a type of its own,
// and no floor re-exports them (architecture.md, "Target of the next step").
//
// The package holds data and the rules that define the words (semantic_vad's eagerness table,
// what a tool choice forces), nothing that runs: no goroutines, no I/O, no engine.
package duplex
