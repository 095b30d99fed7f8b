package config

import (
	"fmt"
	"strconv"
	"strings"
	"time"
)

// EnvPrefix starts every environment variable the server reads.
const EnvPrefix = "OMNISERVE_"

// Key is one setting: its YAML path, its flag (empty when it has none) and its usage text.
// The environment variable is derived from the last path element: server.api_key → OMNISERVE_API_KEY.
type Key struct {
	Name  string
	Flag  string
	Usage string
	ptr   func(*Config) any
}

// Env returns the environment variable that sets k.
func (k Key) Env() string {
	leaf := k.Name[strings.LastIndexByte(k.Name, '.')+1:]
	return EnvPrefix + strings.ToUpper(leaf)
}

// Value returns k's current value in c, for flag defaults and printing.
func (k Key) Value(c *Config) any {
	switch p := k.ptr(c).(type) {
	case *string:
		return *p
	case *int:
		return *p
	case *int64:
		return *p
	case *bool:
		return *p
	case *time.Duration:
		return *p
	}
	panic("config: unsupported key type for " + k.Name) // a bug in the table below
}

// keys is the single table of settings. Order is the order of `serve --help`.
var keys = []Key{
	{"server.host", "host", "address to listen on", func(c *Config) any { return &c.Server.Host }},
	{"server.port", "port", "port to listen on (0 picks a free one)", func(c *Config) any { return &c.Server.Port }},
	{"engine.model", "model", `model: "dummy" (generated, no download), "dummy:tiny", "dummy:0.6b" or a .gguf path; with pipeline.remote.thinker it is not loaded, only the id served`, func(c *Config) any { return &c.Engine.Model }},
	{"engine.device", "device", "engine device: auto, cpu or cuda", func(c *Config) any { return &c.Engine.Device }},
	{"engine.gpu_layers", "gpu-layers", "layers to offload to the GPU (-1 = all)", func(c *Config) any { return &c.Engine.GPULayers }},
	{"engine.threads", "threads", "CPU threads for the engine (0 = all cores but one, left to speech)", func(c *Config) any { return &c.Engine.Threads }},
	{"engine.cache_dir", "cache-dir", "directory for generated dummy models (default $XDG_CACHE_HOME/omniserve)", func(c *Config) any { return &c.Engine.CacheDir }},
	{"engine.dummy_reply_words", "dummy-reply-words", "a dummy model's replies end after this many words, MIN-MAX or N, drawn from the conversation (real models end where they end)", func(c *Config) any { return &c.Engine.DummyReplyWords }},
	{"server.log_stats", "log-stats", "print statistics tables for every request, duplex turn and transcription session item", func(c *Config) any { return &c.Server.LogStats }},
	{"server.log_format", "log-format", "log format: console or json", func(c *Config) any { return &c.Server.LogFormat }},
	{"server.log_level", "log-level", "log level: debug, info, warn or error", func(c *Config) any { return &c.Server.LogLevel }},
	{"server.api_key", "api-key", "require this key as 'Authorization: Bearer <key>' on /v1/*", func(c *Config) any { return &c.Server.APIKey }},
	{"server.cors_origins", "cors-origins", "browser origins whose pages may call /v1 (CORS), comma-separated: exact origins (https://app.example.com), local (http(s) on localhost, 127.0.0.1, [::1], any port) or *; auto: local without --api-key, none with it; empty: none", func(c *Config) any { return &c.Server.CORSOrigins }},
	{"server.otlp_endpoint", "otlp-endpoint", "OTLP endpoint traces are exported to (OpenTelemetry; empty: OTEL_EXPORTER_OTLP_ENDPOINT, or off)", func(c *Config) any { return &c.Server.OTLPEndpoint }},
	{"server.debug_addr", "debug-addr", "host:port serving Go's profiler (/debug/pprof/) on a listener of its own, e.g. 127.0.0.1:6060 (empty: off; it has no authentication: keep it on loopback)", func(c *Config) any { return &c.Server.DebugAddr }},
	{"server.served_model_name", "served-model-name", "names the model is served under, comma-separated, as vLLM's --served-model-name (the first is its id; empty: the engine model's id)", func(c *Config) any { return &c.Server.ServedModelName }},
	{"server.model_aliases", "model-aliases", "further model names accepted (chat, realtime), comma-separated; a trailing * accepts every name with that prefix", func(c *Config) any { return &c.Server.ModelAliases }},
	{"server.max_sessions", "max-sessions", "maximum concurrent realtime sessions", func(c *Config) any { return &c.Server.MaxSessions }},
	{"server.tls_cert_file", "tls-cert-file", "TLS certificate file (serves HTTPS and WSS with --tls-key-file)", func(c *Config) any { return &c.Server.TLSCertFile }},
	{"server.tls_key_file", "tls-key-file", "TLS private key file", func(c *Config) any { return &c.Server.TLSKeyFile }},
	{"server.shutdown_timeout", "shutdown-timeout", "how long to drain in-flight requests on SIGINT/SIGTERM", func(c *Config) any { return &c.Server.ShutdownTimeout }},
	{"server.drain_grace", "drain-grace", "on SIGINT/SIGTERM, how long live realtime sessions may go on (told at once with session.closing) before they are closed (at most half of --shutdown-timeout)", func(c *Config) any { return &c.Server.DrainGrace }},
	{"server.max_idle_timeout", "", "largest idle timeout a realtime client may set (idle_timeout_s)", func(c *Config) any { return &c.Server.MaxIdleTimeout }},
	{"server.max_body_bytes", "", "largest accepted request body", func(c *Config) any { return &c.Server.MaxBodyBytes }},
	{"server.session_inbox_bytes", "", "per realtime session: bytes of client events waiting for the session (the reader waits past it)", func(c *Config) any { return &c.Server.SessionInboxBytes }},
	{"server.session_output_bytes", "", "per realtime session: bytes of queued server events (a client that lets more pile up is closed, 1008)", func(c *Config) any { return &c.Server.SessionOutputBytes }},
	{"server.session_history_bytes", "", "per realtime session: text of the conversation (the oldest items are dropped past it)", func(c *Config) any { return &c.Server.SessionHistoryBytes }},
	{"server.max_in_flight", "", "chat completions running at once (a request past it gets 429 engine_overloaded)", func(c *Config) any { return &c.Server.MaxInFlight }},
	{"server.client_secret_max_sessions", "", "realtime sessions (WebSocket connections and WebRTC calls, resumes included) one minted client secret may open (0: no bound)", func(c *Config) any { return &c.Server.ClientSecretMaxSessions }},
	{"server.max_instructions_bytes", "", "largest realtime instructions (session.update and response.create), in bytes", func(c *Config) any { return &c.Server.MaxInstructionsBytes }},
	{"server.prefill_budget_tokens", "", "tokens of input (items, tool outputs) a realtime session may queue for the model between two responses (0: the context window less a reply's room)", func(c *Config) any { return &c.Server.PrefillBudgetTokens }},
	{"realtime.resume_grace", "resume-grace", "how long a realtime session whose connection dropped (no close frame) is kept for session.resume (0 disables resume)", func(c *Config) any { return &c.Realtime.ResumeGrace }},
	{"realtime.live_test_hooks", "live-test-hooks", "GPT-Live's scripted test decider: instructions holding [[omniserve-test:delegate]] delegate the next user turn (tests only)", func(c *Config) any { return &c.Realtime.LiveTestHooks }},
	{"realtime.live_output_lead", "live-output-lead", "how far a GPT-Live session's output track runs ahead of real time, in deltas of half of it (at most 100 ms): a Live client cannot flush, so after a barge-in it still plays between the lead and the lead plus one delta", func(c *Config) any { return &c.Realtime.LiveOutputLead }},
	{"realtime.resume_journal_bytes", "", "bytes of recent server events each resumable session keeps for replay", func(c *Config) any { return &c.Realtime.ResumeJournalBytes }},
	{"realtime.resume_journal_events", "", "server events each resumable session keeps for replay", func(c *Config) any { return &c.Realtime.ResumeJournalEvents }},
	{"realtime.idle_timeout", "", "a realtime session that sends nothing this long is closed (a client may set idle_timeout_s up to server.max_idle_timeout)", func(c *Config) any { return &c.Realtime.IdleTimeout }},
	{"realtime.max_session_length", "max-session-length", "a realtime session's expires_at is its start plus this; a GPT-Live session ends there (session.closed reason expired)", func(c *Config) any { return &c.Realtime.MaxSessionLength }},
	{"realtime.handshake_timeout", "", "how long a resume connection may take to send session.resume", func(c *Config) any { return &c.Realtime.HandshakeTimeout }},
	{"realtime.stall_timeout", "", "a realtime client whose oldest undelivered event is older than this is not reading: closed with 1008 (or detached for resume)", func(c *Config) any { return &c.Realtime.StallTimeout }},
	{"realtime.write_timeout", "", "bound on writing one event to a realtime client; a client that stops reading is closed with 1008", func(c *Config) any { return &c.Realtime.WriteTimeout }},
	{"realtime.max_event_bytes", "", "largest realtime client event (larger: error event_too_large, the connection stays)", func(c *Config) any { return &c.Realtime.MaxEventBytes }},
	{"realtime.send_queue_events", "", "queued model events per realtime connection before the client counts as too slow (1008)", func(c *Config) any { return &c.Realtime.SendQueueEvents }},
	{"realtime.webrtc_udp_port", "webrtc-udp-port", "the one UDP port of all WebRTC calls' media (ICE UDP mux; 0 picks a free one, logged)", func(c *Config) any { return &c.Realtime.WebRTCUDPPort }},
	{"realtime.webrtc_tcp_port", "webrtc-tcp-port", "also offer ICE-TCP candidates for WebRTC calls on this TCP port, for browsers on networks that block UDP (0 = off)", func(c *Config) any { return &c.Realtime.WebRTCTCPPort }},
	{"realtime.webrtc_interfaces", "webrtc-interfaces", "the only network interfaces whose addresses WebRTC calls announce, comma-separated (empty = all)", func(c *Config) any { return &c.Realtime.WebRTCInterfaces }},
	{"realtime.webrtc_public_ips", "webrtc-public-ips", "IP addresses announced to browsers for WebRTC media instead of the host's own (NAT 1:1), comma-separated", func(c *Config) any { return &c.Realtime.WebRTCPublicIPs }},
	{"realtime.origin_patterns", "", "extra browser origins allowed to open the realtime WebSocket, comma-separated host patterns (same origin is always allowed)", func(c *Config) any { return &c.Realtime.OriginPatterns }},
	{"realtime.mcp_allowed_urls", "mcp-allowed-urls", "URL prefixes, comma-separated, that a realtime session's MCP tool (server_url) may reach; empty = none", func(c *Config) any { return &c.Realtime.MCPAllowedURLs }},
	{"engine.context_size", "", "KV cells shared by all sequences (0 = engine.max_sequences × the per-sequence context: every sequence's window fits)", func(c *Config) any { return &c.Engine.ContextSize }},
	{"engine.max_sequences", "", "concurrent sequences (0 = engine default)", func(c *Config) any { return &c.Engine.MaxSequences }},
	{"engine.batch_size", "", "max tokens per scheduler step (0 = engine default)", func(c *Config) any { return &c.Engine.BatchSize }},
	{"engine.prefill_chunk", "", "max prefill tokens of one sequence per step (0 = engine default)", func(c *Config) any { return &c.Engine.PrefillChunk }},
	{"engine.seq_context", "", "per-sequence context limit (0 = engine default)", func(c *Config) any { return &c.Engine.SeqContext }},
	{"engine.overflow", "", "when a sequence is full: truncate or error (empty = engine default)", func(c *Config) any { return &c.Engine.Overflow }},
	{"engine.flash_attention", "", "flash attention: auto (llama.cpp decides on a GPU; off on the CPU, where it makes each token cost more the longer the context), on or off (empty = auto)", func(c *Config) any { return &c.Engine.FlashAttention }},
}

// Keys returns every setting, in help order.
func Keys() []Key { return append([]Key(nil), keys...) }

// LookupFlag returns the key with the given flag name.
func LookupFlag(flag string) (Key, bool) {
	for _, k := range keys {
		if k.Flag != "" && k.Flag == flag {
			return k, true
		}
	}
	return Key{}, false
}

// Set parses value into key k of c. source names where the value came from, for the error.
func (k Key) Set(c *Config, value, source string) error {
	bad := func(want string) error {
		return &Error{Source: source, Msg: fmt.Sprintf("invalid value %q for %s: want %s", value, k.Name, want)}
	}
	switch p := k.ptr(c).(type) {
	case *string:
		*p = value
	case *int:
		n, err := strconv.Atoi(strings.TrimSpace(value))
		if err != nil {
			return bad("an integer")
		}
		*p = n
	case *int64:
		n, err := strconv.ParseInt(strings.TrimSpace(value), 10, 64)
		if err != nil {
			return bad("an integer")
		}
		*p = n
	case *bool:
		b, err := strconv.ParseBool(strings.TrimSpace(value))
		if err != nil {
			return bad("true or false")
		}
		*p = b
	case *time.Duration:
		d, err := time.ParseDuration(strings.TrimSpace(value))
		if err != nil {
			return bad("a duration such as 30s")
		}
		*p = d
	}
	return nil
}

// ApplyEnv sets every key whose OMNISERVE_* variable is present. lookup is os.LookupEnv in
// production and a map in tests.
func ApplyEnv(c *Config, lookup func(string) (string, bool)) error {
	for _, k := range keys {
		v, ok := lookup(k.Env())
		if !ok {
			continue
		}
		if err := k.Set(c, v, "env "+k.Env()); err != nil {
			return err
		}
	}
	return nil
}
