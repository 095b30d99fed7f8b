package api

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"mime/multipart"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/omniserve/omniserve/internal/audio"
)

// scriptedASR plays back partial hypotheses and a final text; it checks it got the audio.
type scriptedASR struct {
	t        *testing.T
	partials []string
	final    string
	samples  int
}

func (s *scriptedASR) Transcribe(context.Context, []float32) (string, error) {
	s.t.Error("Transcribe called: the streaming path must use TranscribeStream")
	return "", nil
}

func (s *scriptedASR) TranscribeStream(_ context.Context, pcm []float32, partial func(string)) (string, error) {
	require.Len(s.t, pcm, s.samples)
	for _, p := range s.partials {
		if partial != nil { // nil on the non-streaming logprob path, as the real ASR allows
			partial(p)
		}
	}
	return s.final, nil
}

func postTranscription(t *testing.T, h http.Handler, fields map[string][]string) *httptest.ResponseRecorder {
	t.Helper()
	var body bytes.Buffer
	mw := multipart.NewWriter(&body)
	for k, vs := range fields {
		for _, v := range vs {
			require.NoError(t, mw.WriteField(k, v))
		}
	}
	fw, err := mw.CreateFormFile("file", "a.raw")
	require.NoError(t, err)
	_, err = fw.Write(make([]byte, 3200)) // 100 ms of 16 kHz silence
	require.NoError(t, err)
	require.NoError(t, mw.Close())
	req := httptest.NewRequest(http.MethodPost, "/v1/audio/transcriptions", &body)
	req.Header.Set("Content-Type", mw.FormDataContentType())
	rec := httptest.NewRecorder()
	h.ServeHTTP(rec, req)
	return rec
}

func TestTranscriptionStream(t *testing.T) {
	asr := &scriptedASR{t: t, samples: 1600, final: "go forward ten meters",
		partials: []string{"go", "go four", "go forward ten", "go forward ten me", "go forward ten meters"}}
	h := NewTranscriptionsHandler(AudioConfig{}, asr, nil)
	rec := postTranscription(t, h, map[string][]string{"model": {"gpt-4o-transcribe"}, "stream": {"true"}})
	require.Equal(t, http.StatusOK, rec.Code, rec.Body.String())
	require.Equal(t, "text/event-stream", rec.Header().Get("Content-Type"))
	var (
		types  []string
		deltas strings.Builder
		done   transcriptDone
	)
	sc := bufio.NewScanner(rec.Body)
	for sc.Scan() {
		line, ok := strings.CutPrefix(sc.Text(), "data: ")
		if !ok {
			require.Empty(t, sc.Text())
			continue
		}
		var ev map[string]any
		require.NoError(t, json.Unmarshal([]byte(line), &ev))
		types = append(types, ev["type"].(string))
		switch ev["type"] {
		case "transcript.text.delta":
			deltas.WriteString(ev["delta"].(string))
			require.Contains(t, ev, "logprobs")
		case "transcript.text.done":
			require.NoError(t, json.Unmarshal([]byte(line), &done))
		}
	}
	// A word is sent once two partials agree on it and another follows it in both: "go" at the
	// third partial, " forward" at the fourth, " ten" at the fifth ("four" was revised before
	// that). The final sends " meters".
	require.Equal(t, []string{"transcript.text.delta", "transcript.text.delta", "transcript.text.delta",
		"transcript.text.delta", "transcript.text.done"}, types)
	require.Equal(t, "go forward ten meters", deltas.String())
	require.Equal(t, "go forward ten meters", done.Text)
	require.Equal(t, transcriptUsage{Type: "duration", Seconds: 0.1}, done.Usage)
}

func TestTranscriptionStreamBadFields(t *testing.T) {
	tests := []struct {
		name   string
		fields map[string][]string
		param  string
	}{
		{"logprobs from an ASR without them", map[string][]string{"stream": {"true"}, "include[]": {"logprobs"}}, "include"},
		{"logprobs not streamed, ASR without them", map[string][]string{"include": {"logprobs"}}, "include"},
		{"logprobs with text", map[string][]string{"include[]": {"logprobs"}, "response_format": {"text"}}, "include"},
		{"logprobs with verbose_json", map[string][]string{"include[]": {"logprobs"}, "response_format": {"verbose_json"}}, "include"},
		{"unknown include", map[string][]string{"include[]": {"tokens"}}, "include"},
		{"stream not a boolean", map[string][]string{"stream": {"yes"}}, "stream"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			h := NewTranscriptionsHandler(AudioConfig{}, &scriptedASR{t: t}, nil)
			tt.fields["model"] = []string{"gpt-4o-transcribe"}
			rec := postTranscription(t, h, tt.fields)
			require.Equal(t, http.StatusBadRequest, rec.Code)
			var e struct {
				Error struct {
					Param   string `json:"param"`
					Message string `json:"message"`
				} `json:"error"`
			}
			require.NoError(t, json.Unmarshal(rec.Body.Bytes(), &e), rec.Body.String())
			require.Equal(t, tt.param, e.Error.Param, e.Error.Message)
		})
	}
}

// logprobASR is scriptedASR with word posteriors; it checks that the logprob path is the one taken.
type logprobASR struct {
	scriptedASR
	lps []audio.WordLogprob
}

func (s *logprobASR) TranscribeStream(context.Context, []float32, func(string)) (string, error) {
	s.t.Error("TranscribeStream called: include=logprobs must use TranscribeLogprobs")
	return "", nil
}

func (s *logprobASR) TranscribeLogprobs(ctx context.Context, pcm []float32, partial func(string)) (string, []audio.WordLogprob, error) {
	text, err := s.scriptedASR.TranscribeStream(ctx, pcm, partial)
	return text, s.lps, err
}

func TestTranscriptionLogprobs(t *testing.T) {
	lps := []audio.WordLogprob{{Word: "go", Logprob: -0.002}, {Word: "forward", Logprob: -0.5}, {Word: "ten", Logprob: -0.76}, {Word: "météo", Logprob: -3}}
	want := []transcriptLogprob{
		{Token: "go", Logprob: -0.002, Bytes: []int{'g', 'o'}},
		{Token: " forward", Logprob: -0.5, Bytes: []int{' ', 'f', 'o', 'r', 'w', 'a', 'r', 'd'}},
		{Token: " ten", Logprob: -0.76, Bytes: []int{' ', 't', 'e', 'n'}},
		{Token: " météo", Logprob: -3, Bytes: []int{' ', 'm', 0xc3, 0xa9, 't', 0xc3, 0xa9, 'o'}},
	}
	newASR := func(t *testing.T) *logprobASR {
		return &logprobASR{scriptedASR: scriptedASR{t: t, samples: 1600, final: "go forward ten météo",
			partials: []string{"go", "go four", "go forward ten", "go forward ten me"}}, lps: lps}
	}

	t.Run("json", func(t *testing.T) {
		h := NewTranscriptionsHandler(AudioConfig{}, newASR(t), nil)
		rec := postTranscription(t, h, map[string][]string{"model": {"gpt-4o-transcribe"}, "include[]": {"logprobs"}})
		require.Equal(t, http.StatusOK, rec.Code, rec.Body.String())
		var got struct {
			Text     string              `json:"text"`
			Logprobs []transcriptLogprob `json:"logprobs"`
		}
		require.NoError(t, json.Unmarshal(rec.Body.Bytes(), &got))
		require.Equal(t, "go forward ten météo", got.Text)
		require.Equal(t, want, got.Logprobs)
		require.Contains(t, rec.Body.String(), `"bytes":[103,111]`, "bytes are numbers, not base64")
	})

	t.Run("stream", func(t *testing.T) {
		h := NewTranscriptionsHandler(AudioConfig{}, newASR(t), nil)
		rec := postTranscription(t, h, map[string][]string{"model": {"gpt-4o-transcribe"}, "stream": {"true"}, "include": {"logprobs"}})
		require.Equal(t, http.StatusOK, rec.Code, rec.Body.String())
		var (
			deltas []transcriptDelta
			done   transcriptDone
		)
		sc := bufio.NewScanner(rec.Body)
		for sc.Scan() {
			line, ok := strings.CutPrefix(sc.Text(), "data: ")
			if !ok {
				continue
			}
			if strings.Contains(line, `"transcript.text.done"`) {
				require.NoError(t, json.Unmarshal([]byte(line), &done))
				continue
			}
			var d transcriptDelta
			require.NoError(t, json.Unmarshal([]byte(line), &d))
			deltas = append(deltas, d)
		}
		require.Equal(t, want, done.Logprobs)
		// "go" and " forward" went out as partials settled (no posteriors yet); the final delta
		// " ten météo" carries its two words'.
		require.Len(t, deltas, 3)
		require.Nil(t, deltas[0].Logprobs)
		require.Nil(t, deltas[1].Logprobs)
		require.Equal(t, " ten météo", deltas[2].Delta)
		require.Equal(t, want[2:], deltas[2].Logprobs)
	})
}
