package stage

import (
	"github.com/omniserve/omniserve/internal/duplex"
	"github.com/omniserve/omniserve/internal/gpu"
)

// Token accounting of duplex responses (OpenAI's response.done usage). The counts are the
// engine's: what a response read is its sequence's history when generation began, and what it
// prefilled for its turn is exactly what its stage-0 statistics rows report as num_tokens_in
// (the prefill jobs billed to the turn plus the response's own prefill), so usage and the
// statistics table agree by construction. Everything else in the sequence was in the KV cache
// before the turn.

// promptUsage is the input side of response n's usage once its prompt is in seq: own is what
// the response prefilled itself, to which the prefill jobs billed to turn n add. Those of
// earlier turns are forgotten; turn n's stay, for the response that replaces a discarded
// speculation of the same turn. With a remote thinker (seq nil) the input is known only from
// the remote's count after generation (response.finalUsage).
func (c *conversation) promptUsage(n, own int, seq *gpu.Sequence) *duplex.Usage {
	c.mu.Lock()
	fresh := own + c.prefilled[n]
	for t := range c.prefilled {
		if t < n {
			delete(c.prefilled, t)
		}
	}
	c.mu.Unlock()
	u := &duplex.Usage{}
	if seq == nil {
		return u
	}
	u.InputTokens = seq.HistoryLen()
	u.CachedTokens = max(u.InputTokens-fresh, 0)
	return u
}
