// Package vllm is vllm-omni's native duplex dialect (/v1/realtime?duplex=1 and /v1/duplex;
// docs/REALTIME.md, "vllm-omni duplex dialect", which also lists what is not served yet): the
// OpenAI Realtime translator (internal/realtime/openai) for every event the two share, plus
// vllm-omni's own spellings in and out.
//
// In: the aliases (push_chunk, input.audio.append, push_text, input_text.append, close,
// close_session, signal_turn, audio.playback_ack), input.commit (a commit that asks for a
// response unless response_create says otherwise), input.text.append (a user text item; the
// next input.commit answers it), a flat session.update (its own type ignored),
// create_response for response_create, input_audio_format / sample_rate on an append, and WAV
// appends (the aliases' default format). Out: vllm-omni's error codes for the errors both
// dialects have (input_audio_buffer_empty, item_not_found, response_not_active,
// response_already_active). Everything else is OpenAI's, event for event.
//
// A Translator keeps what input.commit needs to know (whether text or audio came since the last
// commit), so there is one per session.
package vllm
