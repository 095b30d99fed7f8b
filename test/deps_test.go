package test

import (
	"errors"
	"fmt"
	"os/exec"
	"slices"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"
)

const module = "github.com/omniserve/omniserve"

// allowed is, for every package of the module, the module packages it may import directly: the
// picture of architecture.md ("Data flow", "Packages and what each owns") as edges. A package
// missing here, or an import missing from its list, fails TestImportAllowList; an edge is added
// here on purpose, with a comment when it is not simply "the layer below". Test files are not
// checked: a package's tests may build a fixture from higher parts (internal/server).
var allowed = map[string][]string{
	// Layer 0: pure-Go leaves that import no module package. audio is the one home of sample
	// formats, resampling, WAV and the echo canceller (api, session, stage and speech share it);
	// oaierror writes OpenAI's error envelope; auth checks API keys for api and realtime.
	"internal/metrics":     {},
	"internal/audio":       {},
	"internal/auth":        {},
	"internal/oaierror":    {},
	"internal/protocol":    {"internal/jsonbound"}, // the realtime wire protocol as types: shared by session, transports and clients; tool schemas bounded as they are decoded
	"internal/testenv":     {},
	"internal/benchreport": {}, // the bench commands' report, progress bar and nearest-rank quantile
	"internal/api/console": {}, // the console page's embedded files
	// The client for remote MCP servers (realtime `type: "mcp"` tools) over the official Go
	// SDK, with the operator's URL allow-list: jsonbound its only module import, so the
	// session owns connections without the SDK reaching any other layer.
	"internal/mcpclient": {"internal/jsonbound"}, // a server's input schemas are bounded as a client's are
	// A real OTLP/HTTP trace receiver on loopback (OTLP protobuf only): the traced server of
	// `bench realtime` exports to it.
	"internal/otlpreceiver": {},
	// The size and depth bound every client JSON document (schemas, a minted session) is
	// checked against in Go before cgo or a recursive walk reads it.
	"internal/jsonbound": {},
	"configs":            {}, // the YAML configs, embedded (go:embed)
	// The server config: its defaults are the embedded configs/omni-cpu.yaml. Only
	// internal/server and cmd/ read it.
	"internal/config": {"configs"},

	// Layer 1: the only cgo packages. gpu (the model-runner bridge) is the only importer of the llama.cpp binding.
	"internal/gpu":    {},
	"internal/speech": {"internal/audio"},
	// The minted "ek_" client secrets: a key check over auth's, shared by api and realtime.
	"internal/clientsecret": {"internal/auth"},

	// A WebRTC realtime client (tests, the latency bench): a client, so no server code; the
	// client events it sends are the protocol's values, its Opus is speech's libopus binding
	// (cgo stays in the two cgo packages).
	"internal/rtcclient": {"internal/protocol", "internal/speech", "internal/audio"}, // audio: G.711 calls

	// The duplex vocabulary, declared once for every floor (architecture.md, "Target of the next
	// step"): the stream's options and turn detection, its outputs, tools and tool choice. The
	// session builds these values, requestclient passes them to stage as they are, and stage's
	// outputs come back up in them. audio: a transcript's word logprobs are audio's type.
	"internal/duplex": {"internal/audio"},

	// Layer 2: the stage pipeline over the engine and the speech libraries.
	"internal/stage": {"internal/audio", "internal/duplex", "internal/gpu", "internal/metrics", "internal/speech"},

	// Layer 3: the request client translates its own types to stage's and gpu's; nothing
	// above it sees either.
	"internal/requestclient": {"internal/duplex", "internal/gpu", "internal/metrics", "internal/stage"},

	// Layer 4: the duplex session speaks requestclient's types.
	// It speaks no wire: its commands and effects are its own types, which the dialects under
	// internal/realtime translate (issue 37; TestShape's figure c counts what would slip).
	"internal/session": {"internal/audio", "internal/duplex", "internal/metrics", "internal/requestclient",
		// MCP tools: the session owns its MCP connections (mcp.go) as it owns its engine stream.
		"internal/mcpclient",
		// The server-VAD barge-in detector (session/vad.go) runs in the session actor on the
		// audio as it is appended, before that audio is queued for the engine: barge-in must
		// cut a reply within ~one frame of the onset even while stage 0 is busy or its queue
		// is long, and the wire events input_audio_buffer.speech_started/stopped belong to the
		// session, not to a stage. Stage 0's own VAD endpointing is a different job (the speak
		// decision). speech, not stage or gpu, is the only layer below requestclient the
		// session reaches.
		"internal/speech"},

	// The connection core every realtime transport shares (frames in, events out, one writer,
	// one bounded queue, one close): it speaks the wire's types, never the session's.
	"internal/realtime/link": {"internal/protocol"},
	// A WebRTC call's media (RTP, pacer, Opus through speech's libopus binding, resampling to the
	// 48 kHz RTP clock); its own events go out as the core's outbound events.
	"internal/realtime/media": {"internal/audio", "internal/protocol", "internal/realtime/link", "internal/speech"},

	// Layer 5: the wire dialects. A dialect's translator turns the session's effects into its
	// server events and its client frames into the session's commands; the session imports
	// none of them (adding a dialect touches no session file).
	"internal/realtime/openai": {"internal/session", "internal/protocol",
		// A function tool is the duplex vocabulary's (one definition from the wire to the
		// engine); the session's commands carry it as is.
		"internal/duplex", "internal/requestclient"},

	// Layer 6: vllm-omni's native duplex dialect, a dialect over OpenAI's: OpenAI's translator
	// for the events the two share, plus vllm-omni's spellings; audio decodes the WAV files its
	// aliases append.
	"internal/realtime/vllm": {"internal/audio", "internal/protocol", "internal/realtime/openai", "internal/session"},

	// Layer 6: GPT-Live's dialect (/v1/live/sessions), a translator of its own over the session:
	// its events are its own (no OpenAI Realtime event is shared); audio resamples the talker's
	// 24 kHz to a 16 kHz session's format; a Responses task's function tools are the duplex
	// vocabulary's, as OpenAI's dialect hands them to the session.
	"internal/realtime/live": {"internal/audio", "internal/duplex", "internal/protocol", "internal/session"},

	// Layer 7: the WebSocket endpoint drives sessions only, through a dialect.
	"internal/realtime": {"internal/auth", "internal/clientsecret", "internal/oaierror", "internal/session",
		"internal/realtime/openai", "internal/realtime/vllm", "internal/realtime/live",
		// The connection core, and a call's media (RTP, Opus and the pacer live there).
		"internal/realtime/link", "internal/realtime/media",
		// The frames are the protocol's: the connection stamps and encodes the dialect's server
		// events (protocol.Encode) and reads session.resume's envelope.
		"internal/protocol"},

	// Layer 6: the HTTP surface speaks requestclient's types. The /v1/audio handlers declare
	// their own Transcriber and Synthesizer interfaces; internal/server hands them the pipeline.
	"internal/api": {"internal/api/console", "internal/audio", "internal/auth", "internal/clientsecret", "internal/duplex", "internal/oaierror", "internal/requestclient",
		"internal/jsonbound", // client schemas and a minted session are bounded before cgo or a recursive walk reads them
		"internal/protocol"}, // a minted session's known fields (unknown ones are refused)

	// Layer 8: the one place the parts are wired together from the config; only cmd/ imports it.
	"internal/server": {"internal/api", "internal/clientsecret", "internal/config", "internal/gpu", "internal/metrics", "internal/realtime",
		"internal/realtime/live", // the Live sessions' options (the KV plan's context, the test hooks)
		"internal/mcpclient",     // parses realtime.mcp_allowed_urls for the session manager
		"internal/duplex", "internal/requestclient", "internal/session", "internal/speech", "internal/stage", "internal/tracing"},
	// Traces are built from the closed records of internal/metrics, and nothing else.
	"internal/tracing": {"internal/metrics"},

	// The benchmarks: figures over benchreport (one quantile definition, no server code); the
	// outsider clients (chat, latency) use figures (and the wire protocol's types) only; the in-process measurements reach the
	// parts they measure. Only cmd/ imports them.
	"internal/bench":      {"internal/benchreport"},
	"internal/bench/chat": {"internal/bench"},
	// latency is an outsider client: it imports no server code; it reads the server's events as
	// the protocol's types, and makes its WebRTC calls with rtcclient (itself a client).
	"internal/bench/latency": {"internal/bench", "internal/benchreport", "internal/protocol", "internal/rtcclient"},
	"internal/bench/engine":  {"internal/bench", "internal/gpu"},
	// The pipeline without a session or WebSocket: the stage front end's cost per session.
	"internal/bench/frontend": {"internal/audio", "internal/bench", "internal/benchreport", "internal/duplex", "internal/metrics",
		"internal/speech", "internal/stage"},
	// Sessions over a timed Backend, and the turn statistics fed stage messages directly (the
	// Sink side of requestclient, which only the pipeline calls in the server).
	"internal/bench/realtime": {"internal/bench", "internal/benchreport", "internal/duplex", "internal/metrics", "internal/protocol", "internal/requestclient",
		"internal/session", "internal/stage",
		"internal/tracing",       // a tracer built as the server builds it, timed per turn
		"internal/otlpreceiver"}, // ... exporting to a receiver of its own

	// The CLI: builds the server (internal/server), runs the bench commands and the talk
	// client; api only for its shutdown cause (api.ErrShuttingDown).
	"cmd/omniserve": {"internal/api", "internal/bench", "internal/bench/chat", "internal/bench/engine",
		"internal/bench/frontend", "internal/bench/latency", "internal/bench/realtime", "internal/benchreport",
		"internal/config", "internal/server", "internal/talkclient",
		"internal/otlpreceiver", // bench realtime's traced server exports to its own receiver
		"internal/tracing"},     // the turn span's name, to count the turn spans that receiver got
	// The talk client reads the server's events as the protocol's types (the ones the server
	// encodes); it imports no server code.
	"internal/talkclient": {"internal/protocol"},
	// The end-to-end tests drive the built binary; their non-test files import nothing.
	"test": {},
}

// layer is each package's place in architecture.md's picture, used only to check that the
// allow-list itself points down (TestAllowListPointsDown): an edge added upward, or sideways
// inside one layer, is a change of architecture, not an allow-list entry.
var layer = map[string]int{
	"internal/metrics": 0, "internal/config": 1, "internal/audio": 0, "internal/auth": 0, "internal/oaierror": 0, "internal/protocol": 1,
	"internal/testenv": 0, "internal/talkclient": 2, "internal/benchreport": 0, "internal/api/console": 0, "configs": 0,
	"internal/mcpclient": 1, "internal/otlpreceiver": 0, "internal/jsonbound": 0,
	"internal/gpu": 1, "internal/speech": 1, "internal/duplex": 1, "internal/clientsecret": 1, "internal/tracing": 1,
	"internal/stage": 2, "internal/rtcclient": 2,
	"internal/requestclient":   3,
	"internal/session":         4,
	"internal/realtime/openai": 5, "internal/realtime/live": 5,
	"internal/realtime/vllm": 6,
	"internal/realtime":      7, "internal/realtime/link": 2, "internal/realtime/media": 3,
	"internal/api":    6,
	"internal/server": 8,
	"internal/bench":  1, "internal/bench/chat": 2, "internal/bench/latency": 3, "internal/bench/engine": 2,
	"internal/bench/frontend": 3, "internal/bench/realtime": 5,
	"cmd/omniserve": 9, "test": 9,
}

// TestImportAllowList checks every direct import of every package of the module against
// allowed, in one `go list` call, and logs what each package imports (go test -v).
func TestImportAllowList(t *testing.T) {
	t.Parallel()
	lines := goList(t, repoRoot(t), "-f", "{{.ImportPath}}{{range .Imports}} {{.}}{{end}}", "./...")
	require.NotEmpty(t, lines)
	for _, l := range lines {
		f := strings.Fields(l)
		imps := strings.Join(moduleImports(f[1:]), " ")
		if imps == "" {
			imps = "(no module package)"
		}
		t.Logf("%s imports: %s", rel(f[0]), imps)
	}
	for _, v := range importViolations(lines) {
		t.Error(v)
	}
}

// TestAllowListPointsDown checks the allow-list against the layers: every allowed edge points to
// a lower layer, and every package has a layer.
func TestAllowListPointsDown(t *testing.T) {
	t.Parallel()
	for pkg, deps := range allowed {
		lp, ok := layer[pkg]
		require.True(t, ok, "%s has no layer", pkg)
		for _, d := range deps {
			ld, ok := layer[d]
			require.True(t, ok, "%s (allowed for %s) has no layer", d, pkg)
			require.Less(t, ld, lp, "%s (layer %d) may import %s (layer %d): the allow-list must point down", pkg, lp, d, ld)
		}
	}
	require.Len(t, layer, len(allowed), "every layer entry has an allow-list entry")
}

// TestImportViolationsDetects checks the checker itself on made-up import lists.
func TestImportViolationsDetects(t *testing.T) {
	t.Parallel()
	m := module + "/"
	tests := []struct {
		name string
		line string
		want string // "" = no violation
	}{
		{"allowed edges", m + "internal/stage " + m + "internal/gpu " + m + "internal/metrics fmt", ""},
		{"cmd may import api", m + "cmd/omniserve " + m + "internal/api " + m + "internal/config", ""},
		{"standard library and modules are not checked", m + "internal/metrics fmt go.uber.org/zap", ""},
		{"up is not", m + "internal/gpu " + m + "internal/stage", "internal/gpu imports internal/stage"},
		{"sideways is not", m + "internal/gpu " + m + "internal/speech", "internal/gpu imports internal/speech"},
		{"api skips to stage", m + "internal/api " + m + "internal/requestclient " + m + "internal/stage",
			"internal/api imports internal/stage, which is not in its allow-list"},
		{"api skips to engine", m + "internal/api " + m + "internal/gpu", "internal/api imports internal/gpu"},
		{"api may not use speech", m + "internal/api " + m + "internal/speech", "internal/api imports internal/speech"},
		{"session skips to stage", m + "internal/session " + m + "internal/stage", "internal/session imports internal/stage"},
		{"session keeps its VAD", m + "internal/session " + m + "internal/speech " + m + "internal/requestclient", ""},
		{"metrics imports nothing internal", m + "internal/metrics " + m + "internal/gpu", "internal/metrics imports internal/gpu"},
		{"nothing imports api", m + "internal/realtime " + m + "internal/api", "internal/realtime imports internal/api"},
		{"nothing imports cmd", m + "internal/stage " + m + "cmd/omniserve", "internal/stage imports cmd/omniserve"},
		{"config is the server's", m + "internal/session " + m + "internal/config", "internal/session imports internal/config"},
		{"server wires api and config", m + "internal/server " + m + "internal/api " + m + "internal/config " + m + "internal/realtime", ""},
		{"server is cmd's", m + "internal/api " + m + "internal/server", "internal/api imports internal/server"},
		{"benchmarks are cmd's", m + "internal/server " + m + "internal/bench/chat", "internal/server imports internal/bench/chat"},
		{"the latency client uses figures only", m + "internal/bench/latency " + m + "internal/bench " + m + "internal/session", "internal/bench/latency imports internal/session"},
		{"an unlisted package", m + "internal/newpkg " + m + "internal/metrics", "internal/newpkg is not in the allow-list"},
		{"the message lists what it imports", m + "internal/api " + m + "internal/stage " + m + "internal/oaierror",
			"(it imports: internal/oaierror internal/stage; allowed: internal/api/console internal/audio"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			got := importViolations([]string{tt.line})
			if tt.want == "" {
				require.Empty(t, got)
				return
			}
			require.NotEmpty(t, got)
			require.Contains(t, strings.Join(got, "\n"), tt.want)
		})
	}
}

// importViolations reads lines of "pkg import import ..." and lists every module import that
// the package's allow-list does not name, and every package without an allow-list.
func importViolations(lines []string) []string {
	var out []string
	for _, l := range lines {
		f := strings.Fields(l)
		pkg := rel(f[0])
		imps := moduleImports(f[1:])
		have := fmt.Sprintf("(it imports: %s; allowed: %s)", strings.Join(imps, " "), strings.Join(allowed[pkg], " "))
		ok, listed := allowed[pkg]
		if !listed {
			out = append(out, fmt.Sprintf("%s is not in the allow-list of test/deps_test.go: add it with the packages it may import, as architecture.md places it %s", pkg, have))
			continue
		}
		for _, d := range imps {
			if !slices.Contains(ok, d) {
				out = append(out, fmt.Sprintf("%s imports %s, which is not in its allow-list: imports follow architecture.md's picture %s", pkg, d, have))
			}
		}
	}
	return out
}

// rel is a module package's path relative to the module ("" for the root).
func rel(pkg string) string { return strings.TrimPrefix(strings.TrimPrefix(pkg, module), "/") }

// moduleImports keeps the module's own packages of imps, relative and sorted.
func moduleImports(imps []string) []string {
	var out []string
	for _, d := range imps {
		if strings.HasPrefix(d, module+"/") {
			out = append(out, rel(d))
		}
	}
	slices.Sort(out)
	return out
}

// TestCgoConfinement checks that only internal/gpu imports the llama.cpp binding and only gpu
// and speech use cgo.
func TestCgoConfinement(t *testing.T) {
	t.Parallel()
	root := repoRoot(t)
	lines := goList(t, root, "-f", "{{.ImportPath}}|{{len .CgoFiles}}|{{join .Imports \",\"}}", "./...")
	for _, l := range lines {
		f := strings.SplitN(l, "|", 3)
		require.Len(t, f, 3, l)
		rel := strings.TrimPrefix(strings.TrimPrefix(f[0], module), "/")
		if f[1] != "0" && rel != "internal/gpu" && rel != "internal/speech" {
			t.Errorf("%s has cgo files: only internal/gpu and internal/speech may", rel)
		}
		for _, imp := range strings.Split(f[2], ",") {
			if strings.HasPrefix(imp, "github.com/ollama/ollama/llama") && rel != "internal/gpu" {
				t.Errorf("%s imports %s: only internal/gpu may", rel, imp)
			}
		}
	}
}

func goList(t *testing.T, dir string, args ...string) []string {
	t.Helper()
	cmd := exec.Command("go", append([]string{"list", "-e"}, args...)...)
	cmd.Dir = dir
	out, err := cmd.Output()
	var stderr string
	var ee *exec.ExitError
	if errors.As(err, &ee) {
		stderr = string(ee.Stderr)
	}
	require.NoError(t, err, stderr)
	var lines []string
	for _, l := range strings.Split(string(out), "\n") {
		if l = strings.TrimSpace(l); l != "" {
			lines = append(lines, l)
		}
	}
	return lines
}
