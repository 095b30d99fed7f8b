package gpu

import (
	"errors"
	"fmt"
)

// Sentinel errors. Callers test them with errors.Is.
var (
	// ErrContextFull is returned by the one Append or Generate call that would grow a sequence
	// past its context when the overflow policy is "error", or when the shared KV cache has no
	// free cell left. The sequence and every other sequence stay usable.
	ErrContextFull = errors.New("engine: sequence context is full")
	// ErrNoFreeSlot is returned by Open when MaxSequences sequences are already live.
	ErrNoFreeSlot = errors.New("engine: no free sequence slot")
	// ErrKVReserved is returned by Open when the open sequences' reserved windows leave no room
	// in the shared KV cache for another one. It is an ErrNoFreeSlot: callers that map an
	// overloaded engine to 503 need no new case.
	ErrKVReserved = fmt.Errorf("%w: the KV cache has no room for another sequence's window", ErrNoFreeSlot)
	// ErrClosed is returned by calls on a closed Runner or Sequence.
	ErrClosed = errors.New("engine: closed")
	// ErrBusy is returned by Append or Generate while the same sequence already runs a Generate.
	ErrBusy = errors.New("engine: sequence is busy generating")
	// ErrMarkLost is returned by Rollback when the history no longer holds the mark: it was
	// truncated (context overflow) since, or is already shorter.
	ErrMarkLost = errors.New("engine: rollback mark lost")
	// ErrDecode: llama_decode failed for another reason than a full KV cache (its return code
	// follows in the message); every sequence of that step fails with it.
	ErrDecode = errors.New("engine: llama_decode failed")
	// ErrPanic: a scheduler step panicked (a bug); the sequences of that step fail with it.
	ErrPanic = errors.New("engine: scheduler step panicked")
	// ErrNoLogits: the logits row of a sampled position was missing (llama.cpp returned none).
	ErrNoLogits = errors.New("engine: no logits for the sampled position")
	// ErrEmptyHistory is returned by Generate on a sequence with nothing to generate from.
	ErrEmptyHistory = errors.New("engine: nothing to generate from: the sequence has no history")
	// ErrInvalidToken: a token id outside the model's vocabulary.
	ErrInvalidToken = errors.New("engine: token outside the vocabulary")
)

// Reasons a model fails to load; a *LoadError wraps exactly one of them.
var (
	ErrModelNotFound      = errors.New("model file not found")
	ErrNotGGUF            = errors.New("not a GGUF file")
	ErrUnsupportedArch    = errors.New("unsupported model architecture")
	ErrCorruptModel       = errors.New("corrupt model file")
	ErrModelTooLarge      = errors.New("model larger than available memory")
	ErrBackendUnavailable = errors.New("requested device backend unavailable")
	ErrInvalidConfig      = errors.New("invalid engine configuration")
)

// LoadError says which model file failed to load and why. Reason is one of the sentinels above
// (errors.Is works through LoadError); Detail carries the specifics.
type LoadError struct {
	Path   string
	Reason error
	Detail string
}

func (e *LoadError) Error() string {
	if e.Detail == "" {
		return fmt.Sprintf("load model %q: %v", e.Path, e.Reason)
	}
	return fmt.Sprintf("load model %q: %v: %s", e.Path, e.Reason, e.Detail)
}

func (e *LoadError) Unwrap() error { return e.Reason }

func loadErr(path string, reason error, format string, args ...any) *LoadError {
	return &LoadError{Path: path, Reason: reason, Detail: fmt.Sprintf(format, args...)}
}
