// Package audio is omniserve's one home for audio formats and the pure-Go processing around
// them: sample-format conversion (PCM16, int16, float32, G.711 µ-law and A-law), streaming
// sample-rate conversion (8 to 48 kHz), WAV encoding and decoding, silence trimming and the
// echo canceller in front of the barge-in VAD. The HTTP API, the realtime session, the stages
// and the speech engines all convert through it, so there is one conversion of each kind.
//
// It has no cgo and imports no other omniserve package; the C speech libraries (ASR, VAD, TTS)
// are in internal/speech, which builds on this package.
//
// Audio inside omniserve is mono float32 in [-1, 1]. Conversions write into the caller's
// dst slice (from index 0, growing it only when its capacity is too small) so hot paths can
// run without per-frame allocation.
package audio
