package audio

import "errors"

// Sentinel errors; callers test them with errors.Is. The speech engines return them too (for
// empty or non-finite audio, an unsupported rate, text with nothing to say), so a layer above
// can classify bad input without importing the engines.
var (
	// ErrOddLength reports PCM16 input whose byte count is not a multiple of two.
	ErrOddLength = errors.New("audio: odd PCM16 byte count")
	// ErrNonFinite reports a NaN or infinite sample.
	ErrNonFinite = errors.New("audio: non-finite sample")
	// ErrUnsupportedRate reports a sample rate the component does not handle.
	ErrUnsupportedRate = errors.New("audio: unsupported sample rate")
	// ErrEmptyAudio reports audio input with no samples.
	ErrEmptyAudio = errors.New("audio: empty audio")
	// ErrEmptyText reports text that gives no audio: input to speak with no speakable
	// characters, or a message part with no text.
	ErrEmptyText = errors.New("audio: empty text")
	// ErrInvalidWAV reports a byte slice that is not a WAV file this package can read.
	ErrInvalidWAV = errors.New("audio: invalid WAV")
)

// ASRSampleRate is the rate speech recognition takes its input at: the only rate the en-us
// acoustic model accepts. speech.ASR requires it; the layers that prepare audio for recognition
// (the HTTP API, the session, the stages) resample to it and the echo canceller runs at it.
const ASRSampleRate = 16000
