package session

// Effect is one thing that happened in the conversation that the client must hear of. It names
// what happened, never how a dialect spells it: the connection's dialect translator
// (internal/realtime/openai for OpenAI Realtime) turns each Effect into its wire events.
type Effect interface{ effect() }
