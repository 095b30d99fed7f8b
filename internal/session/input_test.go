package session

import (
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/omniserve/omniserve/internal/testenv"
)

// takeAppend in the session's format: every wire format lands on the 16 kHz input clock; an
// empty append takes nothing.
func TestInputTake(t *testing.T) {
	tests := []struct {
		name    string
		data    []byte
		format  AudioFormat
		samples int
		ms      float64
		wantErr bool
	}{
		{"pcm16 24 kHz, 100 ms", make([]byte, 4800), AudioFormat{Type: "pcm16", Rate: 24000}, 1600, 100, false},
		{"pcm16 16 kHz, 100 ms", make([]byte, 3200), AudioFormat{Type: "pcm16", Rate: 16000}, 1600, 100, false},
		{"g711 8 kHz, 100 ms", make([]byte, 800), AudioFormat{Type: "g711_ulaw", Rate: 8000}, 1600, 100, false},
		{"empty", nil, AudioFormat{Type: "pcm16", Rate: 16000}, 0, 0, false},
		{"odd pcm16 bytes", make([]byte, 3), AudioFormat{Type: "pcm16", Rate: 16000}, 0, 0, true},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			var in inputAudio
			pcm, fe := in.takeAppend(tc.data, tc.format, nil)
			if tc.wantErr {
				require.NotNil(t, fe)
				require.Zero(t, in.inputMs)
				return
			}
			require.Nil(t, fe)
			// A streaming resampler may hold a few samples back: within 1 ms.
			require.InDelta(t, tc.samples, len(pcm), 16)
			require.InDelta(t, tc.ms, in.inputMs, 1)
			require.Equal(t, msOf(len(pcm)), in.inputMs)
		})
	}
}

// buffer / bufferedMs / takeBuffer: the buffer starts where its first chunk starts on the input
// clock, refuses what passes the pending bound, and a commit takes only the chunks not yet
// forwarded.
func TestInputBuffer(t *testing.T) {
	chunk := make([]float32, 1600) // 100 ms
	tests := []struct {
		name       string
		before     float64 // input ms taken before the buffer started (earlier, committed audio)
		chunks     int
		forwarded  int
		maxBytes   int
		wantChunks int // chunks buffered
		wantRest   int // chunks the commit feeds
	}{
		{"one chunk", 0, 1, 0, 1 << 20, 1, 1},
		{"after earlier input", 2500, 3, 0, 1 << 20, 3, 3},
		{"forwarded head", 0, 4, 3, 1 << 20, 4, 1},
		{"bounded", 0, 5, 0, 3 * 4 * 1600, 3, 3},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			in := inputAudio{inputMs: tc.before}
			require.Zero(t, in.bufferedMs())
			for i := range tc.chunks {
				in.inputMs += msOf(len(chunk))
				first, ok := in.buffer(chunk, tc.maxBytes, float64(10+i))
				require.Equal(t, i < tc.wantChunks, ok, "chunk %d", i)
				require.Equal(t, i == 0, first && ok, "chunk %d", i)
			}
			require.Len(t, in.inputBuf, tc.wantChunks)
			require.Equal(t, tc.before, in.bufStartMs)
			in.inputFwd = tc.forwarded
			rest, started, ms := in.takeBuffer()
			require.Len(t, rest, tc.wantRest)
			require.Equal(t, 10.0, started, "t0 is the first chunk's receipt")
			require.InDelta(t, float64(tc.chunks)*100, ms, 0.001, "the clock ran on for refused chunks too")
			require.Empty(t, in.inputBuf)
			require.Zero(t, in.inputBytes)
			require.Zero(t, in.inputFwd)
		})
	}
	var in inputAudio
	in.inputMs = 50
	in.buffer(make([]float32, 800), 1<<20, 1)
	require.InDelta(t, 50, in.bufferedMs(), 0.001)
	in.clearBuffer()
	require.Zero(t, in.bufferedMs())
	require.Zero(t, in.inputStartTS)
}

// hear: real speech under server_vad gives one speech_started and one speech_stopped, at the
// speech's place on the input clock (after leading silence), with the onset stamped by the
// receipt of its own append; the silent VAD (announce false) reports the same segment but
// announces nothing; restartVAD closes an announced segment once.
func TestInputHear(t *testing.T) {
	speech := pcmFromRaw(testenv.ReadFile(t, "/usr/share/pocketsphinx/test/data/goforward.raw", "pocketsphinx-testdata"))
	lead := make([]float32, EngineRate) // 1 s of silence before the speech
	tail := make([]float32, EngineRate) // and after it
	stream := append(append(append([]float32{}, lead...), speech...), tail...)
	td := *defaultTurnDetection()
	tests := []struct {
		name     string
		announce bool
		edges    int
	}{
		{"server_vad", true, 2},
		{"silent (auto_response t0)", false, 0},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			var in inputAudio
			defer in.closeVAD()
			var edges []speechEdge
			started, stopped := 0, 0
			var onsetAt, startedAt float64
			const chunk = 1600 // 100 ms appends, received at t = their index (s)
			for i := 0; i < len(stream); i += chunk {
				pcm := stream[i:min(i+chunk, len(stream))]
				in.inputMs += msOf(len(pcm))
				require.NoError(t, in.ensureVAD(td, len(pcm)))
				res, e, err := in.hear(in.withoutEcho(pcm), tc.announce, false, float64(i/chunk))
				require.NoError(t, err)
				edges = append(edges, e...)
				if res.started {
					started++
					onsetAt, startedAt = in.onsetAt, float64(i/chunk)
				}
				if res.stopped {
					stopped++
				}
			}
			require.Equal(t, 1, started, "one segment")
			require.Len(t, edges, tc.edges)
			require.Greater(t, startedAt, onsetAt, "the onset is stamped earlier than the append that confirmed it")
			if tc.announce {
				require.Equal(t, 1, stopped)
				require.True(t, edges[0].started)
				require.False(t, edges[1].started)
				// audio_start_ms: inside the clip (after the 1 s of silence, less prefix_padding_ms).
				require.GreaterOrEqual(t, edges[0].atMs, 1000-td.PrefixPaddingMs)
				require.Less(t, float64(edges[0].atMs), 1000+msOf(len(speech)))
				require.Greater(t, edges[1].atMs, edges[0].atMs+1000)
				require.LessOrEqual(t, float64(edges[1].atMs), in.inputMs)
			} else {
				require.Zero(t, stopped, "a silent VAD closes no announced segment")
			}
			require.False(t, in.restartVAD(), "no announced segment is open")
			require.Equal(t, in.inputMs, in.vadBaseMs)
		})
	}
}

// ensureVAD recreates the VAD when the settings change, and restartVAD reports an announced
// segment that was open.
func TestInputVADLifecycle(t *testing.T) {
	speech := pcmFromRaw(testenv.ReadFile(t, "/usr/share/pocketsphinx/test/data/goforward.raw", "pocketsphinx-testdata"))
	var in inputAudio
	defer in.closeVAD()
	td := *defaultTurnDetection()
	require.NoError(t, in.ensureVAD(td, 0))
	first := in.vad
	require.NoError(t, in.ensureVAD(td, 0))
	require.Same(t, first, in.vad, "same settings: same VAD")
	for i := 0; i+1600 <= len(speech) && !in.inSpeech; i += 1600 {
		in.inputMs += 100
		_, _, err := in.hear(speech[i:i+1600], true, false, 0)
		require.NoError(t, err)
	}
	require.True(t, in.inSpeech, "the speech opened an announced segment")
	require.True(t, in.restartVAD())
	require.False(t, in.inSpeech)
	require.False(t, in.restartVAD())
	td.SilenceDurationMs += 100
	require.NoError(t, in.ensureVAD(td, 0))
	require.NotSame(t, first, in.vad, "new settings: a new VAD")
	in.closeVAD()
	require.Nil(t, in.vad)
	require.False(t, in.restartVAD(), "no VAD: nothing to restart")
}

// setNoiseReduction: created, kept, replaced and closed as the configuration says.
func TestInputNoiseReduction(t *testing.T) {
	var in inputAudio
	defer in.closeDenoise()
	steps := []struct {
		kind    string
		wantNew bool
	}{
		{"", false},
		{"near_field", true},
		{"near_field", false},
		{"far_field", true},
		{"", false},
	}
	for _, st := range steps {
		before := in.denoise
		require.NoError(t, in.setNoiseReduction(st.kind))
		if st.kind == "" {
			require.Nil(t, in.denoise)
			continue
		}
		require.Equal(t, st.kind, in.denoise.Kind())
		require.Equal(t, st.wantNew, before != in.denoise)
	}
	require.Error(t, in.setNoiseReduction("underwater"))
}

// takeAppend: the event's own format wins over the session's, and a refusal names its field.
func TestInputTakeAppend(t *testing.T) {
	pcm16 := AudioFormat{Type: "pcm16", Rate: 16000}
	tests := []struct {
		name    string
		data    []byte
		own     *AudioFormat
		samples int
		code    string // "" = accepted
		param   string
	}{
		{"session format", make([]byte, 3200), nil, 1600, "", ""},
		{"own format", make([]byte, 800), &AudioFormat{Type: "g711_ulaw", Rate: 8000}, 1600, "", ""},
		{"unknown own format", make([]byte, 800), &AudioFormat{Type: "mp3"}, 0, "unsupported_audio_format", "format"},
		{"undecodable", make([]byte, 3), nil, 0, "bad_audio", "audio"},
		{"empty", nil, nil, 0, "", ""},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			var in inputAudio
			pcm, fe := in.takeAppend(tc.data, pcm16, tc.own)
			if tc.code != "" {
				require.NotNil(t, fe)
				require.Equal(t, tc.code, fe.Code)
				require.Equal(t, tc.param, fe.Param)
				require.NotEmpty(t, fe.Message)
				require.Zero(t, in.inputMs)
				return
			}
			require.Nil(t, fe)
			require.InDelta(t, tc.samples, len(pcm), 16)
		})
	}
}

// listen: which VAD runs under which turn_detection, what it announces, and that a started
// edge carries the user item's id.
func TestInputListen(t *testing.T) {
	speech := pcmFromRaw(testenv.ReadFile(t, "/usr/share/pocketsphinx/test/data/goforward.raw", "pocketsphinx-testdata"))
	stream := append(append(make([]float32, EngineRate/2), speech...), make([]float32, EngineRate)...)
	server := defaultTurnDetection()
	semantic := *server
	semantic.Type, semantic.Eagerness = "semantic_vad", "high"
	tests := []struct {
		name       string
		td         *TurnDetection
		auto       bool
		vad        bool // a VAD runs
		started    int  // started edges
		stopped    int  // plain (server_vad) stopped edges
		pauses     bool // semantic_vad reports a pause instead of a stop
		wantItemID bool
	}{
		{"server_vad", server, false, true, 1, 1, false, true},
		{"semantic_vad pauses", &semantic, false, true, 1, 0, true, true},
		{"null, auto_response: silent", nil, true, true, 0, 0, false, false},
		{"null, manual: no vad", nil, false, false, 0, 0, false, false},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			var in inputAudio
			defer in.closeVAD()
			started, stopped, pauses, confirmed := 0, 0, 0, 0
			for i := 0; i < len(stream); i += 1600 {
				pcm := stream[i:min(i+1600, len(stream))]
				in.inputMs += msOf(len(pcm))
				res, edges, err := in.listen(pcm, tc.td, server, tc.auto, float64(i))
				require.NoError(t, err)
				if res.started {
					confirmed++
				}
				for _, e := range edges {
					switch {
					case e.started:
						started++
					case e.pause:
						pauses++
					case !e.resumed:
						stopped++
					}
				}
			}
			require.Equal(t, tc.vad, in.vad != nil)
			require.Equal(t, tc.started, started)
			require.Equal(t, tc.stopped, stopped)
			require.Equal(t, tc.pauses, pauses > 0)
			require.Equal(t, tc.wantItemID, in.speechItemID != "")
			if tc.vad {
				require.Equal(t, 1, confirmed, "the VAD confirmed the speech once")
			}
		})
	}
}

// The commit feeds only what did not go ahead (inputFwd, which engineLink.forward advances).
func TestInputUnforwarded(t *testing.T) {
	var in inputAudio
	chunk := make([]float32, 160)
	for range 3 {
		_, ok := in.buffer(chunk, 1<<20, 1)
		require.True(t, ok)
	}
	require.Len(t, in.inputBuf[in.inputFwd:], 3)
	in.inputFwd += 2
	rest, _, _ := in.takeBuffer()
	require.Len(t, rest, 1)
	require.Empty(t, in.inputBuf[in.inputFwd:])
}

// speechArrival: an auto_response turn's t0 is its first speech, at the onset's own append when
// this append confirmed it.
func TestSpeechArrival(t *testing.T) {
	tests := []struct {
		name    string
		vr      vadResult
		onsetAt float64
		at      float64
		ok      bool
	}{
		{"silence", vadResult{}, 3, 0, false},
		{"speech goes on", vadResult{voiced: true}, 3, 10, true},
		{"confirmed here: its onset", vadResult{voiced: true, started: true}, 3, 3, true},
		{"confirmed, no onset stamp", vadResult{voiced: true, started: true}, 0, 10, true},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			in := inputAudio{onsetAt: tc.onsetAt}
			at, ok := in.speechArrival(tc.vr, 10)
			require.Equal(t, tc.ok, ok)
			require.Equal(t, tc.at, at)
		})
	}
}

// takeAppend's direct path for pcm16 at the engine rate gives exactly what the decoder gives,
// and an odd length is refused in the decoder's words.
func TestInputTakeAppendDirectPCM16(t *testing.T) {
	data := make([]byte, 3200)
	for i := range data {
		data[i] = byte(i * 7)
	}
	f := AudioFormat{Type: "pcm16", Rate: EngineRate}
	var in inputAudio
	got, fe := in.takeAppend(data, f, nil)
	require.Nil(t, fe)
	want, err := DecodeInput(data, f)
	require.NoError(t, err)
	require.Equal(t, want, got)

	_, fe = in.takeAppend(data[:3], f, nil)
	require.NotNil(t, fe)
	_, err = DecodeInput(data[:3], f)
	require.EqualError(t, err, fe.Message)
}
