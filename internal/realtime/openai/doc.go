// Package openai is the OpenAI Realtime dialect: it turns the session's effects
// (session.Effect, what happened in the conversation) into OpenAI Realtime server events
// (protocol.ServerEvent, GA-shaped). The protocol package spells them at encode time, in GA or
// in beta names and fields (protocol.Encode's beta flag), so the beta variant and the
// transcription session's differences are the protocol's and this translator's, never the
// session's.
//
// A dialect is one translator: frames in → session.Command, session.Effect → frames out. This
// package is the OpenAI one; the session imports no dialect, and a new dialect adds a package
// like this one and touches no session file.
package openai
