package metrics

// Causes of engine failures that reached a client (the cause label of
// omniserve_engine_errors_total). Each names the condition, so that an error event is
// explained by the count and its log line (issue 27: one engine_error was seen once and never
// explained).
const (
	// CauseContextLength: the prompt does not fit the context window (context_length_exceeded).
	CauseContextLength = "context_length"
	// CauseContextFull: a sequence reached its window under engine overflow "error", or the
	// shared KV cache was full (kv_cache_full).
	CauseContextFull = "context_full"
	// CauseDecodeFailed: llama_decode failed for another reason than a full cache.
	CauseDecodeFailed = "decode_failed"
	// CauseEnginePanic: a scheduler step panicked (also in omniserve_panics_total).
	CauseEnginePanic = "engine_panic"
	// CauseSampler: sampling failed (no logits, a grammar with no next token, the native sampler).
	CauseSampler = "sampler"
	// CauseSequenceBusy: an append or generation met another generation on the same sequence.
	CauseSequenceBusy = "sequence_busy"
	// CauseEmptyHistory: a generation on a sequence with nothing to generate from.
	CauseEmptyHistory = "empty_history"
	// CauseInvalidToken: a token outside the vocabulary.
	CauseInvalidToken = "invalid_token"
	// CauseTemplate: the chat template could not render the conversation.
	CauseTemplate = "template"
	// CauseSynthesis: the talker's speech synthesis failed.
	CauseSynthesis = "synthesis"
	// CauseOverloaded: a stage queue or the engine's sequence slots were full.
	CauseOverloaded = "overloaded"
	// CauseClosed: the engine, the pipeline or the stream was closed under the work.
	CauseClosed = "closed"
	// CauseCancelled: the work's context ended without the turn being aborted.
	CauseCancelled = "cancelled"
	// CauseInvalidRequest: the pipeline refused the request as malformed.
	CauseInvalidRequest = "invalid_request"
	// CauseUpstream: a remote stage's backend failed.
	CauseUpstream = "upstream"
	// CauseUnknown: none of the above; its log line carries the whole error chain.
	CauseUnknown = "unknown"
)

// EngineErrorCauses is every value of omniserve_engine_errors_total's cause label.
var EngineErrorCauses = []string{CauseContextLength, CauseContextFull, CauseDecodeFailed, CauseEnginePanic,
	CauseSampler, CauseSequenceBusy, CauseEmptyHistory, CauseInvalidToken, CauseTemplate, CauseSynthesis,
	CauseOverloaded, CauseClosed, CauseCancelled, CauseInvalidRequest, CauseUpstream, CauseUnknown}

// CountEngineError counts an engine failure that reached a client (a realtime error event, a
// failed response or chat completion), by cause; a value outside EngineErrorCauses counts as unknown.
func (c *Collectors) CountEngineError(cause string) {
	if c == nil {
		return
	}
	for _, k := range EngineErrorCauses {
		if k == cause {
			c.engineErrors.WithLabelValues(cause).Inc()
			return
		}
	}
	c.engineErrors.WithLabelValues(CauseUnknown).Inc()
}
