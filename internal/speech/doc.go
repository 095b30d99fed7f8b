// Package speech wraps the C speech libraries omniserve uses on the CPU: streaming ASR on
// pocketsphinx, voice activity detection on WebRTC VAD (with a pitch check for early speech
// decisions) and TTS on flite.
//
// It is the only package with `import "C"` for speech libraries; no C type escapes it. Audio
// in and out is mono float32 in [-1, 1]; the sample-format and sample-rate conversions, WAV and
// the echo canceller are package audio's, which this package builds on.
package speech
