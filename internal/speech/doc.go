// Package speech wraps the C speech libraries omniserve uses on the CPU: streaming ASR on
// pocketsphinx, voice activity detection on WebRTC VAD (with a pitch check for early speech
// decisions), TTS on flite, input noise reduction on speexdsp, and the Opus codec of the
// WebRTC transport on libopus.
//
// It is the only package with `import "C"` for speech libraries; no C type escapes it. Audio
// in and out is mono float32 in [-1, 1] (Opus, a wire codec, takes and gives PCM16); the sample-format and sample-rate conversions, WAV and
// the echo canceller are package audio's, which this package builds on.
//
// The ASR decoders of one pool share a single copy of the language model, the dictionary
// (restricted to the model's words) and the triphone map, ~30 MiB per decoder instead of ~91;
// asrshare.c says how, and why the model cannot simply be handed to every decoder.
package speech
