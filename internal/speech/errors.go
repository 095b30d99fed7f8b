package speech

import "errors"

// Sentinel errors; callers test them with errors.Is.
var (
	// ErrOddLength reports PCM16 input whose byte count is not a multiple of two.
	ErrOddLength = errors.New("speech: odd PCM16 byte count")
	// ErrNonFinite reports a NaN or infinite sample.
	ErrNonFinite = errors.New("speech: non-finite sample")
	// ErrUnsupportedRate reports a sample rate the component does not handle.
	ErrUnsupportedRate = errors.New("speech: unsupported sample rate")
	// ErrEmptyText reports TTS input with no speakable characters.
	ErrEmptyText = errors.New("speech: empty text")
	// ErrSynthesis reports speakable text for which the synthesizer produced no audio: a
	// failure, unlike ErrEmptyText, which means there was nothing to say.
	ErrSynthesis = errors.New("speech: synthesis failed")
	// ErrEmptyAudio reports audio input with no samples.
	ErrEmptyAudio = errors.New("speech: empty audio")
	// ErrInvalidWAV reports a byte slice that is not a WAV file this package can read.
	ErrInvalidWAV = errors.New("speech: invalid WAV")
	// ErrInvalidConfig reports a configuration value out of range.
	ErrInvalidConfig = errors.New("speech: invalid config")
	// ErrClosed reports use of a component after Close.
	ErrClosed = errors.New("speech: closed")
)
