package session

import (
	"encoding/json"
	"github.com/omniserve/omniserve/internal/duplex"
	"time"
)

// The effects of the session's configuration: the session was created, a session.update was
// applied. Each carries the whole session as its client is told of it (SessionView).

// SessionCreated: the session exists, with the configuration View (sent first, before any
// other event of the session).
type SessionCreated struct {
	View SessionView
	// ResumeToken is the bearer secret of a later resume; "" unless the session is resumable.
	ResumeToken string
	// LegacyNames: the client knows a transcription session by the beta names of its events
	// (settings.legacyTranscription), which differ from a conversation's.
	LegacyNames bool
}

// SessionUpdated: a configuration update was applied; View is the session after it.
type SessionUpdated struct {
	View SessionView
	// LegacyNames as SessionCreated's; also set for an update the client sent under the
	// transcription session's own beta name.
	LegacyNames bool
}

func (SessionCreated) effect() {}
func (SessionUpdated) effect() {}

// SessionView is the session as its client is told of it: the configuration in force with
// every default resolved, and the session's live facts (state, epoch, turn). It says what the
// session is, never how a dialect spells it (internal/realtime/openai writes it as the
// realtime.session or realtime.transcription_session object).
type SessionView struct {
	// ID is the session's id; "" where no session exists yet (a client secret's preview).
	ID        string
	ExpiresAt time.Time
	// Transcription: a transcription session (?intent=transcription): it transcribes committed
	// audio and never responds, so it has no output, tools or sampling.
	Transcription bool
	Model         string
	Instructions  string
	Input         InputView
	Output        OutputView
	Tools         ToolsView
	// MaxOutputTokens is the reply limit in force: the session's, else the server's default
	// (what the engine applies); 0 = unlimited.
	MaxOutputTokens int
	Temperature     float64
	// Seed is the sampling seed; nil: responses draw random seeds.
	Seed *uint32
	// Tracing is the tracing setting as the client set it, echoed.
	Tracing any
	// Truncation is the truncation setting in force.
	Truncation  duplex.Truncation
	IdleTimeout time.Duration
	// OverlapPolicy is what input during a response does (Config.OverlapPolicy).
	OverlapPolicy string
	// Duplex: the session runs on the native duplex engine (?duplex=1); AutoResponse: the
	// engine takes turns itself (settings.autoResponse).
	Duplex       bool
	AutoResponse bool
	// State is the session's life state, TurnState where its current turn is, Epoch the
	// session epoch and Turn the current turn's id.
	State        string
	TurnState    string
	Epoch        int
	Turn         int
	Capabilities SessionCapabilities
}

// InputView is the session's input side.
type InputView struct {
	Format AudioFormat
	// TurnDetection is the turn detection in force; nil: none (the client commits).
	TurnDetection *TurnDetection
	// Transcription is the input transcription the client is told of; nil: off.
	Transcription *InputTranscription
	// NoiseReduction is "" (off), speech.NoiseNearField or speech.NoiseFarField.
	NoiseReduction string
	// TranscriptLogprobs: input transcripts carry their words' logprobs.
	TranscriptLogprobs bool
}

// InputTranscription names the recognizer that transcribes the input.
type InputTranscription struct {
	Model, Language, Prompt string
}

// OutputView is a conversation's output side.
type OutputView struct {
	// Audio: audio is an output modality (with its transcript); else text only.
	Audio  bool
	Format AudioFormat
	Voice  string
	Speed  float64
}

// ToolsView is the tools the model may call and how.
type ToolsView struct {
	Functions []duplex.Tool
	MCP       []MCPServerView
	Choice    ToolChoice
}

// MCPServerView is an MCP server of the session's tools as the client is told of it: without
// its headers or authorization, which are secrets.
type MCPServerView struct {
	Label, URL, Description string
	// AllowedTools and RequireApproval are the client's JSON as it sent them (nil: absent).
	AllowedTools, RequireApproval json.RawMessage
}

// SessionCapabilities is what this server supports, told to the client with the session.
type SessionCapabilities struct {
	BargeIn, AudioTruncate, Resume, FullDuplex bool
	// ChunkPeriodMs is the output audio's chunk period; TargetBargeInLatencyMs the barge-in
	// latency aimed at; BargeInMinSpeechMs and BargeInPitchedSpeechMs the speech (of any kind,
	// of pitched speech) that barges in (input.go).
	ChunkPeriodMs, TargetBargeInLatencyMs, BargeInMinSpeechMs, BargeInPitchedSpeechMs int
	// MaxOutputLead bounds how far audio is sent ahead of real time.
	MaxOutputLead time.Duration
}

// targetBargeInLatencyMs is the barge-in latency the session aims at (the capabilities tell it).
const targetBargeInLatencyMs = 100

// view is the configuration part of the session's view: the config in force, its defaults
// resolved (serverMaxTokens is the server's reply limit, which "unlimited" means).
func (c *settings) view(serverMaxTokens int) SessionView {
	v := SessionView{Transcription: c.opts.Transcription, Model: c.cfg.Model, Instructions: c.cfg.Instructions,
		Input: InputView{Format: c.cfg.InputFormat, TurnDetection: c.cfg.TurnDetection.clone(),
			NoiseReduction: c.cfg.NoiseReduction, TranscriptLogprobs: c.cfg.TranscriptLogprobs},
		Output:          OutputView{Audio: c.cfg.WantAudio(), Format: c.cfg.OutputFormat, Voice: c.cfg.Voice, Speed: 1},
		Tools:           ToolsView{Functions: c.cfg.Tools, MCP: mcpServerViews(c.cfg.MCP), Choice: c.cfg.ToolChoice},
		MaxOutputTokens: c.cfg.MaxOutputTokens, Temperature: c.temperature(), Seed: c.cfg.Seed, Tracing: c.cfg.Tracing, Truncation: c.cfg.Truncation,
		IdleTimeout: c.cfg.IdleTimeout, OverlapPolicy: c.cfg.OverlapPolicy(), Duplex: c.opts.Duplex, AutoResponse: c.autoResponse()}
	if v.MaxOutputTokens <= 0 {
		v.MaxOutputTokens = serverMaxTokens
	}
	if c.cfg.Transcription {
		v.Input.Transcription = &InputTranscription{Model: "pocketsphinx", Language: "en"}
	}
	return v
}

// clone is a copy of td (nil stays nil), so a view never aliases the session's settings.
func (td *TurnDetection) clone() *TurnDetection {
	if td == nil {
		return nil
	}
	return td.copy()
}

// mcpServerViews is the session's MCP servers as the client is told of them.
func mcpServerViews(tools []MCPTool) []MCPServerView {
	out := make([]MCPServerView, len(tools))
	for i, t := range tools {
		out[i] = MCPServerView{Label: t.ServerLabel, URL: t.ServerURL, Description: t.ServerDescription,
			AllowedTools: t.AllowedTools, RequireApproval: t.RequireApproval}
	}
	return out
}

// sessionFacts is what the session object tells besides the configuration: the session's id,
// expiry, state and epoch, and its responses' turn state and turn.
type sessionFacts struct {
	id        string
	expiresAt time.Time
	state     string
	epoch     int
	responses *responses
}

// sessionView is the session as its client is told of it now (session.created, session.updated,
// a client secret's preview), under the configuration st and the server's mc.
func sessionView(st *settings, mc ManagerConfig, f sessionFacts) SessionView {
	v := st.view(mc.DefaultMaxOutputTokens)
	v.ID, v.ExpiresAt, v.State, v.TurnState, v.Epoch, v.Turn = f.id, f.expiresAt, f.state, f.responses.turnState, f.epoch, f.responses.turnID
	v.Capabilities = SessionCapabilities{BargeIn: true, AudioTruncate: true, Resume: mc.ResumeGrace > 0, FullDuplex: st.opts.Duplex,
		ChunkPeriodMs: frameMs, TargetBargeInLatencyMs: targetBargeInLatencyMs, BargeInMinSpeechMs: overlapMinSpeechMs,
		BargeInPitchedSpeechMs: overlapEarlySpeechMs, MaxOutputLead: mc.MaxOutputLead}
	return v
}
