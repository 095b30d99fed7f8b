package test

import (
	"bytes"
	"encoding/binary"
	"encoding/json"
	"io"
	"math"
	"math/rand/v2"
	"mime/multipart"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

const goForwardRaw = "/usr/share/pocketsphinx/test/data/goforward.raw"

// TestAudioEndpoints drives /v1/audio/transcriptions and /v1/audio/speech of the real
// bin/omniserve with real speech (pocketsphinx-testdata's "go forward ten meters"), then with
// the official OpenAI Node SDK.
func TestAudioEndpoints(t *testing.T) {
	raw, err := os.ReadFile(goForwardRaw)
	require.NoError(t, err, "install pocketsphinx-testdata")
	s := startBinary(t, "--config", "configs/omni-cpu.yaml", "--model", "dummy:tiny",
		"--cache-dir", filepath.Join(t.TempDir(), "cache"))
	base := "http://" + s.addr + "/v1"
	wav := pcm16WAV(raw, 16000)

	t.Run("transcribe raw pcm json", func(t *testing.T) {
		code, body := postForm(t, base, map[string]string{"model": "whisper-1"}, "goforward.raw", raw)
		require.Equal(t, http.StatusOK, code, string(body))
		var got struct{ Text string }
		require.NoError(t, json.Unmarshal(body, &got))
		require.Equal(t, "go forward ten meters", got.Text)
	})
	t.Run("transcribe wav text and verbose_json", func(t *testing.T) {
		code, body := postForm(t, base, map[string]string{"model": "whisper-1", "response_format": "text", "language": "en"}, "a.wav", wav)
		require.Equal(t, http.StatusOK, code, string(body))
		require.Equal(t, "go forward ten meters\n", string(body))
		code, body = postForm(t, base, map[string]string{"model": "whisper-1", "response_format": "verbose_json"}, "a.wav", wav)
		require.Equal(t, http.StatusOK, code, string(body))
		var v struct {
			Text     string
			Duration float64
			Segments []map[string]any
		}
		require.NoError(t, json.Unmarshal(body, &v))
		require.Equal(t, "go forward ten meters", v.Text)
		require.InDelta(t, float64(len(raw))/32000, v.Duration, 0.01)
		require.Len(t, v.Segments, 1)
	})
	t.Run("transcribe errors", func(t *testing.T) {
		tests := []struct {
			name   string
			fields map[string]string
			file   string
			data   []byte
			param  string
		}{
			{"no model", map[string]string{}, "a.wav", wav, "model"},
			{"no file", map[string]string{"model": "m"}, "", nil, "file"},
			{"mp3", map[string]string{"model": "m"}, "a.mp3", []byte("ID3\x03junk"), "file"},
			{"srt", map[string]string{"model": "m", "response_format": "srt"}, "a.wav", wav, "response_format"},
			{"french", map[string]string{"model": "m", "language": "fr"}, "a.wav", wav, "language"},
			{"odd pcm", map[string]string{"model": "m"}, "a.pcm", []byte{1, 2, 3}, "file"},
			{"logprobs with text", map[string]string{"model": "m", "response_format": "text", "include[]": "logprobs"}, "a.wav", wav, "include"},
			{"unknown include", map[string]string{"model": "m", "stream": "true", "include[]": "tokens"}, "a.wav", wav, "include"},
		}
		for _, tt := range tests {
			t.Run(tt.name, func(t *testing.T) {
				code, body := postForm(t, base, tt.fields, tt.file, tt.data)
				require.Equal(t, http.StatusBadRequest, code, string(body))
				requireOpenAIError(t, body, "invalid_request_error", tt.param)
			})
		}
	})
	t.Run("speech pcm streams", func(t *testing.T) {
		resp := postJSON(t, base+"/audio/speech", map[string]any{"model": "tts-1", "voice": "alloy",
			"input": "Go forward ten meters. Then turn left and stop.", "response_format": "pcm"})
		defer resp.Body.Close()
		require.Equal(t, http.StatusOK, resp.StatusCode)
		require.Equal(t, "audio/pcm", resp.Header.Get("Content-Type"))
		require.Equal(t, []string{"chunked"}, resp.TransferEncoding)
		pcm, err := io.ReadAll(resp.Body)
		require.NoError(t, err)
		require.Zero(t, len(pcm)%2)
		require.Greater(t, len(pcm), 2*24000, "over a second of 24 kHz speech")
	})
	t.Run("speech wav round trip through the ASR", func(t *testing.T) {
		resp := postJSON(t, base+"/audio/speech", map[string]any{"model": "tts-1", "voice": "alloy", "input": "go forward ten meters"})
		defer resp.Body.Close()
		require.Equal(t, http.StatusOK, resp.StatusCode)
		require.Equal(t, "audio/wav", resp.Header.Get("Content-Type"))
		b, err := io.ReadAll(resp.Body)
		require.NoError(t, err)
		require.Equal(t, "RIFF", string(b[:4]))
		require.Equal(t, uint32(24000), binary.LittleEndian.Uint32(b[24:]))
		code, body := postForm(t, base, map[string]string{"model": "m", "sample_rate": "24000"}, "speech.pcm", b[44:])
		require.Equal(t, http.StatusOK, code, string(body))
		// pocketsphinx hears flite's synthetic voice poorly ("though far into any errors" for
		// this phrase), so only check that the round trip carries speech, not silence.
		t.Logf("TTS → ASR: %s", body)
		var got struct{ Text string }
		require.NoError(t, json.Unmarshal(body, &got))
		require.GreaterOrEqual(t, len(strings.Fields(got.Text)), 2, "the synthesized audio holds words")
	})
	t.Run("speech errors", func(t *testing.T) {
		tests := []struct {
			name  string
			body  map[string]any
			param string
		}{
			{"no input", map[string]any{"model": "m", "voice": "alloy"}, "input"},
			{"no model", map[string]any{"input": "hi", "voice": "alloy"}, "model"},
			{"mp3", map[string]any{"model": "m", "voice": "alloy", "input": "hi", "response_format": "mp3"}, "response_format"},
			{"speed", map[string]any{"model": "m", "voice": "alloy", "input": "hi", "speed": 2}, "speed"},
			{"symbols only", map[string]any{"model": "m", "voice": "alloy", "input": "?!"}, "input"},
		}
		for _, tt := range tests {
			t.Run(tt.name, func(t *testing.T) {
				resp := postJSON(t, base+"/audio/speech", tt.body)
				defer resp.Body.Close()
				body, err := io.ReadAll(resp.Body)
				require.NoError(t, err)
				require.Equal(t, http.StatusBadRequest, resp.StatusCode, string(body))
				requireOpenAIError(t, body, "invalid_request_error", tt.param)
			})
		}
	})
	t.Run("openai node sdk", func(t *testing.T) {
		wavPath := filepath.Join(t.TempDir(), "goforward.wav")
		require.NoError(t, os.WriteFile(wavPath, wav, 0o600))
		out := runNodeScript(t, "audio.mjs", "OMNISERVE_BASE_URL="+base, "OMNISERVE_AUDIO_WAV="+wavPath)
		var got struct {
			JSON    string `json:"json"`
			Text    string `json:"text"`
			Verbose struct {
				Text string `json:"text"`
			} `json:"verbose"`
			PCM struct {
				Bytes, Chunks int
			} `json:"pcm"`
			WAV struct{ Bytes int } `json:"wav"`
			MP3 struct {
				Status int    `json:"status"`
				Param  string `json:"param"`
			} `json:"mp3"`
			FR struct {
				Status int `json:"status"`
			} `json:"fr"`
			Stream struct {
				Events []string `json:"events"`
				Joined string   `json:"joined"`
			} `json:"stream"`
			StreamDone string `json:"streamDone"`
			Logprobs   struct {
				Status int    `json:"status"`
				Param  string `json:"param"`
			} `json:"logprobs"`
			LogprobsJSON struct {
				Text     string        `json:"text"`
				Logprobs []nodeLogprob `json:"logprobs"`
			} `json:"logprobsJSON"`
			LogprobsStream struct {
				Deltas []struct {
					Delta    string        `json:"delta"`
					Logprobs []nodeLogprob `json:"logprobs"`
				} `json:"deltas"`
				Text     string        `json:"text"`
				Logprobs []nodeLogprob `json:"logprobs"`
			} `json:"logprobsStream"`
		}
		require.NoError(t, json.Unmarshal([]byte(out), &got), out)
		require.Equal(t, "go forward ten meters", got.JSON)
		require.Equal(t, "go forward ten meters", got.Text)
		require.Equal(t, "go forward ten meters", got.Verbose.Text)
		require.Greater(t, got.PCM.Bytes, 24000)
		require.Greater(t, got.WAV.Bytes, 44+24000)
		require.Equal(t, 400, got.MP3.Status)
		require.Equal(t, "response_format", got.MP3.Param)
		require.Equal(t, 400, got.FR.Status)
		require.Equal(t, "go forward ten meters", got.StreamDone)
		require.Equal(t, "go forward ten meters", got.Stream.Joined)
		require.GreaterOrEqual(t, len(got.Stream.Events), 3, "deltas while decoding, then done: %v", got.Stream.Events)
		require.Equal(t, "transcript.text.done", got.Stream.Events[len(got.Stream.Events)-1])
		require.Equal(t, 400, got.Logprobs.Status, "include logprobs with verbose_json")
		require.Equal(t, "include", got.Logprobs.Param)

		require.Equal(t, "go forward ten meters", got.LogprobsJSON.Text)
		requireWordLogprobs(t, got.LogprobsJSON.Text, got.LogprobsJSON.Logprobs)
		ls := got.LogprobsStream
		require.Equal(t, "go forward ten meters", ls.Text)
		requireWordLogprobs(t, ls.Text, ls.Logprobs)
		require.Equal(t, got.LogprobsJSON.Logprobs, ls.Logprobs, "the same audio gives the same posteriors")
		require.NotEmpty(t, ls.Deltas)
		var joined strings.Builder
		for _, d := range ls.Deltas {
			joined.WriteString(d.Delta)
		}
		require.Equal(t, ls.Text, joined.String())
		last := ls.Deltas[len(ls.Deltas)-1]
		require.NotEmpty(t, last.Logprobs, "the final delta carries its words' logprobs")
		var lastTok strings.Builder
		for _, lp := range last.Logprobs {
			lastTok.WriteString(lp.Token)
		}
		require.Equal(t, last.Delta, lastTok.String())
	})
}

// nodeLogprob is OpenAI's transcription logprob entry as the Node SDK hands it back.
type nodeLogprob struct {
	Token   string  `json:"token"`
	Logprob float64 `json:"logprob"`
	Bytes   []int   `json:"bytes"`
}

// requireWordLogprobs checks logprobs are one per word of text, each a word with its leading
// space, its UTF-8 bytes, and a finite log probability ≤ 0, and that the tokens join to text.
func requireWordLogprobs(t *testing.T, text string, lps []nodeLogprob) {
	t.Helper()
	require.Len(t, lps, len(strings.Fields(text)), "one logprob per word: %+v", lps)
	var joined strings.Builder
	for i, lp := range lps {
		joined.WriteString(lp.Token)
		b := make([]int, len(lp.Token))
		for j := range len(lp.Token) {
			b[j] = int(lp.Token[j])
		}
		require.Equal(t, b, lp.Bytes, "token %d %q", i, lp.Token)
		require.LessOrEqual(t, lp.Logprob, 0.0, "token %d", i)
		require.False(t, math.IsInf(lp.Logprob, 0) || math.IsNaN(lp.Logprob), "token %d", i)
	}
	require.Equal(t, text, joined.String())
}

// runNodeScript runs script of the pinned OpenAI Node SDK's project (test/openai-node) and
// returns its last stdout line (runNode).
func runNodeScript(t *testing.T, script string, env ...string) string {
	t.Helper()
	last, _ := runNode(t, "openai-node", script, 3*time.Minute, env...)
	return last
}

func pcm16WAV(pcm []byte, rate int) []byte {
	b := make([]byte, 44, 44+len(pcm))
	copy(b, "RIFF")
	binary.LittleEndian.PutUint32(b[4:], uint32(36+len(pcm)))
	copy(b[8:], "WAVEfmt ")
	binary.LittleEndian.PutUint32(b[16:], 16)
	binary.LittleEndian.PutUint16(b[20:], 1)
	binary.LittleEndian.PutUint16(b[22:], 1)
	binary.LittleEndian.PutUint32(b[24:], uint32(rate))
	binary.LittleEndian.PutUint32(b[28:], uint32(rate*2))
	binary.LittleEndian.PutUint16(b[32:], 2)
	binary.LittleEndian.PutUint16(b[34:], 16)
	copy(b[36:], "data")
	binary.LittleEndian.PutUint32(b[40:], uint32(len(pcm)))
	return append(b, pcm...)
}

// postForm posts a multipart transcription request; file "" sends no file part.
func postForm(t *testing.T, base string, fields map[string]string, file string, data []byte) (int, []byte) {
	t.Helper()
	var body bytes.Buffer
	mw := multipart.NewWriter(&body)
	for k, v := range fields {
		require.NoError(t, mw.WriteField(k, v))
	}
	if file != "" {
		fw, err := mw.CreateFormFile("file", file)
		require.NoError(t, err)
		_, err = fw.Write(data)
		require.NoError(t, err)
	}
	require.NoError(t, mw.Close())
	req, err := http.NewRequest(http.MethodPost, base+"/audio/transcriptions", &body)
	require.NoError(t, err)
	req.Header.Set("Content-Type", mw.FormDataContentType())
	resp, err := (&http.Client{Timeout: 60 * time.Second}).Do(req)
	require.NoError(t, err)
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	require.NoError(t, err)
	return resp.StatusCode, b
}

func postJSON(t *testing.T, url string, v any) *http.Response {
	t.Helper()
	b, err := json.Marshal(v)
	require.NoError(t, err)
	resp, err := (&http.Client{Timeout: 60 * time.Second}).Post(url, "application/json", bytes.NewReader(b))
	require.NoError(t, err)
	return resp
}

func requireOpenAIError(t *testing.T, body []byte, typ, param string) {
	t.Helper()
	var e struct {
		Error struct {
			Message string  `json:"message"`
			Type    string  `json:"type"`
			Param   *string `json:"param"`
		} `json:"error"`
	}
	require.NoError(t, json.Unmarshal(body, &e), string(body))
	require.Equal(t, typ, e.Error.Type, string(body))
	require.NotEmpty(t, e.Error.Message)
	require.NotNil(t, e.Error.Param, string(body))
	require.Equal(t, param, *e.Error.Param)
}

// TestAudioTranscriptionDeterministic posts the same noisy clip before and after other speech:
// each request starts the recognizer from the same state, so the transcript does not change.
func TestAudioTranscriptionDeterministic(t *testing.T) {
	raw, err := os.ReadFile(goForwardRaw)
	require.NoError(t, err, "install pocketsphinx-testdata")
	other, err := os.ReadFile("/usr/share/pocketsphinx/test/data/numbers.raw")
	require.NoError(t, err, "install pocketsphinx-testdata")
	s := startBinary(t, "--config", "configs/omni-cpu.yaml", "--model", "dummy:tiny",
		"--cache-dir", filepath.Join(t.TempDir(), "cache"))
	base := "http://" + s.addr + "/v1"
	noisy := pcm16WAV(addNoise(raw, 5, 26), 16000)
	transcribe := func(wav []byte) string {
		code, body := postForm(t, base, map[string]string{"model": "whisper-1", "response_format": "text"}, "a.wav", wav)
		require.Equal(t, http.StatusOK, code, string(body))
		return string(body)
	}
	first := transcribe(noisy)
	for range 3 {
		transcribe(pcm16WAV(other, 16000))
		require.Equal(t, first, transcribe(noisy), "the same audio must give the same transcript")
	}
	t.Logf("noisy clip (5 dB SNR): %q", strings.TrimSpace(first))
}

// addNoise mixes white noise into s16le pcm at snrDB from a fixed seed.
func addNoise(pcm []byte, snrDB float64, seed uint64) []byte {
	n := len(pcm) / 2
	var p float64
	for i := range n {
		v := float64(int16(binary.LittleEndian.Uint16(pcm[2*i:])))
		p += v * v
	}
	sigma := math.Sqrt(p / float64(n) / math.Pow(10, snrDB/10))
	r := rand.New(rand.NewPCG(seed, seed))
	out := make([]byte, len(pcm))
	for i := range n {
		v := float64(int16(binary.LittleEndian.Uint16(pcm[2*i:]))) + r.NormFloat64()*sigma
		binary.LittleEndian.PutUint16(out[2*i:], uint16(int16(max(-32768, min(32767, v)))))
	}
	return out
}
