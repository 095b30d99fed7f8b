package duplex

import "fmt"

// Truncation modes (Truncation.Mode), as OpenAI Realtime names them.
const (
	// TruncationAuto drops the oldest turns when the conversation no longer fits the context
	// with room for a reply; it keeps AutoRetention of the budget, so that the KV prefix is
	// reused for many turns before the next drop.
	TruncationAuto = "auto"
	// TruncationDisabled never drops anything: a turn that no longer fits fails with a
	// context-length error.
	TruncationDisabled = "disabled"
	// TruncationRetentionRatio drops the oldest turns when the conversation after the
	// instructions passes PostInstructions tokens, down to RetentionRatio of it.
	TruncationRetentionRatio = "retention_ratio"
)

// AutoRetention is the share of the token budget "auto" keeps when it drops: a quarter of the
// window goes at once, as the engine's own overflow drops it, so that drops (and the prefill
// they cost) come once every many turns, not on every turn.
const AutoRetention = 0.75

// Truncation is the session's truncation setting: how the conversation the model reads is
// kept within its context window. The zero value is "auto".
type Truncation struct {
	Mode string // auto ("" too) | disabled | retention_ratio
	// RetentionRatio in [0, 1]: the share of the post-instructions budget kept after a drop
	// (retention_ratio only).
	RetentionRatio float64
	// PostInstructions bounds the conversation's tokens after the instructions (0 = the
	// context window less the reply's room; retention_ratio only).
	PostInstructions int
}

// Validate reports a setting no stream can honour.
func (t Truncation) Validate() error {
	switch t.Mode {
	case "", TruncationAuto, TruncationDisabled:
		return nil
	case TruncationRetentionRatio:
		if t.RetentionRatio < 0 || t.RetentionRatio > 1 {
			return fmt.Errorf("retention_ratio %g is outside [0, 1]", t.RetentionRatio)
		}
		if t.PostInstructions < 0 {
			return fmt.Errorf("token_limits.post_instructions %d is negative", t.PostInstructions)
		}
		return nil
	}
	return fmt.Errorf("truncation type %q (want auto, disabled or retention_ratio)", t.Mode)
}

// Retention is the share of the budget a drop keeps (1 when nothing is ever dropped).
func (t Truncation) Retention() float64 {
	switch t.Mode {
	case TruncationRetentionRatio:
		return t.RetentionRatio
	case TruncationDisabled:
		return 1
	}
	return AutoRetention
}

// Truncated is what an OutTruncated output reports: the turns the engine dropped from the
// conversation it reads, and its tokens before and after the drop.
type Truncated struct {
	// Through is the newest turn id dropped: every message of a turn up to it is gone.
	Through int
	// Messages is how many messages were dropped.
	Messages int
	// TokensBefore and TokensAfter count the conversation after the instructions, with the
	// input that caused the drop.
	TokensBefore, TokensAfter int
}
