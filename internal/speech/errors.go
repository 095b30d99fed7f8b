package speech

import "errors"

// Sentinel errors; callers test them with errors.Is. Errors about the audio or text itself
// (audio.ErrEmptyAudio, audio.ErrNonFinite, audio.ErrUnsupportedRate, audio.ErrEmptyText) are
// package audio's, shared with the layers that convert audio before it gets here.
var (
	// ErrSynthesis reports speakable text for which the synthesizer produced no audio: a
	// failure, unlike audio.ErrEmptyText, which means there was nothing to say.
	ErrSynthesis = errors.New("speech: synthesis failed")
	// ErrInvalidConfig reports a configuration value out of range.
	ErrInvalidConfig = errors.New("speech: invalid config")
	// ErrClosed reports use of a component after Close.
	ErrClosed = errors.New("speech: closed")
)
