package api

import (
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

func TestChatAudioStore(t *testing.T) {
	t.Parallel()
	now := time.Unix(1000, 0)
	s := newChatAudioStore(3*(chatAudioEntryOverhead+20), time.Hour)
	s.now = func() time.Time { return now }
	exp := now.Add(time.Hour)
	s.put("audio_a", "0123456789", exp) // 7 + 10 bytes + overhead
	s.put("audio_b", "0123456789", exp)
	s.put("audio_c", "0123456789", exp)
	_, ok := s.get("audio_a") // a is now the most recently used
	require.True(t, ok)
	s.put("audio_d", "0123456789", exp) // over budget: b, the least recently used, goes
	_, ok = s.get("audio_b")
	require.False(t, ok)
	tr, ok := s.get("audio_a")
	require.True(t, ok)
	require.Equal(t, "0123456789", tr)
	n, b := s.usage()
	require.Equal(t, 3, n)
	require.LessOrEqual(t, b, s.maxBytes)
	now = exp // expired
	_, ok = s.get("audio_c")
	require.False(t, ok)
	s.put("audio_big", string(make([]byte, 1<<20)), exp.Add(time.Hour)) // larger than the store: not kept
	_, ok = s.get("audio_big")
	require.False(t, ok)
}

func TestParseChatRequestSampling(t *testing.T) {
	t.Parallel()
	cfg := ChatConfig{Models: []string{"m"}}
	cfg.withDefaults()
	store := newChatAudioStore(1<<20, time.Hour)
	store.put("audio_1", "go forward ten meters", time.Now().Add(time.Hour))
	msgs := `"messages":[{"role":"user","content":"hi"}]`
	for _, tc := range []struct {
		name, body, param string
	}{
		{"presence high", `{"model":"m",` + msgs + `,"presence_penalty":2.5}`, "presence_penalty"},
		{"frequency low", `{"model":"m",` + msgs + `,"frequency_penalty":-3}`, "frequency_penalty"},
		{"bias value", `{"model":"m",` + msgs + `,"logit_bias":{"5":101}}`, "logit_bias"},
		{"bias key", `{"model":"m",` + msgs + `,"logit_bias":{"x":1}}`, "logit_bias"},
		{"bias negative key", `{"model":"m",` + msgs + `,"logit_bias":{"-4":1}}`, "logit_bias"},
		{"top_logprobs range", `{"model":"m",` + msgs + `,"logprobs":true,"top_logprobs":21}`, "top_logprobs"},
		{"top_logprobs alone", `{"model":"m",` + msgs + `,"top_logprobs":2}`, "top_logprobs"},
		{"format type", `{"model":"m",` + msgs + `,"response_format":{"type":"xml"}}`, "response_format.type"},
		{"schema missing", `{"model":"m",` + msgs + `,"response_format":{"type":"json_schema"}}`, "response_format.json_schema"},
		{"schema name", `{"model":"m",` + msgs + `,"response_format":{"type":"json_schema","json_schema":{"schema":{}}}}`, "response_format.json_schema.name"},
		{"n zero", `{"model":"m",` + msgs + `,"n":0}`, "n"},
		{"n large", `{"model":"m",` + msgs + `,"n":9}`, "n"},
		{"unknown audio id", `{"model":"m","messages":[{"role":"assistant","audio":{"id":"audio_x"}},{"role":"user","content":"hi"}]}`, "messages[0].audio.id"},
		{"audio id on user", `{"model":"m","messages":[{"role":"user","content":"a","audio":{"id":"audio_1"}}]}`, "messages[0].audio"},
		{"empty assistant", `{"model":"m","messages":[{"role":"assistant","content":null},{"role":"user","content":"hi"}]}`, "messages[0].content"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, e := parseChatRequest([]byte(tc.body), &cfg, store)
			require.NotNil(t, e)
			require.Equal(t, 400, e.Status)
			require.Equal(t, tc.param, e.Param, e.Message)
		})
	}

	p, e := parseChatRequest([]byte(`{"model":"m",`+msgs+`}`), &cfg, store)
	require.Nil(t, e)
	require.True(t, p.Req.Sampling.RandomSeed, "no seed: every completion draws its own")
	require.Equal(t, 1, p.N)

	p, e = parseChatRequest([]byte(`{"model":"m",`+msgs+`,"seed":7,"presence_penalty":-2,"frequency_penalty":2,"logit_bias":{"12":-100},"logprobs":true,"top_logprobs":3,"n":3,"response_format":{"type":"json_object"}}`), &cfg, store)
	require.Nil(t, e)
	s := p.Req.Sampling
	require.False(t, s.RandomSeed)
	require.Equal(t, uint32(7), s.Seed)
	require.Equal(t, float32(-2), s.PresencePenalty)
	require.Equal(t, float32(2), s.FrequencyPenalty)
	require.Equal(t, map[int]float32{12: -100}, s.LogitBias)
	require.True(t, s.Logprobs)
	require.Equal(t, 3, s.TopLogprobs)
	require.Equal(t, 3, p.N)
	require.Contains(t, s.Grammar, "root")

	p, e = parseChatRequest([]byte(`{"model":"m","messages":[{"role":"user","content":"where"},{"role":"assistant","audio":{"id":"audio_1"}},{"role":"user","content":"and then?"}]}`), &cfg, store)
	require.Nil(t, e)
	require.Equal(t, "go forward ten meters", p.Req.Messages[1].Text)
}
