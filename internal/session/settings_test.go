package session

import (
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/omniserve/omniserve/internal/duplex"
)

// servedNames is a modelNames that serves the listed names and records what it was asked.
type servedNames struct {
	names []string
	asked []string
}

func (n *servedNames) AcceptsModel(name string) bool {
	n.asked = append(n.asked, name)
	for _, x := range n.names {
		if x == name {
			return true
		}
	}
	return false
}

func (n *servedNames) ServedModels() []string { return n.names }

func TestSettingsNext(t *testing.T) {
	str := func(s string) *string { return &s }
	f64 := func(f float64) *float64 { return &f }
	tests := []struct {
		name    string
		opts    Options
		voiced  bool // assistant audio was sent
		named   bool // the model was named before
		patch   ConfigPatch
		code    string // the refusal's code; "" = accepted
		param   string
		model   string        // the model after an accepted patch
		idle    time.Duration // the idle timeout after an accepted patch; 0 = not checked
		wasName bool          // modelNamed afterwards
	}{
		{name: "first served name is taken", patch: ConfigPatch{Model: str("gpt-realtime")}, model: "gpt-realtime", wasName: true},
		{name: "a later served name changes nothing", named: true, patch: ConfigPatch{Model: str("gpt-realtime")}, model: "omni", wasName: true},
		{name: "unserved model", patch: ConfigPatch{Model: str("nope")}, code: "model_not_found", param: "session.model"},
		{name: "voice before audio", patch: ConfigPatch{Voice: str("ash")}, model: "omni"},
		{name: "voice after audio", voiced: true, patch: ConfigPatch{Voice: str("ash")}, code: "cannot_update_voice", param: "session.audio.output.voice"},
		{name: "same voice after audio", voiced: true, patch: ConfigPatch{Voice: str("alloy")}, model: "omni"},
		{name: "idle timeout capped", patch: ConfigPatch{IdleTimeoutS: f64(7200)}, model: "omni", idle: time.Hour},
		{name: "idle timeout kept", patch: ConfigPatch{IdleTimeoutS: f64(60)}, model: "omni", idle: time.Minute},
		{name: "patch field refused", patch: ConfigPatch{IdleTimeoutS: f64(-1)}, code: "invalid_value", param: "session.idle_timeout_s"},
		{name: "conversation cannot become transcription", patch: ConfigPatch{Type: str("transcription")}, code: "invalid_value", param: "session.type"},
		{name: "transcription: no instructions", opts: Options{Transcription: true}, patch: ConfigPatch{Instructions: str("x")}, code: "unknown_parameter", param: "session.instructions"},
		{name: "transcription: stays one", opts: Options{Transcription: true}, patch: ConfigPatch{Type: str("realtime")}, code: "invalid_value", param: "session.type"},
		{name: "transcription: cannot turn it off", opts: Options{Transcription: true}, patch: ConfigPatch{TranscriptionSet: true}, code: "invalid_value", param: "session.audio.input.transcription"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			c := newSettings(tc.opts, ManagerConfig{ModelName: "omni", IdleTimeout: 5 * time.Minute, TurnDetection: defaultTurnDetection()})
			c.assistantAudio = tc.voiced
			c.modelNamed = tc.named
			before := c.cfg
			models := &servedNames{names: []string{"omni", "gpt-realtime"}}
			next, err := c.next(tc.patch, models, time.Hour)
			require.Equal(t, before, c.cfg, "next changes no configuration")
			if tc.code != "" {
				fe, ok := err.(*FieldError)
				require.True(t, ok, "%v", err)
				require.Equal(t, tc.code, fe.Code)
				require.Equal(t, tc.param, fe.Param)
				return
			}
			require.NoError(t, err)
			require.Equal(t, tc.model, next.Model)
			require.Equal(t, tc.wasName, c.modelNamed)
			if tc.idle != 0 {
				require.Equal(t, tc.idle, next.IdleTimeout)
			}
		})
	}
}

func TestSettingsDialect(t *testing.T) {
	tests := []struct {
		name     string
		opts     Options
		first    Command
		wantBeta bool // opts.Beta afterwards
		detected bool // detectDialect reported a switch
	}{
		{"GA update", Options{}, &UpdateSession{}, false, false},
		{"beta-spelled update", Options{}, &UpdateSession{BetaSpelling: true}, true, true},
		{"other first event", Options{}, &CommitInput{}, false, false},
		{"header chose beta", Options{Beta: true}, &UpdateSession{}, true, false},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			c := newSettings(tc.opts, ManagerConfig{TurnDetection: defaultTurnDetection()})
			require.Equal(t, tc.detected, c.detectDialect(tc.first))
			require.Equal(t, tc.wantBeta, c.opts.Beta)
			require.True(t, c.dialectFixed)
			// Fixed: a later beta-spelled update changes nothing.
			require.False(t, c.detectDialect(&UpdateSession{BetaSpelling: true}))
			require.Equal(t, tc.wantBeta, c.opts.Beta)
		})
	}
}

func TestSettingsDefaultsAndFlags(t *testing.T) {
	td := defaultTurnDetection()
	tests := []struct {
		name       string
		opts       Options
		modalities []string
		auto       bool
		legacy     bool // legacyTranscription(false)
	}{
		{"GA", Options{}, []string{"audio"}, false, false},
		{"beta", Options{Beta: true}, []string{"text", "audio"}, false, false},
		{"duplex auto_response", Options{Duplex: true}, []string{"audio"}, true, false},
		{"duplex transcription has no responses", Options{Duplex: true, Transcription: true}, []string{"audio"}, false, false},
		{"beta transcription", Options{Beta: true, Transcription: true}, []string{"text", "audio"}, false, true},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			c := newSettings(tc.opts, ManagerConfig{ModelName: "omni", TurnDetection: td})
			require.Equal(t, tc.modalities, c.cfg.Modalities)
			require.Equal(t, "omni", c.cfg.Model)
			require.NotSame(t, td, c.cfg.TurnDetection, "the server's defaults are copied")
			require.Equal(t, tc.auto, c.autoResponse())
			require.Equal(t, tc.legacy, c.legacyTranscription(false))
			require.Equal(t, 0.8, c.temperature())
			v := c.view(0)
			require.Equal(t, &InputTranscription{Model: "pocketsphinx", Language: "en"}, v.Input.Transcription)
			require.Empty(t, v.Input.NoiseReduction)
			require.Equal(t, 0.8, v.Temperature)
		})
	}
}

// logprobsBackend is a Backend that says whether its ASR gives word logprobs.
type logprobsBackend struct {
	Backend
	logprobs bool
}

func (b logprobsBackend) SupportsTranscriptLogprobs() bool { return b.logprobs }

// The transcript predicates follow the session kind (opts) and the configuration in force.
func TestSettingsTranscriptPredicates(t *testing.T) {
	vad := &TurnDetection{TurnDetection: duplex.TurnDetection{Type: "server_vad"}, CreateResponse: true}
	tests := []struct {
		name                          string
		opts                          Options
		cfg                           Config
		transcripts, deltas, logprobs bool
		include                       []string // nil = null
	}{
		{name: "conversation, transcription off", cfg: Config{}},
		{name: "conversation, transcription on", cfg: Config{Transcription: true},
			transcripts: true, deltas: true},
		{name: "conversation, logprobs asked without transcription", cfg: Config{TranscriptLogprobs: true},
			include: []string{"item.input_audio_transcription.logprobs"}},
		{name: "conversation, transcription and logprobs", cfg: Config{Transcription: true, TranscriptLogprobs: true},
			transcripts: true, deltas: true, logprobs: true, include: []string{"item.input_audio_transcription.logprobs"}},
		{name: "duplex auto-response: the stage ends turns, no deltas", opts: Options{Duplex: true},
			cfg: Config{Transcription: true, TurnDetection: vad}, transcripts: true},
		{name: "transcription session always transcribes", opts: Options{Transcription: true},
			cfg: Config{}, transcripts: true, deltas: true},
		{name: "transcription session with logprobs", opts: Options{Transcription: true, Duplex: true},
			cfg: Config{TranscriptLogprobs: true, TurnDetection: vad}, transcripts: true, deltas: true, logprobs: true,
			include: []string{"item.input_audio_transcription.logprobs"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			c := &settings{cfg: tt.cfg, opts: tt.opts}
			require.Equal(t, tt.transcripts, c.sendsTranscripts(), "sendsTranscripts")
			require.Equal(t, tt.deltas, c.wantsDeltas(), "wantsDeltas")
			require.Equal(t, tt.logprobs, c.wantsLogprobs(), "wantsLogprobs")
			require.Equal(t, tt.include != nil, c.view(0).Input.TranscriptLogprobs, "the session tells it includes logprobs")
		})
	}
}

// include logprobs is refused, with its param, where the recognizer gives none.
func TestTranscriptLogprobsError(t *testing.T) {
	tests := []struct {
		name    string
		backend Backend
		next    Config
		refused bool
	}{
		{name: "not asked", backend: logprobsBackend{}, next: Config{}},
		{name: "local recognizer", backend: logprobsBackend{logprobs: true}, next: Config{TranscriptLogprobs: true}},
		{name: "remote ASR", backend: logprobsBackend{}, next: Config{TranscriptLogprobs: true}, refused: true},
		{name: "backend without the capability", backend: nil, next: Config{TranscriptLogprobs: true}, refused: true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			fe := transcriptLogprobsError(tt.backend, tt.next)
			if !tt.refused {
				require.Nil(t, fe)
				return
			}
			require.NotNil(t, fe)
			require.Equal(t, "unsupported_value", fe.Code)
			require.Equal(t, "session.include", fe.Param)
		})
	}
}
