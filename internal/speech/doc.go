// Package speech wraps the speech libraries omniserve uses on the CPU: streaming ASR on
// pocketsphinx, voice activity detection on WebRTC VAD, TTS on flite, plus the sample-format
// and sample-rate conversions the realtime API needs (PCM16, float32, G.711, 8/16/24/48 kHz, WAV).
//
// It is the only package with `import "C"` for speech libraries; no C type escapes it.
// Audio inside omniserve is mono float32 in [-1, 1]. Conversions write into the caller's
// dst slice (from index 0, growing it only when its capacity is too small) so hot paths can
// run without per-frame allocation.
package speech
