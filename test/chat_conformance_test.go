package test

import (
	"context"
	"encoding/json"
	"io"
	"net/http"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

// testChatConformance covers the OpenAI chat parameters beyond the basics, on the real engine:
// seeds, penalties and logit_bias, response_format, logprobs, n, multi-turn audio and
// GET /v1/models/{id}.
func testChatConformance(t *testing.T, f *chatFixture) {
	t.Run("seed", func(t *testing.T) { testChatSeed(t, f) })
	t.Run("logit_bias", func(t *testing.T) { testChatLogitBias(t, f) })
	t.Run("response_format", func(t *testing.T) { testChatResponseFormat(t, f) })
	t.Run("logprobs", func(t *testing.T) { testChatLogprobs(t, f) })
	t.Run("n", func(t *testing.T) { testChatN(t, f) })
	t.Run("multi_turn_audio", func(t *testing.T) { testChatMultiTurnAudio(t, f) })
	t.Run("model_by_id", func(t *testing.T) { testChatModelByID(t, f) })
}

// rawCompletion posts body and decodes the 200 answer loosely.
func rawCompletion(t *testing.T, base string, body map[string]any) map[string]any {
	t.Helper()
	resp := postChat(t, context.Background(), base, body)
	defer resp.Body.Close()
	raw, err := io.ReadAll(resp.Body)
	require.NoError(t, err)
	require.Equal(t, http.StatusOK, resp.StatusCode, string(raw))
	var m map[string]any
	require.NoError(t, json.Unmarshal(raw, &m))
	return m
}

func contentOf(t *testing.T, c chatCompletion, i int) string {
	t.Helper()
	require.Greater(t, len(c.Choices), i)
	require.NotNil(t, c.Choices[i].Message.Content)
	return *c.Choices[i].Message.Content
}

func testChatSeed(t *testing.T, f *chatFixture) {
	body := func(seed any) map[string]any {
		b := map[string]any{"model": chatModel, "messages": userText("tell me about the sea"), "max_tokens": 12, "temperature": 1}
		if seed != nil {
			b["seed"] = seed
		}
		return b
	}
	// Without a seed, temperature 1 samples: four answers are not all the same.
	seen := map[string]bool{}
	for range 4 {
		seen[contentOf(t, completeJSON(t, f.url, body(nil)), 0)] = true
	}
	require.Greater(t, len(seen), 1, "unseeded answers at temperature 1 were identical: %v", seen)
	// The same seed gives the same answer; another seed another one.
	a := contentOf(t, completeJSON(t, f.url, body(1234)), 0)
	b := contentOf(t, completeJSON(t, f.url, body(1234)), 0)
	c := contentOf(t, completeJSON(t, f.url, body(4321)), 0)
	require.Equal(t, a, b)
	require.NotEqual(t, a, c)
}

func tokenID(t *testing.T, f *chatFixture, text string) int {
	t.Helper()
	toks, err := f.runner.Tokenize(text)
	require.NoError(t, err)
	require.NotEmpty(t, toks)
	return toks[len(toks)-1] // SentencePiece may put a lone "▁" first
}

func testChatLogitBias(t *testing.T, f *chatFixture) {
	ocean := tokenID(t, f, " ocean")
	c := completeJSON(t, f.url, map[string]any{"model": chatModel, "messages": userText("hello"), "max_tokens": 6,
		"logit_bias": map[string]any{strconv.Itoa(ocean): 100}})
	// A reply starts at its first visible character: the first " ocean" loses its space.
	require.Equal(t, "ocean"+strings.Repeat(" ocean", 5), contentOf(t, c, 0))
	// -100 bans: the greedy first word never appears once banned.
	greedy := completeJSON(t, f.url, map[string]any{"model": chatModel, "messages": userText("hello"), "max_tokens": 1, "temperature": 0})
	first := tokenID(t, f, " "+contentOf(t, greedy, 0)) // the reply trims its first word's space; the token has it
	c = completeJSON(t, f.url, map[string]any{"model": chatModel, "messages": userText("hello"), "max_tokens": 16, "temperature": 0,
		"logit_bias": map[string]any{strconv.Itoa(first): -100}, "presence_penalty": 1.5, "frequency_penalty": 1})
	require.NotContains(t, contentOf(t, c, 0), contentOf(t, greedy, 0)+" ")
}

func testChatResponseFormat(t *testing.T, f *chatFixture) {
	schema := map[string]any{"type": "object", "properties": map[string]any{
		"answer": map[string]any{"type": "string", "enum": []string{"yes", "no"}},
		"count":  map[string]any{"type": "integer"},
		"ok":     map[string]any{"type": "boolean"},
	}, "required": []string{"answer", "count", "ok"}, "additionalProperties": false}
	for seed := range 3 {
		c := completeJSON(t, f.url, map[string]any{"model": chatModel, "messages": userText("answer in JSON"), "max_tokens": 200,
			"seed": seed, "response_format": map[string]any{"type": "json_schema", "json_schema": map[string]any{"name": "a", "strict": true, "schema": schema}}})
		require.Equal(t, "stop", c.Choices[0].FinishReason)
		var v struct {
			Answer string `json:"answer"`
			Count  *int   `json:"count"`
			OK     *bool  `json:"ok"`
		}
		content := contentOf(t, c, 0)
		require.NoError(t, json.Unmarshal([]byte(content), &v), content)
		require.Contains(t, []string{"yes", "no"}, v.Answer)
		require.NotNil(t, v.Count)
		require.NotNil(t, v.OK)
	}
	// json_object: any object. The random model's strings only end when '"' gets a push (its
	// words outweigh every byte token); the grammar does the rest, streaming too.
	quote := tokenID(t, f, `"`)
	resp := postChat(t, context.Background(), f.url, map[string]any{"model": chatModel, "messages": userText("JSON please"), "max_tokens": 400,
		"seed": 3, "stream": true, "response_format": map[string]any{"type": "json_object"}, "logit_bias": map[string]any{strconv.Itoa(quote): 30}})
	defer resp.Body.Close()
	require.Equal(t, http.StatusOK, resp.StatusCode)
	var text strings.Builder
	var finish string
	for _, c := range decodeChunks(t, readSSE(t, resp.Body)) {
		if d := c.Choices[0].Delta.Content; d != nil {
			text.WriteString(*d)
		}
		if fr := c.Choices[0].FinishReason; fr != nil {
			finish = *fr
		}
	}
	require.Equal(t, "stop", finish, text.String())
	var obj map[string]any
	require.NoError(t, json.Unmarshal([]byte(text.String()), &obj), text.String())
}

func testChatLogprobs(t *testing.T, f *chatFixture) {
	m := rawCompletion(t, f.url, map[string]any{"model": chatModel, "messages": userText("hi"), "max_tokens": 5,
		"temperature": 0, "logprobs": true, "top_logprobs": 3})
	choice := m["choices"].([]any)[0].(map[string]any)
	lp := choice["logprobs"].(map[string]any)
	content := lp["content"].([]any)
	require.Len(t, content, 5, "one entry per generated token")
	var joined strings.Builder
	for _, e := range content {
		e := e.(map[string]any)
		tok := e["token"].(string)
		joined.WriteString(tok)
		require.LessOrEqual(t, e["logprob"].(float64), 0.0)
		require.Len(t, e["bytes"].([]any), len(tok))
		top := e["top_logprobs"].([]any)
		require.Len(t, top, 3)
		// Greedy: the chosen token is the first alternative.
		require.Equal(t, tok, top[0].(map[string]any)["token"])
	}
	require.Equal(t, choice["message"].(map[string]any)["content"], joined.String())

	// Streaming: each content chunk carries its tokens' logprobs.
	resp := postChat(t, context.Background(), f.url, map[string]any{"model": chatModel, "messages": userText("hi"), "max_tokens": 5,
		"logprobs": true, "stream": true})
	defer resp.Body.Close()
	n := 0
	for _, d := range readSSE(t, resp.Body) {
		if d == "[DONE]" {
			break
		}
		var c struct {
			Choices []struct {
				Logprobs *struct {
					Content []struct {
						Token       string  `json:"token"`
						Logprob     float64 `json:"logprob"`
						TopLogprobs []any   `json:"top_logprobs"`
					} `json:"content"`
				} `json:"logprobs"`
			} `json:"choices"`
		}
		require.NoError(t, json.Unmarshal([]byte(d), &c))
		for _, ch := range c.Choices {
			if ch.Logprobs != nil {
				n += len(ch.Logprobs.Content)
			}
		}
	}
	require.Equal(t, 5, n)
}

func testChatN(t *testing.T, f *chatFixture) {
	c := completeJSON(t, f.url, map[string]any{"model": chatModel, "messages": userText("tell me a story"), "max_tokens": 10, "n": 3, "seed": 9})
	require.Len(t, c.Choices, 3)
	seen := map[string]bool{}
	one := completeJSON(t, f.url, map[string]any{"model": chatModel, "messages": userText("tell me a story"), "max_tokens": 10})
	for i, ch := range c.Choices {
		require.Equal(t, i, ch.Index)
		seen[contentOf(t, c, i)] = true
	}
	require.Len(t, seen, 3, "seeded choices differ from each other")
	require.Equal(t, one.Usage.PromptTokens, c.Usage.PromptTokens, "the prompt counts once")
	require.Equal(t, 30, c.Usage.CompletionTokens)
	// The same seed reproduces every choice.
	again := completeJSON(t, f.url, map[string]any{"model": chatModel, "messages": userText("tell me a story"), "max_tokens": 10, "n": 3, "seed": 9})
	for i := range 3 {
		require.Equal(t, contentOf(t, c, i), contentOf(t, again, i))
	}

	resp := postChat(t, context.Background(), f.url, map[string]any{"model": chatModel, "messages": userText("hi"), "max_tokens": 6, "n": 2,
		"stream": true, "stream_options": map[string]any{"include_usage": true}})
	defer resp.Body.Close()
	require.Equal(t, http.StatusOK, resp.StatusCode)
	var texts [2]strings.Builder
	finishes := map[int]string{}
	var usage int
	for _, d := range readSSE(t, resp.Body) {
		if d == "[DONE]" {
			break
		}
		var ch struct {
			Choices []struct {
				Index int `json:"index"`
				Delta struct {
					Content *string `json:"content"`
				} `json:"delta"`
				FinishReason *string `json:"finish_reason"`
			} `json:"choices"`
			Usage *struct {
				CompletionTokens int `json:"completion_tokens"`
			} `json:"usage"`
		}
		require.NoError(t, json.Unmarshal([]byte(d), &ch))
		if ch.Usage != nil {
			usage = ch.Usage.CompletionTokens
		}
		for _, c := range ch.Choices {
			if c.Delta.Content != nil {
				texts[c.Index].WriteString(*c.Delta.Content)
			}
			if c.FinishReason != nil {
				finishes[c.Index] = *c.FinishReason
			}
		}
	}
	require.Equal(t, map[int]string{0: "length", 1: "length"}, finishes)
	require.NotEmpty(t, texts[0].String())
	require.NotEmpty(t, texts[1].String())
	require.Equal(t, 12, usage)
}

func testChatMultiTurnAudio(t *testing.T, f *chatFixture) {
	first := completeJSON(t, f.url, map[string]any{"model": chatModel, "messages": userText("say something"), "max_tokens": 6,
		"modalities": []string{"text", "audio"}, "audio": map[string]any{"voice": "alloy", "format": "wav"}})
	a := first.Choices[0].Message.Audio
	require.NotNil(t, a)
	require.NotEmpty(t, a.ID)
	require.NotEmpty(t, a.Transcript)
	// The follow-up names the audio by id, as OpenAI's multi-turn audio does; it means the
	// transcript: the prompt is the same as with the transcript sent as text.
	byID := completeJSON(t, f.url, map[string]any{"model": chatModel, "max_tokens": 4, "messages": []map[string]any{
		{"role": "user", "content": "say something"}, {"role": "assistant", "audio": map[string]any{"id": a.ID}},
		{"role": "user", "content": "and again"}}})
	byText := completeJSON(t, f.url, map[string]any{"model": chatModel, "max_tokens": 4, "messages": []map[string]any{
		{"role": "user", "content": "say something"}, {"role": "assistant", "content": strings.TrimSpace(a.Transcript)},
		{"role": "user", "content": "and again"}}})
	require.Equal(t, byText.Usage.PromptTokens, byID.Usage.PromptTokens)
	// A streamed audio response's id works too.
	resp := postChat(t, context.Background(), f.url, map[string]any{"model": chatModel, "messages": userText("hi"), "max_tokens": 4, "stream": true,
		"modalities": []string{"text", "audio"}, "audio": map[string]any{"voice": "alloy", "format": "pcm16"}})
	defer resp.Body.Close()
	var id string
	for _, c := range decodeChunks(t, readSSE(t, resp.Body)) {
		if len(c.Choices) > 0 && c.Choices[0].Delta.Audio != nil && c.Choices[0].Delta.Audio.ID != "" {
			id = c.Choices[0].Delta.Audio.ID
		}
	}
	require.NotEmpty(t, id)
	completeJSON(t, f.url, map[string]any{"model": chatModel, "max_tokens": 2, "messages": []map[string]any{
		{"role": "assistant", "audio": map[string]any{"id": id}}, {"role": "user", "content": "go on"}}})
}

func testChatModelByID(t *testing.T, f *chatFixture) {
	resp, err := http.Get(f.url + "/models/" + chatModel)
	require.NoError(t, err)
	var m struct {
		ID, Object string
	}
	require.NoError(t, json.NewDecoder(resp.Body).Decode(&m))
	resp.Body.Close()
	require.Equal(t, http.StatusOK, resp.StatusCode)
	require.Equal(t, chatModel, m.ID)
	require.Equal(t, "model", m.Object)
	resp, err = http.Get(f.url + "/models/gpt-4o")
	require.NoError(t, err)
	requireChatError(t, resp, http.StatusNotFound, "model", "model_not_found")
}

// testChatHTTPEdges covers the [3/8] robustness items of the chat endpoint: Content-Type, and
// prompts that cannot fit the context window (refused at once, however large).
func testChatHTTPEdges(t *testing.T, f *chatFixture) {
	t.Run("content_type", func(t *testing.T) {
		body := `{"model":"` + chatModel + `","messages":[{"role":"user","content":"hi"}],"max_tokens":2}`
		for _, ct := range []string{"text/plain", "application/x-www-form-urlencoded", "", "multipart/form-data; boundary=x"} {
			req, err := http.NewRequestWithContext(context.Background(), http.MethodPost, f.url+"/chat/completions", strings.NewReader(body))
			require.NoError(t, err)
			if ct != "" {
				req.Header.Set("Content-Type", ct)
			}
			resp, err := http.DefaultClient.Do(req)
			require.NoError(t, err)
			requireChatError(t, resp, http.StatusUnsupportedMediaType, "", "unsupported_media_type")
		}
		req, err := http.NewRequestWithContext(context.Background(), http.MethodPost, f.url+"/chat/completions", strings.NewReader(body))
		require.NoError(t, err)
		req.Header.Set("Content-Type", "application/json; charset=utf-8")
		resp, err := http.DefaultClient.Do(req)
		require.NoError(t, err)
		resp.Body.Close()
		require.Equal(t, http.StatusOK, resp.StatusCode)
	})
	t.Run("context_length", func(t *testing.T) {
		limit := f.runner.Info().SeqContext
		words := func(n int) string { return strings.Repeat("sea ", n) }
		for _, tc := range []struct {
			name string
			body map[string]any
		}{
			{"prompt_over_window", map[string]any{"model": chatModel, "messages": userText(words(limit + 10))}},
			{"prompt_plus_max_tokens", map[string]any{"model": chatModel, "messages": userText(words(limit - 100)), "max_tokens": 200}},
			{"one_mib", map[string]any{"model": chatModel, "messages": userText(strings.Repeat("x", 1<<20))}},
			{"one_mib_stream", map[string]any{"model": chatModel, "messages": userText(strings.Repeat("hello ", 1<<18)), "stream": true}},
		} {
			t.Run(tc.name, func(t *testing.T) {
				start := time.Now()
				resp := postChat(t, context.Background(), f.url, tc.body)
				requireChatError(t, resp, http.StatusBadRequest, "messages", "context_length_exceeded")
				took := time.Since(start)
				t.Logf("%s refused in %v", tc.name, took)
				require.Less(t, took, 5*time.Second)
			})
		}
		// Without max_tokens a long prompt that fits gets the room that is left (the dummy's end
		// banned: its reply would end after 8-32 words, within the room).
		c := completeJSON(t, f.url, map[string]any{"model": chatModel, "messages": userText(words(limit - 40)), "logit_bias": banEOS})
		require.Equal(t, "length", c.Choices[0].FinishReason)
		require.LessOrEqual(t, c.Usage.PromptTokens+c.Usage.CompletionTokens, limit)
	})
}
