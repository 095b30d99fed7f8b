// Package vllm is vllm-omni's native duplex dialect (/v1/realtime?duplex=1 and /v1/duplex;
// docs/REALTIME.md, "vllm-omni duplex dialect", which also lists what still differs): the
// OpenAI Realtime translator (internal/realtime/openai) for every event the two share, plus
// vllm-omni's own spellings and meanings in and out.
//
// In (decode.go, session_keys.go): the aliases (push_chunk, input.audio.append, push_text,
// input_text.append, close, close_session, signal_turn, audio.playback_ack), input.commit, a
// commit's meaning (response_create false or absent: the engine decides; after audio, audio the
// engine already took is accepted; is_speech false: a silence commit), input.text.append, a flat
// session.update, vllm-omni's session keys (ref_audio, overlap_policy, playback_commit_policy,
// the input rate, 16 kHz by default, extra_body's model flags) honoured or refused by name,
// playback.ack's committed_ms under the playback policy, turn.signal events that ask for no
// action, and WAV appends.
//
// Out (encode.go, encode_events.go): vllm-omni's error codes; response.listen once per unit
// (ChunkPeriodMs) of audio with its reason; response.speak before every response's first audio
// and items added and created (Around); committed's and playback.acknowledged's event objects;
// audio deltas' cumulative metadata; capabilities and the echoed keys in the session object;
// attachment_generation; completed for OpenAI's incomplete; turn.event.
//
// A Translator keeps what a session's dialect needs between events (the input since the last
// commit, the keys in force, the audio heard and sent), so there is one per session.
package vllm
