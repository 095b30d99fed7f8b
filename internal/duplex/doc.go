// Package duplex is the vocabulary of a duplex conversation, declared once where every floor
// may import it: the stream's options and turn detection (options.go), the outputs of a stream
// (output.go), and tools with their tool choice (tools.go). The session builds these values,
// the request client hands them to the stage pipeline as they are, and the pipeline's outputs
// come back up in the same types: no floor copies them field by field into a type of its own,
// and no floor re-exports them (architecture.md, "Target of the next step").
//
// It is a leaf: it imports only internal/audio (test/deps_test.go), so stage, requestclient,
// session and the dialect translators under internal/realtime all may import it.
//
// Turn detection is the example of "declared once". TurnDetection holds what a VAD and an
// endpointer read (type, threshold, padding, silence, eagerness). The session's turn detection
// embeds it and adds only the session's own settings (idle timeout, create / interrupt
// response). A client's turn_detection object (session.TurnDetectionPatch) is such a value plus
// the set of keys the client sent, so no struct outside the wire package repeats the words but
// this one and the VAD's own configuration (speech.VADConfig): test/shape_test.go counts them
// (figure e), and counts this package with the four it took the words out of (figures a and b).
//
// The package holds data and the rules that define the words (semantic_vad's eagerness table,
// what a tool choice forces), nothing that runs: no goroutines, no I/O, no engine.
package duplex
