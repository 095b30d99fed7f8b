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
		partial(p)
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
		{"logprobs", map[string][]string{"stream": {"true"}, "include[]": {"logprobs"}}, "include"},
		{"logprobs not streamed", map[string][]string{"include": {"logprobs"}}, "include"},
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
