package test

import (
	"bytes"
	"context"
	"encoding/base64"
	"encoding/hex"
	"encoding/json"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/coder/websocket"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	tracepb "go.opentelemetry.io/proto/otlp/trace/v1"

	"github.com/omniserve/omniserve/internal/otlpreceiver"
)

// startOTLPReceiver starts a real OTLP/HTTP trace receiver on loopback (internal/otlpreceiver:
// it decodes what the server exports with the OTLP protobuf definitions), closed at the end.
func startOTLPReceiver(t *testing.T) *otlpreceiver.Receiver {
	t.Helper()
	r, err := otlpreceiver.Start(1 << 16)
	require.NoError(t, err)
	t.Cleanup(func() { _ = r.Close() })
	return r
}

func spanAttr(s *tracepb.Span, key string) (string, float64) {
	for _, a := range s.Attributes {
		if a.Key == key {
			return a.Value.GetStringValue(), a.Value.GetDoubleValue()
		}
	}
	return "", 0
}

// TestTracesFromTheTurnRecord: with OTEL_EXPORTER_OTLP_ENDPOINT set, a chat request sent with
// a W3C traceparent and a realtime session opened with one export span trees in those traces
// to a real OTLP receiver, and each stage span lasts exactly its --log-stats figure.
func TestTracesFromTheTurnRecord(t *testing.T) {
	raw, err := os.ReadFile("/usr/share/pocketsphinx/test/data/goforward.raw")
	require.NoError(t, err, "install pocketsphinx-testdata")
	rec := startOTLPReceiver(t)
	s := startBinaryEnv(t, []string{"OTEL_EXPORTER_OTLP_ENDPOINT=" + rec.Endpoint(), "OTEL_SERVICE_NAME=omniserve-test"},
		"--config", "configs/omni-cpu.yaml", "--model", "dummy:tiny", "--log-stats",
		"--cache-dir", filepath.Join(t.TempDir(), "cache"))
	const chatTrace = "4bf92f3577b34da6a3ce929d0e0e4736"
	const rtTrace = "0af7651916cd43dd8448eb211c80319c"

	// A chat request continuing the caller's trace.
	body, _ := json.Marshal(map[string]any{"model": "dummy:tiny", "max_tokens": 8,
		"messages": []any{map[string]any{"role": "user", "content": "hello"}}})
	req, _ := http.NewRequestWithContext(context.Background(), http.MethodPost, "http://"+s.addr+"/v1/chat/completions", bytes.NewReader(body))
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("traceparent", "00-"+chatTrace+"-00f067aa0ba902b7-01")
	resp, err := http.DefaultClient.Do(req)
	require.NoError(t, err)
	_, _ = io.Copy(io.Discard, resp.Body)
	resp.Body.Close()
	require.Equal(t, 200, resp.StatusCode)

	// A realtime turn in a session opened with a traceparent.
	c := dialResumeHeader(t, "ws://"+s.addr+"/v1/realtime", http.Header{"Traceparent": {"00-" + rtTrace + "-b7ad6b7169203331-01"}})
	require.Equal(t, "session.created", c.next(t, 10*time.Second)["type"])
	c.send(t, map[string]any{"type": "session.update", "session": map[string]any{"type": "realtime", "max_output_tokens": 8,
		"tracing": map[string]any{"workflow_name": "e2e-workflow", "group_id": "group-1", "metadata": map[string]any{"user": "u7"}},
		"audio":   map[string]any{"input": map[string]any{"format": map[string]any{"type": "audio/pcm", "rate": 16000}, "turn_detection": nil}}}})
	// turn speaks, commits and asks for a response; interrupt, when set, is sent once the
	// response's audio flows. It returns whether interrupt was sent.
	turn := func(resp map[string]any, interrupt string) bool {
		for i := 0; i < len(raw); i += 3200 {
			c.send(t, map[string]any{"type": "input_audio_buffer.append", "audio": base64.StdEncoding.EncodeToString(raw[i:min(i+3200, len(raw))])})
		}
		c.send(t, map[string]any{"type": "input_audio_buffer.commit"})
		c.send(t, map[string]any{"type": "response.create", "response": resp})
		sent := false
		for {
			ev := c.next(t, 60*time.Second)
			require.NotEqual(t, "error", ev["type"], "%v", ev)
			if ev["type"] == "response.output_audio.delta" && interrupt != "" && !sent {
				c.send(t, map[string]any{"type": interrupt})
				sent = true
			}
			if ev["type"] == "response.done" {
				return sent
			}
		}
	}
	turn(map[string]any{}, "")
	// A second turn, cancelled once its audio flows: an interrupted turn in the same trace.
	require.True(t, turn(map[string]any{"max_output_tokens": 200}, "response.cancel"), "the second turn had audio to cancel")
	// A third turn, barged in on once its audio flows.
	require.True(t, turn(map[string]any{"max_output_tokens": 200}, "barge_in"), "the third turn had audio to barge in on")
	// Closing the session ends the session span.
	require.NoError(t, c.ws.Close(websocket.StatusNormalClosure, "bye"))

	byTrace := func(tid string) []*tracepb.Span {
		var out []*tracepb.Span
		for _, sp := range rec.Spans() {
			if hex.EncodeToString(sp.TraceId) == tid {
				out = append(out, sp)
			}
		}
		return out
	}
	sessionSpan := func() *tracepb.Span {
		for _, sp := range byTrace(rtTrace) {
			if sp.Name == "e2e-workflow" {
				return sp
			}
		}
		return nil
	}
	turnSpans := func() int {
		n := 0
		for _, sp := range byTrace(rtTrace) {
			if sp.Name == "realtime.turn" {
				n++
			}
		}
		return n
	}
	if !assert.Eventually(t, func() bool { return len(byTrace(chatTrace)) >= 2 && sessionSpan() != nil && turnSpans() >= 3 }, 20*time.Second, 100*time.Millisecond,
		"spans of both traces reach the receiver") {
		for _, sp := range rec.Spans() {
			rid, _ := spanAttr(sp, "omniserve.request_id")
			t.Logf("span %s trace %x parent %x rid %s", sp.Name, sp.TraceId, sp.ParentSpanId, rid)
		}
		t.FailNow()
	}
	records := statsRecords(s.logs.String())
	for _, tc := range []struct{ trace, root string }{{chatTrace, "chat.completion"}, {rtTrace, "realtime.turn"}} {
		spans := byTrace(tc.trace)
		var root *tracepb.Span
		for _, sp := range spans {
			if reason, _ := spanAttr(sp, "omniserve.finished_reason"); sp.Name == tc.root && reason != "cancel" {
				root = sp
			}
		}
		require.NotNil(t, root, "%s in trace %s", tc.root, tc.trace)
		rid, _ := spanAttr(root, "omniserve.request_id")
		require.NotEmpty(t, rid)
		stages := 0
		for _, sp := range spans {
			if sp == root || !bytes.Equal(sp.ParentSpanId, root.SpanId) {
				continue
			}
			_, gen := spanAttr(sp, "omniserve.stage_gen_time_ms")
			if gen == 0 {
				continue
			}
			stages++
			durMs := float64(sp.EndTimeUnixNano-sp.StartTimeUnixNano) / 1e6
			require.InDelta(t, gen, durMs, 0.001, "%s: the span lasts its table figure", sp.Name)
			// The same figure is in that request's StageRequestStats record.
			found := false
			for _, r := range records {
				if (r.RequestID != rid && r.ResponseID != rid) || r.Msg != "StageRequestStats" {
					continue
				}
				for _, st := range r.Stages {
					if v, ok := st["stage_gen_time_ms"].(float64); ok && (v-gen) < 0.001 && (gen-v) < 0.001 {
						found = true
					}
				}
			}
			require.True(t, found, "%s: stage_gen_time_ms %.3f is the --log-stats figure of %s", sp.Name, gen, rid)
		}
		require.Positive(t, stages, "stage spans under %s", tc.root)
	}

	// The span tree of the realtime trace: the upgrade's traceparent → the session span (named
	// by session.tracing's workflow_name, tagged with its group_id and metadata, ended with the
	// close reason) → a span per turn, the cancelled one marked interrupted.
	sess := sessionSpan()
	require.Equal(t, "b7ad6b7169203331", hex.EncodeToString(sess.ParentSpanId), "the session span continues the upgrade's traceparent")
	for k, want := range map[string]string{"omniserve.workflow_name": "e2e-workflow", "omniserve.group_id": "group-1", "omniserve.metadata.user": "u7"} {
		got, _ := spanAttr(sess, k)
		require.Equal(t, want, got, k)
	}
	closeReason, _ := spanAttr(sess, "omniserve.close_reason")
	require.NotEmpty(t, closeReason)
	reasons := map[string]int{}
	for _, sp := range byTrace(rtTrace) {
		if sp.Name != "realtime.turn" {
			continue
		}
		require.Equal(t, sess.SpanId, sp.ParentSpanId, "a turn span is the session span's child")
		reason, _ := spanAttr(sp, "omniserve.finished_reason")
		reasons[reason]++
		if reason == "cancel" || reason == "barge_in" {
			interrupted := false
			for _, a := range sp.Attributes {
				if a.Key == "omniserve.interrupted" && a.Value.GetBoolValue() {
					interrupted = true
				}
			}
			require.True(t, interrupted, "the %s turn is marked", reason)
			require.NotEmpty(t, sp.Events, "the %s turn has its interrupted event", reason)
			require.Equal(t, "interrupted", sp.Events[0].Name)
		}
	}
	require.Equal(t, 1, reasons["cancel"], "the cancelled turn under the session: %v", reasons)
	require.Equal(t, 1, reasons["barge_in"], "the barged-in turn under the session: %v", reasons)
	require.Len(t, reasons, 3, "a done, a cancelled and a barged-in turn under the session: %v", reasons)

	// Each turn's input and output.audio children sit where its RequestE2EStats record puts
	// them: input = t0 (the turn span's start) → input_ms; output.audio ends delivery_total_ms
	// after t0.
	placed := map[string]int{}
	for _, turn := range byTrace(rtTrace) {
		if turn.Name != "realtime.turn" {
			continue
		}
		rid, _ := spanAttr(turn, "omniserve.request_id")
		var e2e *statsRecord
		for _, r := range records {
			if r.Msg == "RequestE2EStats" && (r.RequestID == rid || r.ResponseID == rid) {
				e2e = &r
			}
		}
		require.NotNil(t, e2e, "the RequestE2EStats record of %s", rid)
		for _, sp := range byTrace(rtTrace) {
			if !bytes.Equal(sp.ParentSpanId, turn.SpanId) {
				continue
			}
			fromT0 := func(ns uint64) float64 { return float64(ns-turn.StartTimeUnixNano) / 1e6 }
			switch sp.Name {
			case "input":
				require.Zero(t, fromT0(sp.StartTimeUnixNano), "input starts at t0")
				require.InDelta(t, e2e.InputMs, fromT0(sp.EndTimeUnixNano), 0.001, "%s: input lasts input_ms", rid)
				placed[sp.Name]++
			case "output.audio":
				require.InDelta(t, e2e.DeliveryTotalMs, fromT0(sp.EndTimeUnixNano), 0.001, "%s: output.audio ends at delivery_total_ms", rid)
				require.Less(t, fromT0(sp.StartTimeUnixNano), fromT0(sp.EndTimeUnixNano))
				placed[sp.Name]++
			}
		}
	}
	require.Equal(t, 3, placed["input"], "every turn had input: %v", placed)
	require.Positive(t, placed["output.audio"], "the done turn played audio: %v", placed)

	// Exemplars: scraped as OpenMetrics, the e2e latency histogram carries, per kind, the trace
	// id of the last traced record and its value: the e2e figure of that record's span.
	e2eOf := map[string][]float64{} // trace id → e2e seconds of its chat / turn spans
	for _, sp := range rec.Spans() {
		if sp.Name == "chat.completion" || sp.Name == "realtime.turn" {
			_, e2e := spanAttr(sp, "omniserve.e2e_total_ms")
			e2eOf[hex.EncodeToString(sp.TraceId)] = append(e2eOf[hex.EncodeToString(sp.TraceId)], e2e/1000)
		}
	}
	ex := scrapeExemplars(t, "http://"+s.addr+"/metrics", "omniserve_request_e2e_latency_seconds_bucket")
	for kind, trace := range map[string]string{"chat": chatTrace, "duplex": rtTrace} {
		got, ok := ex[kind]
		require.True(t, ok, "an exemplar on the %s e2e histogram: %v", kind, ex)
		require.Equal(t, trace, got.traceID, kind)
		matched := false
		for _, v := range e2eOf[trace] {
			matched = matched || (v-got.value < 1e-9 && got.value-v < 1e-9)
		}
		require.True(t, matched, "%s exemplar value %v is the e2e figure of a span of its trace (%v)", kind, got.value, e2eOf[trace])
	}
}

type exemplar struct {
	traceID string
	value   float64
}

var exemplarLine = regexp.MustCompile(`^(\w+)\{([^}]*)\} \S+ # \{trace_id="([0-9a-f]{32})"\} (\S+)`)

// scrapeExemplars GETs url as OpenMetrics and returns the exemplars of family's buckets by their
// kind label.
func scrapeExemplars(t *testing.T, url, family string) map[string]exemplar {
	t.Helper()
	req, err := http.NewRequestWithContext(context.Background(), http.MethodGet, url, nil)
	require.NoError(t, err)
	req.Header.Set("Accept", "application/openmetrics-text; version=1.0.0")
	resp, err := http.DefaultClient.Do(req)
	require.NoError(t, err)
	defer resp.Body.Close()
	require.Equal(t, 200, resp.StatusCode)
	require.Contains(t, resp.Header.Get("Content-Type"), "application/openmetrics-text")
	body, err := io.ReadAll(resp.Body)
	require.NoError(t, err)
	out := map[string]exemplar{}
	for _, line := range strings.Split(string(body), "\n") {
		m := exemplarLine.FindStringSubmatch(line)
		if m == nil || m[1] != family {
			continue
		}
		kind := regexp.MustCompile(`kind="(\w+)"`).FindStringSubmatch(m[2])
		require.NotNil(t, kind, line)
		v, err := strconv.ParseFloat(m[4], 64)
		require.NoError(t, err, line)
		out[kind[1]] = exemplar{traceID: m[3], value: v}
	}
	return out
}

// TestTraceparentAcrossRemoteStage: a front omniserve whose thinker is remote (a back omniserve
// on loopback) sends a chat request's traceparent on to the back, so both servers' chat spans
// land in the caller's trace at the same OTLP receiver.
func TestTraceparentAcrossRemoteStage(t *testing.T) {
	rec := startOTLPReceiver(t)
	env := []string{"OTEL_EXPORTER_OTLP_ENDPOINT=" + rec.Endpoint()}
	cache := filepath.Join(t.TempDir(), "cache")
	back := startBinaryEnv(t, env, "--config", "configs/omni-cpu.yaml", "--model", "dummy:tiny", "--log-stats", "--cache-dir", cache)
	cfg := filepath.Join(t.TempDir(), "front.yaml")
	require.NoError(t, os.WriteFile(cfg, []byte("pipeline:\n  remote:\n    thinker: {base_url: \"http://"+back.addr+"/v1\", model: \"dummy:tiny\"}\n"), 0o600))
	front := startBinaryEnv(t, env, "--config", cfg, "--model", "dummy:tiny", "--log-stats", "--cache-dir", cache)

	const tid = "5bf92f3577b34da6a3ce929d0e0e4737"
	body, _ := json.Marshal(map[string]any{"model": "dummy:tiny", "max_tokens": 8,
		"messages": []any{map[string]any{"role": "user", "content": "hello"}}})
	req, _ := http.NewRequestWithContext(context.Background(), http.MethodPost, "http://"+front.addr+"/v1/chat/completions", bytes.NewReader(body))
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("traceparent", "00-"+tid+"-00f067aa0ba902b7-01")
	resp, err := http.DefaultClient.Do(req)
	require.NoError(t, err)
	_, _ = io.Copy(io.Discard, resp.Body)
	resp.Body.Close()
	require.Equal(t, 200, resp.StatusCode)

	chatSpans := func() map[string]bool {
		ids := map[string]bool{}
		for _, sp := range rec.Spans() {
			if sp.Name == "chat.completion" && hex.EncodeToString(sp.TraceId) == tid {
				rid, _ := spanAttr(sp, "omniserve.request_id")
				ids[rid] = true
			}
		}
		return ids
	}
	if !assert.Eventually(t, func() bool { return len(chatSpans()) == 2 }, 20*time.Second, 100*time.Millisecond,
		"the front's and the back's chat.completion spans in the caller's trace: %v", chatSpans()) {
		for _, sp := range rec.Spans() {
			rid, _ := spanAttr(sp, "omniserve.request_id")
			t.Logf("span %s trace %x parent %x rid %s", sp.Name, sp.TraceId, sp.ParentSpanId, rid)
		}
		t.Logf("front:\n%s\nback:\n%s", tail(front.logs.String(), 2000), tail(back.logs.String(), 2000))
		t.FailNow()
	}

	// A realtime turn through the front: the back's request joins the session's trace.
	raw, err := os.ReadFile("/usr/share/pocketsphinx/test/data/goforward.raw")
	require.NoError(t, err, "install pocketsphinx-testdata")
	const rtTrace = "6af7651916cd43dd8448eb211c80319d"
	c := dialResumeHeader(t, "ws://"+front.addr+"/v1/realtime", http.Header{"Traceparent": {"00-" + rtTrace + "-b7ad6b7169203331-01"}})
	require.Equal(t, "session.created", c.next(t, 10*time.Second)["type"])
	c.send(t, map[string]any{"type": "session.update", "session": map[string]any{"type": "realtime", "max_output_tokens": 8,
		"audio": map[string]any{"input": map[string]any{"format": map[string]any{"type": "audio/pcm", "rate": 16000}, "turn_detection": nil}}}})
	for i := 0; i < len(raw); i += 3200 {
		c.send(t, map[string]any{"type": "input_audio_buffer.append", "audio": base64.StdEncoding.EncodeToString(raw[i:min(i+3200, len(raw))])})
	}
	c.send(t, map[string]any{"type": "input_audio_buffer.commit"})
	c.send(t, map[string]any{"type": "response.create"})
	for {
		ev := c.next(t, 60*time.Second)
		require.NotEqual(t, "error", ev["type"], "%v", ev)
		if ev["type"] == "response.done" {
			break
		}
	}
	require.Eventually(t, func() bool {
		for _, sp := range rec.Spans() {
			if sp.Name == "chat.completion" && hex.EncodeToString(sp.TraceId) == rtTrace {
				return true
			}
		}
		return false
	}, 20*time.Second, 100*time.Millisecond, "the back's chat.completion span in the front session's trace")
}

// TestTracesToolCallSpans: a realtime turn that makes an MCP call to a real MCP server on
// loopback (the official Go SDK) and a turn that follows a client's function call export, under
// their turn spans, an mcp.call and a tool.call span that last exactly the figures of those
// turns' ToolCallStats records; the MCP call's Prometheus observation is the same figure.
func TestTracesToolCallSpans(t *testing.T) {
	ms := startMCPServer(t) // first: its cleanup runs after the binary's
	rec := startOTLPReceiver(t)
	const rtTrace = "5b8efff798038103d269b633813fc60c"
	s, c := startToolSession(t, []string{"OTEL_EXPORTER_OTLP_ENDPOINT=" + rec.Endpoint()},
		http.Header{"Traceparent": {"00-" + rtTrace + "-eee19b7ec3c1b174-01"}}, "--log-stats", "--mcp-allowed-urls", ms.url)
	lookup := map[string]any{"type": "function", "name": "lookup_order", "description": "Look up an order",
		"parameters": map[string]any{"type": "object", "properties": map[string]any{"order_id": map[string]any{"type": "string"}}, "required": []any{"order_id"}}}
	c.send(t, map[string]any{"type": "session.update", "session": map[string]any{"type": "realtime",
		"output_modalities": []any{"text"}, "max_output_tokens": 160,
		"audio": map[string]any{"input": map[string]any{"turn_detection": nil}},
		"tools": []any{lookup, map[string]any{"type": "mcp", "server_label": "calc", "server_url": ms.url,
			"allowed_tools": []any{"add"}, "require_approval": "never"}}}})
	c.until(t, "session.updated")
	c.until(t, "mcp_list_tools.completed")
	ask := func(text string) {
		t.Helper()
		c.send(t, map[string]any{"type": "conversation.item.create", "item": map[string]any{"type": "message", "role": "user",
			"content": []any{map[string]any{"type": "input_text", "text": text}}}})
		c.until(t, "conversation.item.done")
	}
	respID := func(ev map[string]any) string { return ev["response"].(map[string]any)["id"].(string) }

	// A forced MCP call: its turn is the response that holds the mcp_call item.
	ask("What is two plus three?")
	c.send(t, map[string]any{"type": "response.create", "response": map[string]any{
		"tool_choice": map[string]any{"type": "mcp", "server_label": "calc", "name": "add"}}})
	completed, _ := c.until(t, "response.mcp_call.completed")
	mcpItem := completed["item_id"].(string)
	done, _ := c.until(t, "response.done")
	mcpTurn := respID(done)
	c.until(t, "response.created") // the session's follow-up reads the result
	c.until(t, "response.done")
	require.Equal(t, 1, ms.called("add"))

	// A forced function call, answered by the client a moment later; the response after the
	// output is the follow-up turn that the call's time belongs to.
	ask("Where is order 42?")
	c.send(t, map[string]any{"type": "response.create", "response": map[string]any{
		"tool_choice": map[string]any{"type": "function", "name": "lookup_order"}}})
	args, _ := c.until(t, "response.function_call_arguments.done")
	callID := args["call_id"].(string)
	c.until(t, "response.done")
	time.Sleep(150 * time.Millisecond) // the client runs the function
	c.send(t, map[string]any{"type": "conversation.item.create", "item": map[string]any{
		"type": "function_call_output", "call_id": callID, "output": `{"status":"shipped"}`}})
	c.until(t, "conversation.item.done")
	c.send(t, map[string]any{"type": "response.create", "response": map[string]any{"tool_choice": "none"}})
	done, _ = c.until(t, "response.done")
	fnTurn := respID(done)
	require.NoError(t, c.ws.Close(websocket.StatusNormalClosure, "bye"))

	// The ToolCallStats records: one per turn with calls, with the calls' figures.
	figure := func(turn, kind string) float64 {
		t.Helper()
		var out []float64
		for _, r := range statsRecords(s.logs.String()) {
			if r.Msg != "ToolCallStats" {
				continue
			}
			require.Contains(t, []string{mcpTurn, fnTurn}, r.ResponseID, "only the turns with calls have a ToolCallStats record")
			for _, k := range r.Kinds {
				if r.ResponseID == turn && k["kind"] == kind {
					require.InDelta(t, 1.0, k["calls"], 0)
					require.InDelta(t, 0.0, k["failed_calls"], 0)
					require.Equal(t, k["max_time_ms"], k["total_time_ms"])
					out = append(out, k["total_time_ms"].(float64))
				}
			}
		}
		require.Len(t, out, 1, "the %s call in the record of %s", kind, turn)
		return out[0]
	}
	var spans []*tracepb.Span
	find := func(name string) *tracepb.Span {
		for _, sp := range spans {
			if sp.Name == name {
				return sp
			}
		}
		return nil
	}
	require.Eventually(t, func() bool {
		spans = nil
		for _, sp := range rec.Spans() {
			if hex.EncodeToString(sp.TraceId) == rtTrace {
				spans = append(spans, sp)
			}
		}
		return find("mcp.call add") != nil && find("tool.call lookup_order") != nil
	}, 20*time.Second, 100*time.Millisecond, "the tool call spans reach the receiver")
	for _, tc := range []struct{ span, kind, turn, callID string }{
		{"mcp.call add", "mcp", mcpTurn, mcpItem},
		{"tool.call lookup_order", "function", fnTurn, callID},
	} {
		sp := find(tc.span)
		var parent *tracepb.Span
		for _, p := range spans {
			if bytes.Equal(p.SpanId, sp.ParentSpanId) {
				parent = p
			}
		}
		require.NotNil(t, parent, "%s has its parent in the trace", tc.span)
		require.Equal(t, "realtime.turn", parent.Name)
		rid, _ := spanAttr(parent, "omniserve.request_id")
		require.Equal(t, tc.turn, rid, "%s is a child of the turn it belongs to", tc.span)
		id, _ := spanAttr(sp, "gen_ai.tool.call.id")
		require.Equal(t, tc.callID, id)
		kind, _ := spanAttr(sp, "omniserve.tool.kind")
		require.Equal(t, tc.kind, kind)
		want := figure(tc.turn, tc.kind)
		durMs := float64(sp.EndTimeUnixNano-sp.StartTimeUnixNano) / 1e6
		require.InDelta(t, want, durMs, 0.001, "%s lasts its ToolCallStats figure", tc.span)
		_, attr := spanAttr(sp, "omniserve.tool_call_ms")
		require.InDelta(t, want, attr, 1e-9)
		t.Logf("%s: %.3f ms (span and ToolCallStats record)", tc.span, durMs)
	}
	label, _ := spanAttr(find("mcp.call add"), "omniserve.mcp.server_label")
	require.Equal(t, "calc", label)
	require.GreaterOrEqual(t, figure(fnTurn, "function"), 150.0, "the client's time to answer")

	// Prometheus observed the same calls from the same records.
	_, metrics := s.get(t, "/metrics")
	sum := func(re string) float64 {
		m := regexp.MustCompile(re).FindSubmatch(metrics)
		require.NotNil(t, m, re)
		v, err := strconv.ParseFloat(string(m[1]), 64)
		require.NoError(t, err)
		return v
	}
	require.InDelta(t, figure(mcpTurn, "mcp")/1000, sum(`omniserve_realtime_mcp_call_duration_seconds_sum\{model_name="[^"]*",outcome="completed"\} (\S+)`), 1e-9)
	require.InDelta(t, figure(fnTurn, "function")/1000, sum(`omniserve_realtime_function_call_duration_seconds_sum\{model_name="[^"]*"\} (\S+)`), 1e-9)
}
