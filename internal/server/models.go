package server

import (
	"slices"
	"strings"
)

// modelNames are the names one server's model answers to: the served names (vLLM's
// --served-model-name; the first is the model's id in /v1/models, responses and metrics), and
// aliases, where a trailing "*" accepts every name with that prefix. The OpenAI SDKs name their
// own default models ("gpt-realtime-2.1" from the Agents SDK's quick-start), so an operator
// aliases them instead of asking every client to change.
type modelNames struct {
	served   []string // listed by /v1/models, the first is the id
	exact    []string // exact aliases, listed too
	prefixes []string // "gpt-realtime*" → "gpt-realtime"; accepted, not listed
}

// newModelNames resolves server.served_model_name and server.model_aliases; id is the engine
// model's id, the served name when none is configured.
func newModelNames(served, aliases, id string) modelNames {
	var m modelNames
	m.served = splitList(served)
	if len(m.served) == 0 {
		m.served = []string{id}
	}
	for _, a := range splitList(aliases) {
		if p, ok := strings.CutSuffix(a, "*"); ok {
			m.prefixes = append(m.prefixes, p)
		} else if !slices.Contains(m.served, a) && !slices.Contains(m.exact, a) {
			m.exact = append(m.exact, a)
		}
	}
	return m
}

// ID is the model's public id: the first served name.
func (m modelNames) ID() string { return m.served[0] }

// Listed are the names /v1/models lists: served names, then exact aliases.
func (m modelNames) Listed() []string { return append(slices.Clone(m.served), m.exact...) }

// Accepts reports whether a client may name the model so.
func (m modelNames) Accepts(name string) bool {
	if name == "" {
		return false
	}
	if slices.Contains(m.served, name) || slices.Contains(m.exact, name) {
		return true
	}
	for _, p := range m.prefixes {
		if strings.HasPrefix(name, p) {
			return true
		}
	}
	return false
}
