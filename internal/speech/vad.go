package speech

/*
#cgo LDFLAGS: -lwebrtc_audio_processing
#include <stdint.h>
#include <stddef.h>

// libwebrtc-audio-processing 0.3 exports the VAD but installs no header for it; these match
// the exported symbols (WebRtcVad_Create takes no argument and returns the handle in 0.3).
typedef struct WebRtcVadInst VadInst;
VadInst *WebRtcVad_Create(void);
void WebRtcVad_Free(VadInst *handle);
int WebRtcVad_Init(VadInst *handle);
int WebRtcVad_set_mode(VadInst *handle, int mode);
int WebRtcVad_Process(VadInst *handle, int fs, const int16_t *audio_frame, size_t frame_length);
*/
import "C"

import (
	"fmt"
	"math"
	"unsafe"

	"github.com/omniserve/omniserve/internal/audio"
)

// VAD defaults, as the OpenAI realtime API's server_vad defines them. They are the one table of
// turn-detection defaults: the pipeline config (pipeline.thinker.vad) and the realtime sessions
// start from these.
const (
	DefaultThreshold         = 0.5
	DefaultMode              = 2
	DefaultPrefixPaddingMs   = 300
	DefaultSilenceDurationMs = 500
	// DefaultMinSpeechMs is five 30 ms frames: WebRTC VAD flags the step from digital silence
	// to a microphone's noise floor as a 90–120 ms voiced burst (measured on goforward.raw
	// padded with zeros, modes 0–2); 150 ms ignores that while the onset is still backdated
	// to the run's first frame.
	DefaultMinSpeechMs = 150
	vadFrameMs         = 30
)

// VADConfig configures a VAD. Zero values take defaults: SampleRate 16000, PrefixPaddingMs 300,
// SilenceDurationMs 500, MinSpeechMs 150; a negative duration means 0.
// Aggressiveness: when Threshold is in (0, 1] it picks the WebRTC mode (0–0.25 → 0, 0.25–0.5 → 1,
// 0.5–0.75 → 2, above → 3), otherwise Mode (0–3) is used.
//
// It is also the pipeline config's VAD block (pipeline.thinker.vad, yaml keys below): the
// stream VAD's defaults, where the session's turn detection leaves a value unset. The sample
// rate and early speech are not configured there.
type VADConfig struct {
	SampleRate        int     `yaml:"-"`                   // 8000, 16000, 32000 or 48000
	Mode              int     `yaml:"mode"`                // WebRTC aggressiveness 0 (least) … 3 (most), used when Threshold is 0
	Threshold         float64 `yaml:"threshold"`           // realtime API threshold in [0, 1]
	PrefixPaddingMs   int     `yaml:"prefix_padding_ms"`   // audio kept before the detected onset; SpeechStarted.AtMs includes it
	SilenceDurationMs int     `yaml:"silence_duration_ms"` // unvoiced time that ends a segment
	MinSpeechMs       int     `yaml:"min_speech_ms"`       // voiced time needed to start a segment
	// EarlySpeechMs (0 = off) lets a shorter voiced run start a segment when it carries pitch:
	// a run of at least EarlySpeechMs with EarlySpeechMs − 30 ms of it pitched and its latest
	// frame pitched throughout (pitch.go). Noise bursts have no pitch and still need
	// MinSpeechMs; tone bursts up to EarlySpeechMs − 50 ms are rejected too.
	EarlySpeechMs int `yaml:"-"`
}

// VADEventKind says whether speech started or stopped.
type VADEventKind int

// VAD event kinds.
const (
	SpeechStarted VADEventKind = iota + 1
	SpeechStopped
)

func (k VADEventKind) String() string {
	switch k {
	case SpeechStarted:
		return "speech_started"
	case SpeechStopped:
		return "speech_stopped"
	}
	return fmt.Sprintf("VADEventKind(%d)", int(k))
}

// VADEvent is a segment boundary in stream time (milliseconds since the first sample).
// SpeechStarted.AtMs is the onset minus the prefix padding (never before 0 or the previous
// stop), as the realtime API's audio_start_ms; SpeechStopped.AtMs is the end of the last voiced
// frame (audio_end_ms), reported SilenceDurationMs later.
type VADEvent struct {
	Kind VADEventKind
	AtMs int64
}

// VAD segments a stream into speech and silence with WebRTC VAD on 30 ms frames.
// It is not safe for concurrent use.
type VAD struct {
	cfg      VADConfig
	mode     int
	inst     *C.VadInst
	frame    []int16 // the frame being filled; remainder kept between calls
	fill     int
	pos      int64 // samples in completed frames
	inSpeech bool
	voiced   int   // consecutive voiced frames while not in speech
	pitched  int   // frames of that run with a pitch period (counted with EarlySpeechMs only)
	runStart int64 // sample index where that voiced run began
	silent   int   // consecutive unvoiced frames while in speech
	lastEnd  int64 // sample index just after the last voiced frame
	lastStop int64 // ms of the previous SpeechStopped
	// The loudest frame's power of the open segment (segPower) and of the voiced run that may
	// open one (runPower), for holdsSpeech.
	runPower, segPower float64
	events             []VADEvent
}

// NewVAD validates cfg and creates the WebRTC VAD instance.
func NewVAD(cfg VADConfig) (*VAD, error) {
	if cfg.SampleRate == 0 {
		cfg.SampleRate = 16000
	}
	switch cfg.SampleRate {
	case 8000, 16000, 32000, 48000:
	default:
		return nil, fmt.Errorf("creating vad at %d Hz: %w", cfg.SampleRate, audio.ErrUnsupportedRate)
	}
	mode := cfg.Mode
	switch {
	case math.IsNaN(cfg.Threshold) || cfg.Threshold < 0 || cfg.Threshold > 1:
		return nil, fmt.Errorf("vad threshold %v: %w", cfg.Threshold, ErrInvalidConfig)
	case cfg.Threshold > 0:
		mode = min(int(cfg.Threshold*4), 3)
	case mode < 0 || mode > 3:
		return nil, fmt.Errorf("vad mode %d: %w", mode, ErrInvalidConfig)
	}
	cfg.PrefixPaddingMs = defaultMs(cfg.PrefixPaddingMs, DefaultPrefixPaddingMs)
	cfg.SilenceDurationMs = defaultMs(cfg.SilenceDurationMs, DefaultSilenceDurationMs)
	cfg.MinSpeechMs = defaultMs(cfg.MinSpeechMs, DefaultMinSpeechMs)
	inst := C.WebRtcVad_Create()
	if inst == nil {
		return nil, fmt.Errorf("creating webrtc vad: out of memory")
	}
	if C.WebRtcVad_Init(inst) != 0 || C.WebRtcVad_set_mode(inst, C.int(mode)) != 0 {
		C.WebRtcVad_Free(inst)
		return nil, fmt.Errorf("initialising webrtc vad mode %d: %w", mode, ErrInvalidConfig)
	}
	return &VAD{cfg: cfg, mode: mode, inst: inst, frame: make([]int16, cfg.SampleRate*vadFrameMs/1000)}, nil
}

func defaultMs(v, def int) int {
	switch {
	case v == 0:
		return def
	case v < 0:
		return 0
	}
	return v
}

// Mode reports the WebRTC aggressiveness in use.
func (v *VAD) Mode() int { return v.mode }

// Process consumes samples of any length and returns the boundaries they complete. The returned
// slice is reused by the next call.
func (v *VAD) Process(pcm []float32) ([]VADEvent, error) {
	v.events = v.events[:0]
	if v.inst == nil {
		return v.events, fmt.Errorf("processing vad audio: %w", ErrClosed)
	}
	if err := audio.CheckFinite(pcm); err != nil {
		return v.events, fmt.Errorf("processing vad audio: %w", err)
	}
	for len(pcm) > 0 {
		n := min(len(v.frame)-v.fill, len(pcm))
		audio.Float32ToInt16(v.frame[v.fill:v.fill], pcm[:n]) // converts in place into the frame
		v.fill += n
		pcm = pcm[n:]
		if v.fill < len(v.frame) {
			break
		}
		v.fill = 0
		power := framePower(v.frame)
		if power < silentFramePower {
			// Digital silence is never fed to WebRTC: its noise models adapt on every frame
			// they are given, and stretches of zeros leave them calling a later clip's room
			// noise speech (see holdMarginDB).
			v.step(false, noPitch, power)
			continue
		}
		rc := C.WebRtcVad_Process(v.inst, C.int(v.cfg.SampleRate), (*C.int16_t)(unsafe.Pointer(&v.frame[0])), C.size_t(len(v.frame)))
		if rc < 0 {
			return v.events, fmt.Errorf("processing vad frame: webrtc error %d", int(rc))
		}
		p := noPitch
		if rc == 1 && v.cfg.EarlySpeechMs > 0 && !v.inSpeech {
			p = pitched(v.frame, v.cfg.SampleRate)
		}
		v.step(rc == 1, p, power)
	}
	return v.events, nil
}

func (v *VAD) step(voiced bool, p pitchEvidence, power float64) {
	start := v.pos
	v.pos += int64(len(v.frame))
	if !v.inSpeech {
		if !voiced {
			v.voiced, v.pitched = 0, 0
			return
		}
		if v.voiced == 0 {
			v.runStart, v.pitched, v.runPower = start, 0, 0
		}
		v.voiced++
		v.runPower = max(v.runPower, power)
		if p != noPitch {
			v.pitched++
		}
		runMs := v.voiced * vadFrameMs
		// Early: a run of EarlySpeechMs or more, with EarlySpeechMs − 30 ms of it pitched and
		// the sound still going on through its latest frame. A burst of EarlySpeechMs − 50 ms cannot do
		// that: the run starts no earlier than the burst, so its last frame would need the
		// burst to fill a third of it past EarlySpeechMs − 30 ms.
		early := v.cfg.EarlySpeechMs > 0 && runMs >= v.cfg.EarlySpeechMs && p == pitchedFull &&
			(v.pitched+1)*vadFrameMs >= v.cfg.EarlySpeechMs
		if runMs < v.cfg.MinSpeechMs && !early {
			return
		}
		v.inSpeech, v.silent, v.lastEnd = true, 0, v.pos
		v.segPower = v.runPower
		at := max(v.ms(v.runStart)-int64(v.cfg.PrefixPaddingMs), v.lastStop, 0)
		v.events = append(v.events, VADEvent{Kind: SpeechStarted, AtMs: at})
		return
	}
	if voiced && v.holdsSpeech(power) {
		v.silent, v.lastEnd = 0, v.pos
		v.segPower = max(v.segPower, power)
		return
	}
	v.silent++
	if v.silent*vadFrameMs >= v.cfg.SilenceDurationMs {
		v.inSpeech, v.voiced, v.pitched = false, 0, 0
		v.lastStop = v.ms(v.lastEnd)
		v.events = append(v.events, VADEvent{Kind: SpeechStopped, AtMs: v.lastStop})
	}
}

// holdMarginDB: inside a segment, a frame WebRTC calls voiced holds the segment open only
// within this many dB of the segment's loudest frame so far. WebRTC's mode 2 calls steady noise 20–25 dB under the words speech often
// enough to hold a segment through a clip's room-noise tail, or a microphone's noise floor, for
// another silence window: the turn then ends 0.5–0.7 s late (docs/BENCHMARKS.md, "The late
// turns"). Relative, not absolute, so that a quiet microphone's speech holds its segments as a
// loud one's does; onsets are WebRTC's decision alone.
const holdMarginDB = 25

// silentFramePower is −70 dBFS: below it a frame holds nothing a VAD could call speech (a
// microphone's own noise floor is above it; a client's silence padding is zeros).
const silentFramePower = 1e-7

// holdsSpeech reports whether a voiced frame of power is loud enough to hold the open segment.
func (v *VAD) holdsSpeech(power float64) bool {
	return power >= v.segPower*math.Pow(10, -holdMarginDB/10.0)
}

// framePower is the mean square of an int16 frame, in full-scale units.
func framePower(frame []int16) float64 {
	var sum float64
	for _, x := range frame {
		f := float64(x) / 32768
		sum += f * f
	}
	return sum / float64(len(frame))
}

func (v *VAD) ms(sample int64) int64 { return sample * 1000 / int64(v.cfg.SampleRate) }

// TrailingSilence reports, while a segment is open, how long the audio has been unvoiced since
// its last voiced frame (in whole frames) and where that frame ended (stream ms, the AtMs the
// segment's SpeechStopped will carry if no voiced frame follows); 0, 0 outside a segment.
// Preemptive generation uses it to act on a pause before silence_duration_ms confirms it.
func (v *VAD) TrailingSilence() (silentMs int, speechEndMs int64) {
	if !v.inSpeech {
		return 0, 0
	}
	return v.silent * vadFrameMs, v.ms(v.lastEnd)
}

// InSpeech reports whether a segment is open.
func (v *VAD) InSpeech() bool { return v.inSpeech }

// Reset forgets the open segment and buffered samples; stream time restarts at 0.
func (v *VAD) Reset() {
	*v = VAD{cfg: v.cfg, mode: v.mode, inst: v.inst, frame: v.frame, events: v.events[:0]}
	if v.inst != nil {
		C.WebRtcVad_Init(v.inst)
		C.WebRtcVad_set_mode(v.inst, C.int(v.mode))
	}
}

// Close frees the WebRTC instance; it is idempotent.
func (v *VAD) Close() {
	if v.inst != nil {
		C.WebRtcVad_Free(v.inst)
		v.inst = nil
	}
}
