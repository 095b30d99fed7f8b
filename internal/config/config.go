// Package config resolves the server configuration of `omniserve serve`.
//
// One table (keys.go) lists every setting once, with its YAML key, its environment variable
// and its command-line flag, so that the three sources cannot drift apart. Precedence, lowest
// first: built-in defaults, the YAML file, OMNISERVE_* environment variables, flags. The YAML
// `pipeline:` section belongs to internal/stage; it is kept here as an undecoded yaml.Node.
package config

import (
	"errors"
	"fmt"
	"net"
	"net/url"
	"strconv"
	"strings"
	"time"

	"gopkg.in/yaml.v3"

	"github.com/omniserve/omniserve/configs"
)

// DefaultPath is the config file `serve` reads when neither --config nor OMNISERVE_CONFIG is
// given; when it does not exist, the copy embedded in the binary is used (EmbeddedPath).
const DefaultPath = configs.DefaultName

// Config is the resolved configuration of one server process.
type Config struct {
	Server Server `yaml:"server"`
	Engine Engine `yaml:"engine"`
	// Realtime holds the realtime-session settings (session resume).
	Realtime Realtime `yaml:"realtime"`
	// Pipeline is the `pipeline:` section, passed through undecoded for internal/stage.
	Pipeline yaml.Node `yaml:"pipeline"`
	// Path is the file the configuration was read from; empty when none was read.
	Path string `yaml:"-"`
}

// Server holds the HTTP surface settings.
type Server struct {
	Host      string `yaml:"host"`
	Port      int    `yaml:"port"` // 0 picks a free port (tests)
	LogFormat string `yaml:"log_format"`
	LogLevel  string `yaml:"log_level"`
	LogStats  bool   `yaml:"log_stats"`
	APIKey    string `yaml:"api_key"`
	// CORSOrigins are the browser origins whose pages may call /v1: comma-separated exact
	// origins, "local" (localhost, 127.0.0.1, [::1], any port) or "*"; "auto" (the default) is
	// local without an API key and none with one; empty: none.
	CORSOrigins string `yaml:"cors_origins"`
	// ServedModelName is the comma-separated names the model is served under (vLLM's
	// --served-model-name); the first is its id. Empty: the engine model's id.
	ServedModelName string `yaml:"served_model_name"`
	// OTLPEndpoint is where traces go (internal/tracing); "" leaves it to the OTEL_* environment.
	OTLPEndpoint string `yaml:"otlp_endpoint"`
	// DebugAddr, when set, serves Go's profiler (net/http/pprof) on its own listener: never on
	// the API's port, and off unless an operator names an address (docs/SECURITY.md).
	DebugAddr string `yaml:"debug_addr"`
	// ModelAliases are further names accepted for the model, comma-separated; a trailing "*"
	// accepts every name with that prefix. Exact aliases are listed by /v1/models.
	ModelAliases    string        `yaml:"model_aliases"`
	MaxSessions     int           `yaml:"max_sessions"`
	ShutdownTimeout time.Duration `yaml:"shutdown_timeout"`
	DrainGrace      time.Duration `yaml:"drain_grace"`
	MaxIdleTimeout  time.Duration `yaml:"max_idle_timeout"`
	TLSCertFile     string        `yaml:"tls_cert_file"`
	TLSKeyFile      string        `yaml:"tls_key_file"`
	MaxBodyBytes    int64         `yaml:"max_body_bytes"`
	// MaxInFlight bounds concurrently running chat completions; past it a request gets 429.
	MaxInFlight int `yaml:"max_in_flight"`
	// MaxInstructionsBytes bounds realtime session and per-response instructions.
	MaxInstructionsBytes int `yaml:"max_instructions_bytes"`
	// PrefillBudgetTokens bounds the tokens of input a realtime session may queue for the engine
	// between two responses (0: the model's context window less a reply's room).
	PrefillBudgetTokens int `yaml:"prefill_budget_tokens"`
	// ClientSecretMaxSessions bounds the realtime sessions one minted client secret may open
	// (0: no bound).
	ClientSecretMaxSessions int `yaml:"client_secret_max_sessions"`
	// Per-session byte budgets of the realtime buffers (docs/CONFIG.md).
	SessionInboxBytes   int `yaml:"session_inbox_bytes"`
	SessionOutputBytes  int `yaml:"session_output_bytes"`
	SessionHistoryBytes int `yaml:"session_history_bytes"`
}

// EffectiveDrainGrace is DrainGrace capped at half of ShutdownTimeout, so that the sessions'
// close and the components' close always have time left within the timeout.
func (s Server) EffectiveDrainGrace() time.Duration { return min(s.DrainGrace, s.ShutdownTimeout/2) }

// Realtime holds the settings of realtime sessions beyond admission (server.max_sessions).
type Realtime struct {
	// ResumeGrace is how long a session whose connection dropped (no close frame) is kept for a
	// session.resume; 0 disables resume.
	ResumeGrace time.Duration `yaml:"resume_grace"`
	// LiveTestHooks turns on GPT-Live's scripted test decider (docs/LIVE.md): instructions
	// holding [[omniserve-test:delegate]] delegate the next user turn. For tests only.
	LiveTestHooks bool `yaml:"live_test_hooks"`
	// LiveOutputLead is how far a GPT-Live session's output track runs ahead of real time: what
	// it buys against jitter, a Live client (which cannot flush) plays after a barge-in.
	LiveOutputLead time.Duration `yaml:"live_output_lead"`
	// ResumeJournalBytes and ResumeJournalEvents bound each session's replay journal.
	ResumeJournalBytes  int `yaml:"resume_journal_bytes"`
	ResumeJournalEvents int `yaml:"resume_journal_events"`
	// IdleTimeout ends a session that sends nothing for this long, unless the client set its
	// own idle_timeout_s. Both are capped by server.max_idle_timeout (EffectiveIdleTimeout).
	IdleTimeout time.Duration `yaml:"idle_timeout"`
	// HandshakeTimeout bounds the wait for session.resume on a resume connection.
	HandshakeTimeout time.Duration `yaml:"handshake_timeout"`
	// MaxSessionLength is every realtime session's expires_at (its start plus this). A GPT-Live
	// session ends there (session.closed reason "expired"); the other dialects report it and
	// end by their idle timeout. One key for all, so a dialect that enforces it later
	// (vllm-omni's session.expired) reads the same bound.
	MaxSessionLength time.Duration `yaml:"max_session_length"`
	// WriteTimeout bounds one frame write: a client that stops reading is closed (1008) by then.
	WriteTimeout time.Duration `yaml:"write_timeout"`
	// StallTimeout bounds the age of the oldest event not yet delivered to a client.
	StallTimeout time.Duration `yaml:"stall_timeout"`
	// MaxEventBytes is the largest client event (larger ones get event_too_large).
	MaxEventBytes int64 `yaml:"max_event_bytes"`
	// SendQueueEvents bounds queued model events per connection (with
	// server.session_output_bytes); past it the client is too slow and is closed (1008).
	SendQueueEvents int `yaml:"send_queue_events"`
	// OriginPatterns are extra browser origins allowed to open a WebSocket (comma-separated
	// host patterns such as "example.com,*.example.org"); same-origin pages always may.
	OriginPatterns string `yaml:"origin_patterns"`
	// WebRTCUDPPort is the one UDP port of every WebRTC call's media (0: a free one, logged).
	WebRTCUDPPort int `yaml:"webrtc_udp_port"`
	// WebRTCPublicIPs are the addresses announced to browsers instead of the host's (NAT 1:1),
	// comma-separated.
	WebRTCPublicIPs string `yaml:"webrtc_public_ips"`
	// WebRTCTCPPort, when set, also offers ICE-TCP candidates on that TCP port (0: off).
	WebRTCTCPPort int `yaml:"webrtc_tcp_port"`
	// WebRTCInterfaces are the only network interfaces whose addresses calls announce
	// (comma-separated names; empty: all).
	WebRTCInterfaces string `yaml:"webrtc_interfaces"`
	// MCPAllowedURLs are the URL prefixes (comma-separated) a session's `type: "mcp"` tool
	// may name as server_url. Empty (the default) allows none: a client must not be able to
	// make the server reach arbitrary hosts.
	MCPAllowedURLs string `yaml:"mcp_allowed_urls"`
}

// Engine holds the model-runner settings handed to internal/gpu. Zero sizes mean "the engine's
// own default" (gpu.Config documents them), so the defaults live in one place.
type Engine struct {
	Model        string `yaml:"model"`
	Device       string `yaml:"device"`
	GPULayers    int    `yaml:"gpu_layers"`
	Threads      int    `yaml:"threads"`
	CacheDir     string `yaml:"cache_dir"`
	ContextSize  int    `yaml:"context_size"`
	MaxSequences int    `yaml:"max_sequences"`
	BatchSize    int    `yaml:"batch_size"`
	PrefillChunk int    `yaml:"prefill_chunk"`
	SeqContext   int    `yaml:"seq_context"`
	Overflow     string `yaml:"overflow"`
	// FlashAttention: auto (default: llama.cpp decides on a GPU, off on the CPU), on or off.
	FlashAttention string `yaml:"flash_attention"`
	// DummyReplyWords: the lengths a dummy model's replies are drawn from, "MIN-MAX" or "N"
	// words (DummyReplyRange).
	DummyReplyWords string `yaml:"dummy_reply_words"`
}

// DummyReplyRange parses DummyReplyWords: "MIN-MAX" or "N" (MIN = MAX = N), 1 <= MIN <= MAX;
// empty is 0, 0, the engine's default.
func (e Engine) DummyReplyRange() (lo, hi int, err error) {
	if strings.TrimSpace(e.DummyReplyWords) == "" {
		return 0, 0, nil
	}
	a, b, isRange := strings.Cut(strings.TrimSpace(e.DummyReplyWords), "-")
	if !isRange {
		b = a
	}
	lo, err1 := strconv.Atoi(strings.TrimSpace(a))
	hi, err2 := strconv.Atoi(strings.TrimSpace(b))
	if err1 != nil || err2 != nil || lo < 1 || hi < lo {
		return 0, 0, fmt.Errorf("%q is not MIN-MAX or N words with 1 <= MIN <= MAX", e.DummyReplyWords)
	}
	return lo, hi, nil
}

// Defaults returns the built-in configuration.
func Defaults() Config {
	return Config{
		Server: Server{
			Host:                 "0.0.0.0",
			Port:                 8000,
			LogFormat:            "console",
			LogLevel:             "info",
			CORSOrigins:          "auto",
			MaxSessions:          32,
			ShutdownTimeout:      30 * time.Second,
			DrainGrace:           10 * time.Second,
			MaxIdleTimeout:       30 * time.Minute,
			MaxBodyBytes:         64 << 20, // a chat request may carry base64 audio
			MaxInFlight:          64,
			MaxInstructionsBytes: 128 << 10,
			// A page reconnects (resume) a few times in a key's 10 minutes; more than this is
			// one key taking slots.
			ClientSecretMaxSessions: 8,
			SessionInboxBytes:       16 << 20,
			SessionOutputBytes:      16 << 20,
			SessionHistoryBytes:     4 << 20,
		},
		Engine: Engine{
			Model:           "dummy",
			Device:          "auto",
			GPULayers:       -1,
			DummyReplyWords: "8-32",
		},
		Realtime: Realtime{
			ResumeGrace:         30 * time.Second,
			ResumeJournalBytes:  1 << 20,
			ResumeJournalEvents: 1024,
			IdleTimeout:         300 * time.Second,
			HandshakeTimeout:    10 * time.Second,
			MaxSessionLength:    60 * time.Minute,
			WriteTimeout:        5 * time.Second,
			StallTimeout:        10 * time.Second,
			MaxEventBytes:       15 << 20,
			SendQueueEvents:     512,
			LiveOutputLead:      100 * time.Millisecond,
		},
	}
}

// Error is a configuration problem: a bad value, an unknown key or an unreadable file.
// The CLI maps it to exit code 2. Its message is one line that names the key and value.
type Error struct {
	Source string // "flag --port", "env OMNISERVE_PORT", "configs/x.yaml:3", or "config"
	Msg    string
	Err    error
}

func (e *Error) Error() string {
	if e.Source == "" {
		return e.Msg
	}
	return e.Source + ": " + e.Msg
}

func (e *Error) Unwrap() error { return e.Err }

// IsError reports whether err is (or wraps) a configuration Error.
func IsError(err error) bool {
	var ce *Error
	return errors.As(err, &ce)
}

// EffectiveIdleTimeout is realtime.idle_timeout capped by server.max_idle_timeout, which bounds
// every idle timeout, the server's default included.
func (c *Config) EffectiveIdleTimeout() time.Duration {
	return min(c.Realtime.IdleTimeout, c.Server.MaxIdleTimeout)
}

// Validate checks the cross-field and range rules that a single key's parser cannot.
func (c *Config) Validate() error {
	s, e, rt := c.Server, c.Engine, c.Realtime
	checks := []struct {
		bad bool
		key string
		val any
		msg string
	}{
		{s.Port < 0 || s.Port > 65535, "server.port", s.Port, "must be 0..65535"},
		{!oneOf(s.LogFormat, "console", "json"), "server.log_format", s.LogFormat, "must be console or json"},
		{!oneOf(s.LogLevel, "debug", "info", "warn", "error"), "server.log_level", s.LogLevel, "must be debug, info, warn or error"},
		{s.MaxSessions < 1, "server.max_sessions", s.MaxSessions, "must be at least 1"},
		{s.ShutdownTimeout <= 0, "server.shutdown_timeout", s.ShutdownTimeout, "must be positive"},
		{s.DrainGrace < 0, "server.drain_grace", s.DrainGrace, "must not be negative"},
		{s.MaxIdleTimeout <= 0, "server.max_idle_timeout", s.MaxIdleTimeout, "must be positive"},
		{s.MaxBodyBytes < 1024, "server.max_body_bytes", s.MaxBodyBytes, "must be at least 1024"},
		{s.MaxInFlight < 1, "server.max_in_flight", s.MaxInFlight, "must be at least 1"},
		{s.MaxInstructionsBytes < 1, "server.max_instructions_bytes", s.MaxInstructionsBytes, "must be at least 1"},
		{s.PrefillBudgetTokens < 0, "server.prefill_budget_tokens", s.PrefillBudgetTokens, "must be at least 0"},
		{s.ClientSecretMaxSessions < 0, "server.client_secret_max_sessions", s.ClientSecretMaxSessions, "must be at least 0"},
		{s.SessionInboxBytes < 1<<10, "server.session_inbox_bytes", s.SessionInboxBytes, "must be at least 1024"},
		{s.SessionOutputBytes < 1<<10, "server.session_output_bytes", s.SessionOutputBytes, "must be at least 1024"},
		{s.SessionHistoryBytes < 1<<10, "server.session_history_bytes", s.SessionHistoryBytes, "must be at least 1024"},
		{(s.TLSCertFile == "") != (s.TLSKeyFile == ""), "server.tls_cert_file", s.TLSCertFile, "tls_cert_file and tls_key_file must be given together"},
		{e.Model == "", "engine.model", e.Model, "must not be empty"},
		{!oneOf(e.Device, "auto", "cpu", "cuda"), "engine.device", e.Device, "must be auto, cpu or cuda"},
		{e.GPULayers < -1, "engine.gpu_layers", e.GPULayers, "must be -1 (all) or more"},
		{e.Threads < 0, "engine.threads", e.Threads, "must be 0 (all cores) or more"},
		{e.ContextSize < 0, "engine.context_size", e.ContextSize, "must not be negative"},
		{e.MaxSequences < 0, "engine.max_sequences", e.MaxSequences, "must not be negative"},
		{e.BatchSize < 0, "engine.batch_size", e.BatchSize, "must not be negative"},
		{e.PrefillChunk < 0, "engine.prefill_chunk", e.PrefillChunk, "must not be negative"},
		{e.SeqContext < 0, "engine.seq_context", e.SeqContext, "must not be negative"},
		{!oneOf(e.Overflow, "", "truncate", "error"), "engine.overflow", e.Overflow, "must be truncate or error"},
		{!oneOf(e.FlashAttention, "", "auto", "on", "off"), "engine.flash_attention", e.FlashAttention, "must be auto, on or off"},
		{badRange(e), "engine.dummy_reply_words", e.DummyReplyWords, "must be MIN-MAX or N words, 1 <= MIN <= MAX"},
		{rt.ResumeGrace < 0, "realtime.resume_grace", rt.ResumeGrace, "must not be negative (0 disables resume)"},
		{rt.ResumeJournalBytes < 1024, "realtime.resume_journal_bytes", rt.ResumeJournalBytes, "must be at least 1024"},
		{rt.ResumeJournalEvents < 16, "realtime.resume_journal_events", rt.ResumeJournalEvents, "must be at least 16"},
		{rt.IdleTimeout <= 0, "realtime.idle_timeout", rt.IdleTimeout, "must be positive"},
		{rt.HandshakeTimeout <= 0, "realtime.handshake_timeout", rt.HandshakeTimeout, "must be positive"},
		{rt.MaxSessionLength < time.Second, "realtime.max_session_length", rt.MaxSessionLength, "must be at least 1s"},
		{rt.WriteTimeout <= 0, "realtime.write_timeout", rt.WriteTimeout, "must be positive"},
		{rt.StallTimeout <= 0, "realtime.stall_timeout", rt.StallTimeout, "must be positive"},
		{rt.MaxEventBytes < 1024 || rt.MaxEventBytes > s.MaxBodyBytes, "realtime.max_event_bytes", rt.MaxEventBytes, "must be at least 1024 and at most server.max_body_bytes"},
		{rt.SendQueueEvents < 16, "realtime.send_queue_events", rt.SendQueueEvents, "must be at least 16"},
		{rt.LiveOutputLead < 20*time.Millisecond || rt.LiveOutputLead > 500*time.Millisecond, "realtime.live_output_lead", rt.LiveOutputLead, "must be 20ms..500ms"},
		{rt.WebRTCUDPPort < 0 || rt.WebRTCUDPPort > 65535, "realtime.webrtc_udp_port", rt.WebRTCUDPPort, "must be 0..65535"},
		{!ipList(rt.WebRTCPublicIPs), "realtime.webrtc_public_ips", rt.WebRTCPublicIPs, "must be comma-separated IP addresses"},
		{rt.WebRTCTCPPort < 0 || rt.WebRTCTCPPort > 65535, "realtime.webrtc_tcp_port", rt.WebRTCTCPPort, "must be 0..65535"},
		{badURLPrefixes(rt.MCPAllowedURLs), "realtime.mcp_allowed_urls", rt.MCPAllowedURLs, "must be comma-separated absolute http:// or https:// URLs without user info"},
	}
	for _, ch := range checks {
		if ch.bad {
			return &Error{Source: "config", Msg: fmt.Sprintf("invalid %s %q: %s", ch.key, fmt.Sprint(ch.val), ch.msg)}
		}
	}
	return nil
}

// badURLPrefixes reports whether a comma-separated list holds an entry that is not an
// absolute http(s) URL with a host.
func badURLPrefixes(list string) bool {
	for _, p := range strings.Split(list, ",") {
		p = strings.TrimSpace(p)
		if p == "" {
			continue
		}
		u, err := url.Parse(p)
		if err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" || u.User != nil {
			return true
		}
	}
	return false
}

func badRange(e Engine) bool {
	_, _, err := e.DummyReplyRange()
	return err != nil
}

func oneOf(v string, allowed ...string) bool {
	for _, a := range allowed {
		if v == a {
			return true
		}
	}
	return false
}

// ipList reports whether v is empty or comma-separated IP addresses.
func ipList(v string) bool {
	for _, f := range strings.Split(v, ",") {
		if f = strings.TrimSpace(f); f != "" && net.ParseIP(f) == nil {
			return false
		}
	}
	return true
}
