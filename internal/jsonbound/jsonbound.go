// Package jsonbound checks a JSON document's size and nesting depth before anything recursive
// reads it: llama.cpp's schema_to_grammar (cgo, whose C stack a deeply nested schema overflows,
// killing the process), the stage's tool-grammar walk, encoding/json's own recursive decoder.
// The check is one linear pass over the bytes with no recursion and no allocation, so a hostile
// document costs its length in time, whatever its shape.
package jsonbound

import "fmt"

// Limits bound one document. A zero field is no bound.
type Limits struct {
	// MaxBytes bounds the document's length in bytes.
	MaxBytes int
	// MaxDepth bounds the nesting of arrays and objects: `{}` and `[1]` are depth 1,
	// `{"a": [1]}` depth 2, a scalar depth 0.
	MaxDepth int
}

// Schema is the bound on a JSON schema a client sends (chat's response_format and tool
// parameters, MCP servers' input schemas). OpenAI's structured outputs allow 10 levels of schema
// nesting, each two or three JSON levels deep (properties → name → schema, anyOf → [ → schema),
// and $defs add one more: 64 leaves room for every schema OpenAI accepts, while
// schema_to_grammar at this depth takes microseconds. 256 KiB holds OpenAI's limits (5,000
// properties, 120,000 characters of names and enum values) with room for descriptions.
var Schema = Limits{MaxBytes: 256 << 10, MaxDepth: SchemaDepth}

// SchemaDepth is Schema's MaxDepth, for bounds of documents that carry schemas.
const SchemaDepth = 64

// Error is a document over a bound.
type Error struct {
	// Bound is "bytes" or "depth".
	Bound string
	// Max is the bound; Got the document's length, or the depth at which the bound was crossed.
	Max, Got int
}

func (e *Error) Error() string {
	if e.Bound == "bytes" {
		return fmt.Sprintf("%d bytes is more than the %d allowed", e.Got, e.Max)
	}
	return fmt.Sprintf("nested deeper than %d levels of arrays and objects", e.Max)
}

// Check returns an *Error when doc is longer than lim.MaxBytes or nests arrays and objects
// deeper than lim.MaxDepth, nil otherwise. It does not check that doc is valid JSON (a later
// decode does); brackets inside strings are not counted.
func Check(doc []byte, lim Limits) error {
	if lim.MaxBytes > 0 && len(doc) > lim.MaxBytes {
		return &Error{Bound: "bytes", Max: lim.MaxBytes, Got: len(doc)}
	}
	if lim.MaxDepth <= 0 {
		return nil
	}
	depth, inString, escaped := 0, false, false
	for _, c := range doc {
		switch {
		case inString:
			switch {
			case escaped:
				escaped = false
			case c == '\\':
				escaped = true
			case c == '"':
				inString = false
			}
		case c == '"':
			inString = true
		case c == '{' || c == '[':
			depth++
			if depth > lim.MaxDepth {
				return &Error{Bound: "depth", Max: lim.MaxDepth, Got: depth}
			}
		case c == '}' || c == ']':
			depth--
		}
	}
	return nil
}
