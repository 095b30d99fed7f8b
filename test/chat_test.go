package test

import (
	"bufio"
	"context"
	"encoding/base64"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"regexp"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/omniserve/omniserve/internal/api"
	"github.com/omniserve/omniserve/internal/audio"
)

var chatIDRe = regexp.MustCompile(`^chatcmpl-[0-9a-f]{16}$`)

// neverStop is a stop sequence the test models never emit (three section signs), so a long reply
// runs to max_tokens. Escaped: source files carry no section sign (TestNoSpecSectionCitations).
const neverStop = "\u00a7\u00a7\u00a7"

// banEOS is the logit_bias that bans the dummy model's end-of-sequence token (</s>, id 2), as an
// OpenAI client bans a token: a reply asked to be long runs to max_tokens instead of ending
// after its 8-32 words.
var banEOS = map[string]float64{"2": -100}

// TestChat runs every chat behaviour against one real engine; building it once keeps the package
// fast under -race.
func TestChat(t *testing.T) {
	f := newChatFixture(t)
	t.Run("json_text", func(t *testing.T) { testChatJSONText(t, f) })
	t.Run("stream_text", func(t *testing.T) { testChatStreamText(t, f) })
	t.Run("json_audio_wav", func(t *testing.T) { testChatJSONAudio(t, f) })
	t.Run("stream_audio_pcm16", func(t *testing.T) { testChatStreamAudio(t, f) })
	t.Run("input_audio", func(t *testing.T) { testChatInputAudio(t, f) })
	t.Run("errors", func(t *testing.T) { testChatErrors(t, f) })
	t.Run("limits", func(t *testing.T) { testChatLimits(t, f) })
	t.Run("log_stats_tables", func(t *testing.T) { testChatLogStats(t, f) })
	t.Run("disconnect_aborts", func(t *testing.T) { testChatDisconnect(t, f) })
	t.Run("concurrent_16", func(t *testing.T) { testChatConcurrent(t, f) })
	t.Run("conformance", func(t *testing.T) { testChatConformance(t, f) })
	t.Run("http_edges", func(t *testing.T) { testChatHTTPEdges(t, f) })
	t.Run("openai_node_sdk", func(t *testing.T) { testChatOpenAINode(t, f) })
	waitIdle(t, f.plain)
	waitIdle(t, f.stats)
}

func testChatJSONText(t *testing.T, f *chatFixture) {
	c := completeJSON(t, f.url, map[string]any{"model": chatModel, "messages": []map[string]any{
		{"role": "system", "content": "You are terse."},
		{"role": "user", "content": []map[string]any{{"type": "text", "text": "hello there"}}},
	}, "max_tokens": 8, "temperature": 0.5, "top_p": 0.9, "seed": 3, "stop": []string{"zzzz"},
		"user": "u1", "metadata": map[string]string{"k": "v"}})
	require.Regexp(t, chatIDRe, c.ID)
	require.Equal(t, "chat.completion", c.Object)
	require.Equal(t, chatModel, c.Model)
	require.NotZero(t, c.Created)
	require.Len(t, c.Choices, 1)
	m := c.Choices[0].Message
	require.Equal(t, "assistant", m.Role)
	require.NotNil(t, m.Content)
	require.NotEmpty(t, *m.Content)
	require.Nil(t, m.Audio)
	require.Contains(t, []string{"stop", "length"}, c.Choices[0].FinishReason)
	require.Positive(t, c.Usage.PromptTokens)
	require.Positive(t, c.Usage.CompletionTokens)
	require.LessOrEqual(t, c.Usage.CompletionTokens, 8)
	require.Equal(t, c.Usage.PromptTokens+c.Usage.CompletionTokens, c.Usage.TotalTokens)

	// A 2-token limit must end with "length": max_tokens reaches the engine.
	c = completeJSON(t, f.url, map[string]any{"model": chatModel, "messages": userText("count to ten"), "max_completion_tokens": 2})
	require.Equal(t, "length", c.Choices[0].FinishReason)
	require.Equal(t, 2, c.Usage.CompletionTokens)
}

func testChatStreamText(t *testing.T, f *chatFixture) {
	resp := postChat(t, context.Background(), f.url, map[string]any{"model": chatModel, "messages": userText("tell me a story"),
		"stream": true, "stream_options": map[string]any{"include_usage": true}, "max_tokens": 12})
	defer resp.Body.Close()
	require.Equal(t, http.StatusOK, resp.StatusCode)
	require.Equal(t, "text/event-stream", resp.Header.Get("Content-Type"))
	chunks := decodeChunks(t, readSSE(t, resp.Body))
	require.GreaterOrEqual(t, len(chunks), 4, "role, content, finish and usage chunks")
	require.Equal(t, "assistant", chunks[0].Choices[0].Delta.Role)
	var text strings.Builder
	var finish string
	for i, c := range chunks {
		require.Equal(t, "chat.completion.chunk", c.Object)
		require.Regexp(t, chatIDRe, c.ID)
		require.Equal(t, chunks[0].ID, c.ID)
		if i == len(chunks)-1 {
			require.Empty(t, c.Choices, "the usage chunk has no choices")
			require.NotNil(t, c.Usage)
			require.Positive(t, c.Usage.CompletionTokens)
			require.Equal(t, c.Usage.PromptTokens+c.Usage.CompletionTokens, c.Usage.TotalTokens)
			continue
		}
		require.Nil(t, c.Usage)
		require.Len(t, c.Choices, 1)
		if d := c.Choices[0].Delta.Content; d != nil {
			text.WriteString(*d)
		}
		if fr := c.Choices[0].FinishReason; fr != nil {
			finish = *fr
		}
	}
	require.NotEmpty(t, text.String())
	require.Contains(t, []string{"stop", "length"}, finish)

	// Without include_usage there is no usage chunk.
	resp2 := postChat(t, context.Background(), f.url, map[string]any{"model": chatModel, "messages": userText("hi"), "stream": true, "max_tokens": 4})
	defer resp2.Body.Close()
	for _, c := range decodeChunks(t, readSSE(t, resp2.Body)) {
		require.Nil(t, c.Usage)
		require.Len(t, c.Choices, 1)
	}
}

func testChatJSONAudio(t *testing.T, f *chatFixture) {
	c := completeJSON(t, f.url, map[string]any{"model": chatModel, "messages": userText("say hello"), "max_tokens": 8,
		"modalities": []string{"text", "audio"}, "audio": map[string]any{"voice": "alloy", "format": "wav"}})
	m := c.Choices[0].Message
	require.Nil(t, m.Content, "with audio output the text is the audio transcript")
	require.NotNil(t, m.Audio)
	require.True(t, strings.HasPrefix(m.Audio.ID, "audio_"))
	require.NotEmpty(t, m.Audio.Transcript)
	require.Greater(t, m.Audio.ExpiresAt, c.Created)
	wav, err := base64.StdEncoding.DecodeString(m.Audio.Data)
	require.NoError(t, err)
	require.Equal(t, 24000, wavRate(t, wav))
	pcm, rate, err := audio.DecodeWAV(wav)
	require.NoError(t, err)
	require.Equal(t, 24000, rate)
	require.Greater(t, len(pcm), 24000/10, "at least 100 ms of speech")
	require.NoError(t, audio.CheckFinite(pcm))

	// pcm16 in a JSON answer: raw 24 kHz s16le.
	c = completeJSON(t, f.url, map[string]any{"model": chatModel, "messages": userText("say hello"), "max_tokens": 6,
		"modalities": []string{"text", "audio"}, "audio": map[string]any{"voice": "alloy", "format": "pcm16"}})
	raw, err := base64.StdEncoding.DecodeString(c.Choices[0].Message.Audio.Data)
	require.NoError(t, err)
	require.Greater(t, len(raw), 2*24000/10)
	require.Zero(t, len(raw)%2)
}

func testChatStreamAudio(t *testing.T, f *chatFixture) {
	resp := postChat(t, context.Background(), f.url, map[string]any{"model": chatModel, "messages": userText("say hello"),
		"max_tokens": 8, "stream": true, "modalities": []string{"text", "audio"}, "audio": map[string]any{"voice": "alloy", "format": "pcm16"}})
	defer resp.Body.Close()
	require.Equal(t, http.StatusOK, resp.StatusCode)
	chunks := decodeChunks(t, readSSE(t, resp.Body))
	var pcm []byte
	var transcript strings.Builder
	for _, c := range chunks {
		for _, ch := range c.Choices {
			require.Nil(t, ch.Delta.Content, "audio mode streams the transcript in delta.audio")
			if a := ch.Delta.Audio; a != nil {
				transcript.WriteString(a.Transcript)
				if a.Data != "" {
					b, err := base64.StdEncoding.DecodeString(a.Data)
					require.NoError(t, err)
					require.Zero(t, len(b)%2)
					pcm = append(pcm, b...)
				}
			}
		}
	}
	require.NotEmpty(t, transcript.String())
	require.Greater(t, len(pcm), 2*24000/10, "at least 100 ms of 24 kHz pcm16")
}

func testChatInputAudio(t *testing.T, f *chatFixture) {
	wav, pcm16k := goForwardWAV(t)
	ref := completeJSON(t, f.url, map[string]any{"model": chatModel, "messages": userText("go forward ten meters"), "max_tokens": 4})
	c := completeJSON(t, f.url, map[string]any{"model": chatModel, "max_tokens": 4, "messages": []map[string]any{{"role": "user",
		"content": []map[string]any{{"type": "input_audio", "input_audio": map[string]any{"data": b64(wav), "format": "wav"}}}}}})
	require.NotEmpty(t, *c.Choices[0].Message.Content)
	// The ASR hears "go forward ten meters": the prompt is the same as the typed one.
	require.Equal(t, ref.Usage.PromptTokens, c.Usage.PromptTokens, "the transcript of goforward.raw differs from its text")

	// pcm16 input is 24 kHz mono s16le, as OpenAI's.
	pcm24k, err := audio.Resample(pcm16k, 16000, 24000)
	require.NoError(t, err)
	c = completeJSON(t, f.url, map[string]any{"model": chatModel, "max_tokens": 4, "messages": []map[string]any{{"role": "user",
		"content": []map[string]any{{"type": "input_audio", "input_audio": map[string]any{
			"data": b64(audio.Float32ToPCM16Bytes(nil, pcm24k)), "format": "pcm16"}}}}}})
	require.Equal(t, ref.Usage.PromptTokens, c.Usage.PromptTokens, "pcm16 input was not read as 24 kHz")
}

// testChatLogStats checks that --log-stats prints the reference's tables once per request, with
// the rows a chat request produces.
func testChatLogStats(t *testing.T, f *chatFixture) {
	f.logs.TakeAll()
	c := completeJSON(t, f.statsURL, map[string]any{"model": chatModel, "messages": userText("say hello"), "max_tokens": 6,
		"modalities": []string{"text", "audio"}, "audio": map[string]any{"format": "wav"}})
	waitIdle(t, f.stats)
	entries := chatLogEntries(f)
	require.NotEmpty(t, entries)
	titles := []string{"[Overall Summary]", "[RequestE2EStats [request_id=" + c.ID + "-", "[OmniTiming] req=" + c.ID + "-",
		"[StageRequestStats [request_id=" + c.ID + "-", "[TransferEdgeStats [request_id=" + c.ID + "-"}
	require.Len(t, entries, len(titles), strings.Join(entries, "\n"))
	for i, want := range titles {
		require.True(t, strings.HasPrefix(strings.TrimPrefix(entries[i], "\n"), want), "entry %d: %q", i, entries[i])
	}
	requireRows(t, entries[0], "e2e_requests", "e2e_wall_time_ms", "e2e_total_tokens", "e2e_avg_time_per_request_ms",
		"e2e_avg_tokens_per_s", "e2e_stage_0_wall_time_ms", "e2e_stage_1_wall_time_ms")
	require.Regexp(t, `\| e2e_requests\s+\|\s+1 \|`, entries[0])
	requireRows(t, entries[1], "e2e_total_ms", "e2e_total_tokens", "transfers_total_kbytes", "transfers_total_time_ms")
	require.Regexp(t, `^\[OmniTiming\] req=chatcmpl-[0-9a-f]{16}-[0-9a-f]{8} total=\d+\.\d\ds engine=\d+\.\d\ds stages=\[0:\d+\.\d\ds,1:\d+\.\d\ds\] transfers=\[0->1=\d+\.\d\dms\]$`, entries[2])
	requireRows(t, entries[3], "audio_duration_s", "audio_generated_frames", "audio_sample_rate", "num_tokens_in",
		"num_tokens_out", "output_unit_type", "serving_time_to_first_output_ms", "stage_gen_time_ms", "vllm_ttft_ms")
	require.Regexp(t, `\| Field\s+\|\s+0 \|\s+1 \|`, entries[3])
	require.Regexp(t, `\| output_unit_type\s+\|\s+text \|\s+audio \|`, entries[3])
	require.Regexp(t, fmt.Sprintf(`\| num_tokens_out\s+\|\s+%d \|`, c.Usage.CompletionTokens), entries[3])
	requireRows(t, entries[4], "size_kbytes", "tx_time_ms")
	require.Regexp(t, `\| Field\s+\|\s+0->1 \|`, entries[4])

	// A text-only request has one stage column and no transfer table.
	f.logs.TakeAll()
	completeJSON(t, f.statsURL, map[string]any{"model": chatModel, "messages": userText("hi"), "max_tokens": 3})
	waitIdle(t, f.stats)
	entries = chatLogEntries(f)
	require.Len(t, entries, 4, strings.Join(entries, "\n"))
	require.Regexp(t, `\| Field\s+\|\s+0 \|\n`, entries[3])

	// Without --log-stats nothing is printed.
	f.logs.TakeAll()
	completeJSON(t, f.url, map[string]any{"model": chatModel, "messages": userText("hi"), "max_tokens": 3})
	require.Empty(t, chatLogEntries(f))
}

// chatLogEntries returns the table and [OmniTiming] entries logged so far.
func chatLogEntries(f *chatFixture) []string {
	var out []string
	for _, e := range f.logs.TakeAll() {
		if strings.HasPrefix(e.Message, "\n[") || strings.HasPrefix(e.Message, "[OmniTiming]") {
			out = append(out, e.Message)
		}
	}
	return out
}

func requireRows(t *testing.T, table string, fields ...string) {
	t.Helper()
	for _, fld := range fields {
		require.Regexp(t, `(?m)^\| `+regexp.QuoteMeta(fld)+`\s+\|`, table, "row %s missing in\n%s", fld, table)
	}
}

// testChatDisconnect drops a client mid-stream: generation must stop (far fewer tokens than asked)
// and the request must be finalized with reason abort, its tables still printed.
func testChatDisconnect(t *testing.T, f *chatFixture) {
	f.logs.TakeAll()
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	resp := postChat(t, ctx, f.statsURL, map[string]any{"model": chatModel, "messages": userText("talk for a long time"),
		"stream": true, "max_tokens": 2000, "stop": []string{neverStop}, "logit_bias": banEOS})
	defer resp.Body.Close()
	require.Equal(t, http.StatusOK, resp.StatusCode)
	br := bufio.NewReader(resp.Body)
	var id string
	for id == "" { // read until the first content delta
		line, err := br.ReadString('\n')
		require.NoError(t, err)
		var c chatChunk
		if d, ok := strings.CutPrefix(strings.TrimSpace(line), "data: "); ok && json.Unmarshal([]byte(d), &c) == nil &&
			len(c.Choices) == 1 && c.Choices[0].Delta.Content != nil && *c.Choices[0].Delta.Content != "" {
			id = c.ID
		}
	}
	require.Positive(t, f.statsRunner.LiveSequences(), "the generation should still be running")
	cancel()
	// A 2000-token generation takes far longer than this on dummy:tiny (full_generation below);
	// the sequence only goes away this fast if the disconnect aborted it.
	start := time.Now()
	require.Eventually(t, func() bool { return f.statsRunner.LiveSequences() == 0 }, 250*time.Millisecond, time.Millisecond,
		"the generation kept running after the client disconnected")
	t.Logf("sequence released %v after the disconnect", time.Since(start))
	waitIdle(t, f.stats)
	entries := strings.Join(chatLogEntries(f), "\n")
	// Aborted requests get no more stage output, but they are finalized with their reason, and
	// stage 0's work up to the abort is still in the stage table (nothing accepted is lost).
	require.Regexp(t, `\[RequestE2EStats \[request_id=`+id+`-[0-9a-f]{8} reason=abort\]\]`, entries)
	require.Regexp(t, `\[OmniTiming\] req=`+id+`-[0-9a-f]{8} reason=abort stages=\[`, entries)
	require.Regexp(t, `\[StageRequestStats \[request_id=`+id+`-[0-9a-f]{8} reason=abort\]\]`, entries)
	require.Regexp(t, `\| num_tokens_out\s+\|\s+[1-9]\d* \|`, entries, "the tokens generated before the abort")

	t.Run("full_generation", func(t *testing.T) {
		// The control: undisturbed, the same request runs well past the abort bound above.
		start := time.Now()
		c := completeJSON(t, f.url, map[string]any{"model": chatModel, "messages": userText("talk for a long time"),
			"max_tokens": 2000, "stop": []string{neverStop}, "logit_bias": banEOS})
		took := time.Since(start)
		t.Logf("%d tokens in %v", c.Usage.CompletionTokens, took)
		require.Greater(t, took, 250*time.Millisecond, "the engine is too fast for the abort bound to prove anything")
	})
}

func testChatConcurrent(t *testing.T, f *chatFixture) {
	var wg sync.WaitGroup
	errs := make(chan error, 16)
	for i := range 16 {
		wg.Go(func() {
			body := map[string]any{"model": chatModel, "messages": userText(fmt.Sprintf("request %d", i)), "max_tokens": 8, "seed": i}
			if i%2 == 1 {
				body["stream"] = true
			}
			if i%4 == 3 {
				body["modalities"] = []string{"text", "audio"}
				body["audio"] = map[string]any{"format": "pcm16"}
			}
			req, _ := json.Marshal(body)
			resp, err := http.Post(f.url+"/chat/completions", "application/json", strings.NewReader(string(req)))
			if err != nil {
				errs <- err
				return
			}
			defer resp.Body.Close()
			raw, _ := io.ReadAll(resp.Body)
			switch {
			case resp.StatusCode != http.StatusOK:
				errs <- fmt.Errorf("request %d: %d %s", i, resp.StatusCode, raw)
			case i%2 == 1 && !strings.HasSuffix(strings.TrimSpace(string(raw)), "data: [DONE]"):
				errs <- fmt.Errorf("request %d: stream did not end with [DONE]: %s", i, raw)
			}
		})
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		require.NoError(t, err)
	}
	waitIdle(t, f.plain)
}

// testChatLimits checks 413 and the in-flight bound with small limits on the same engine.
func testChatLimits(t *testing.T, f *chatFixture) {
	small := serveChat(t, f.plain, api.ChatConfig{MaxBodyBytes: 1 << 10, MaxInFlight: 1})
	big := fmt.Sprintf(`{"model":%q,"messages":[{"role":"user","content":%q}]}`, chatModel, strings.Repeat("a", 4<<10))
	requireChatError(t, postChat(t, context.Background(), small, big), http.StatusRequestEntityTooLarge, "", "request_too_large")

	// One long stream holds the only slot; the next request is refused with Retry-After.
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	hold := postChat(t, ctx, small, map[string]any{"model": chatModel, "messages": userText("go on"), "stream": true,
		"max_tokens": 2000, "stop": []string{neverStop}, "logit_bias": banEOS})
	defer hold.Body.Close()
	require.Equal(t, http.StatusOK, hold.StatusCode)
	_, err := bufio.NewReader(hold.Body).ReadString('\n')
	require.NoError(t, err)
	resp := postChat(t, context.Background(), small, map[string]any{"model": chatModel, "messages": userText("hi")})
	require.Equal(t, "1", resp.Header.Get("Retry-After"))
	requireChatError(t, resp, http.StatusTooManyRequests, "", "engine_overloaded")
	cancel()
	waitIdle(t, f.plain)
	require.Eventually(t, func() bool {
		r := postChat(t, context.Background(), small, map[string]any{"model": chatModel, "messages": userText("hi"), "max_tokens": 2})
		defer r.Body.Close()
		return r.StatusCode == http.StatusOK
	}, 10*time.Second, 50*time.Millisecond, "the slot was not released")
}
