package speech

/*
#cgo pkg-config: pocketsphinx sphinxbase
#include <stdlib.h>
#include <stdio.h>
#include <pocketsphinx.h>
#include <sphinxbase/err.h>

// omni_ps_new builds one decoder from its own copy of the configuration: ps_init writes
// expanded model paths into the config it is given, so configs are never shared between
// decoders that may run on different threads.
static ps_decoder_t *omni_ps_new(const char *hmm, const char *dict, const char *lm) {
	// Logging is process-global in sphinxbase and goes to stderr by default; omniserve
	// reports ASR failures through Go errors instead.
	err_set_logfp(NULL);
	cmd_ln_t *cfg = cmd_ln_init(NULL, ps_args(), TRUE,
		"-hmm", hmm, "-dict", dict, "-lm", lm,
		// One forward pass only: the flat-lexicon rescoring and lattice best path cost about 15%
		// more CPU per stream (asr_rtf 0.106 -> 0.089, one run each); goforward stays exact, the TTS
		// round trip drops from 12/13 to 11/13 words.
		"-fwdflat", "no", "-bestpath", "no", NULL);
	if (cfg == NULL) return NULL;
	ps_decoder_t *ps = ps_init(cfg);
	cmd_ln_free_r(cfg); // ps_init holds its own reference
	return ps;
}

static const char *omni_ps_hyp(ps_decoder_t *ps) {
	int32 score;
	return ps_get_hyp(ps, &score);
}
*/
import "C"

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"time"
	"unsafe"

	"go.uber.org/zap"

	"github.com/omniserve/omniserve/internal/audio"
)

// Default model locations of the Debian package pocketsphinx-en-us.
const (
	DefaultASRModelDir = "/usr/share/pocketsphinx/model/en-us/en-us"
	DefaultASRDict     = "/usr/share/pocketsphinx/model/en-us/cmudict-en-us.dict"
	DefaultASRLM       = "/usr/share/pocketsphinx/model/en-us/en-us.lm.bin"
	DefaultASRPoolSize = 16
)

// ASRConfig selects the pocketsphinx model. Zero values take the Default* constants.
type ASRConfig struct {
	ModelDir string // acoustic model directory (-hmm)
	Dict     string // pronunciation dictionary (-dict)
	LM       string // n-gram language model (-lm)
	PoolSize int    // most decoders alive at once (each is one concurrent stream); default 16
}

// ASR is a bounded, lazily grown pool of pocketsphinx decoders built from one configuration.
// A decoder costs about 330 ms to build, so decoders are reused across streams: a stream takes
// one for its lifetime and Close returns it.
type ASR struct {
	cfg    ASRConfig
	log    *zap.Logger
	slots  chan struct{} // one token per decoder in use; capacity PoolSize bounds the pool
	create sync.Mutex    // ps_init touches sphinxbase's global logger; build one at a time

	mu     sync.Mutex
	idle   []*C.ps_decoder_t
	live   int
	closed bool
}

// NewASR checks the model files and builds the first decoder, so a bad path fails here.
func NewASR(cfg ASRConfig, log *zap.Logger) (*ASR, error) {
	if cfg.ModelDir == "" {
		cfg.ModelDir = DefaultASRModelDir
	}
	if cfg.Dict == "" {
		cfg.Dict = DefaultASRDict
	}
	if cfg.LM == "" {
		cfg.LM = DefaultASRLM
	}
	if cfg.PoolSize == 0 {
		cfg.PoolSize = DefaultASRPoolSize
	}
	if cfg.PoolSize < 0 {
		return nil, fmt.Errorf("asr pool size %d: %w", cfg.PoolSize, ErrInvalidConfig)
	}
	for _, p := range []string{filepath.Join(cfg.ModelDir, "mdef"), cfg.Dict, cfg.LM} {
		if _, err := os.Stat(p); err != nil {
			return nil, fmt.Errorf("loading asr model: %w", err)
		}
	}
	if log == nil {
		log = zap.NewNop()
	}
	a := &ASR{cfg: cfg, log: log.Named("asr"), slots: make(chan struct{}, cfg.PoolSize)}
	start := time.Now()
	ps, err := a.newDecoder()
	if err != nil {
		return nil, err
	}
	a.idle = append(a.idle, ps)
	a.live = 1
	a.log.Info("asr model loaded", zap.String("model", cfg.ModelDir), zap.String("lm", cfg.LM),
		zap.Duration("load_time", time.Since(start)), zap.Int("pool_size", cfg.PoolSize))
	return a, nil
}

func (a *ASR) newDecoder() (*C.ps_decoder_t, error) {
	hmm, dict, lm := C.CString(a.cfg.ModelDir), C.CString(a.cfg.Dict), C.CString(a.cfg.LM)
	defer C.free(unsafe.Pointer(hmm))
	defer C.free(unsafe.Pointer(dict))
	defer C.free(unsafe.Pointer(lm))
	a.create.Lock()
	ps := C.omni_ps_new(hmm, dict, lm)
	a.create.Unlock()
	if ps == nil {
		return nil, fmt.Errorf("creating pocketsphinx decoder (hmm %s, dict %s, lm %s): initialisation failed",
			a.cfg.ModelDir, a.cfg.Dict, a.cfg.LM)
	}
	return ps, nil
}

// Close frees the idle decoders; decoders held by open streams are freed when those close.
func (a *ASR) Close() {
	a.mu.Lock()
	defer a.mu.Unlock()
	if a.closed {
		return
	}
	a.closed = true
	for _, ps := range a.idle {
		C.ps_free(ps)
		a.live--
	}
	a.idle = nil
}

// Decoders reports how many decoders exist (idle or in use).
func (a *ASR) Decoders() int {
	a.mu.Lock()
	defer a.mu.Unlock()
	return a.live
}

// Warm builds idle decoders until n exist (at most PoolSize), so that the first n streams do
// not each wait for a build: builds are serialized process-wide and take about a second each
// (more on a loaded machine). It stops early when ctx ends.
func (a *ASR) Warm(ctx context.Context, n int) error {
	for {
		a.mu.Lock()
		if a.closed || a.live >= min(n, a.cfg.PoolSize) {
			a.mu.Unlock()
			return nil
		}
		if err := ctx.Err(); err != nil {
			a.mu.Unlock()
			return fmt.Errorf("warming the asr pool: %w", err)
		}
		a.live++
		a.mu.Unlock()
		ps, err := a.newDecoder()
		a.mu.Lock()
		if err != nil {
			a.live--
			a.mu.Unlock()
			return err
		}
		if a.closed {
			C.ps_free(ps)
			a.live--
		} else {
			a.idle = append(a.idle, ps)
		}
		a.mu.Unlock()
	}
}

// NewStream takes a decoder from the pool, building one if fewer than PoolSize exist, or waits
// until a stream closes or ctx ends.
func (a *ASR) NewStream(ctx context.Context) (*ASRStream, error) {
	select {
	case a.slots <- struct{}{}:
	case <-ctx.Done():
		return nil, fmt.Errorf("waiting for an asr decoder: %w", ctx.Err())
	}
	a.mu.Lock()
	if a.closed {
		a.mu.Unlock()
		<-a.slots
		return nil, fmt.Errorf("opening asr stream: %w", ErrClosed)
	}
	var ps *C.ps_decoder_t
	if n := len(a.idle); n > 0 {
		ps = a.idle[n-1]
		a.idle = a.idle[:n-1]
	} else {
		a.live++ // reserve before the slow build so Decoders never undercounts
	}
	a.mu.Unlock()
	if ps == nil {
		var err error
		if ps, err = a.newDecoder(); err != nil {
			a.mu.Lock()
			a.live--
			a.mu.Unlock()
			<-a.slots
			return nil, err
		}
	}
	return &ASRStream{asr: a, ps: ps}, nil
}

func (a *ASR) release(ps *C.ps_decoder_t) {
	a.mu.Lock()
	if a.closed {
		C.ps_free(ps)
		a.live--
	} else {
		a.idle = append(a.idle, ps)
	}
	a.mu.Unlock()
	<-a.slots
}

// Transcribe decodes one whole 16 kHz utterance.
func (a *ASR) Transcribe(ctx context.Context, pcm16k []float32) (string, error) {
	if len(pcm16k) == 0 {
		return "", fmt.Errorf("transcribing: %w", audio.ErrEmptyAudio)
	}
	if err := audio.CheckFinite(pcm16k); err != nil {
		return "", fmt.Errorf("transcribing: %w", err)
	}
	s, err := a.NewStream(ctx)
	if err != nil {
		return "", err
	}
	defer s.Close()
	// Feed in one-second chunks so a cancelled ctx stops a long clip early.
	for off := 0; off < len(pcm16k); off += audio.ASRSampleRate {
		if err := ctx.Err(); err != nil {
			return "", fmt.Errorf("transcribing: %w", err)
		}
		if err := s.Write(pcm16k[off:min(off+audio.ASRSampleRate, len(pcm16k))]); err != nil {
			return "", err
		}
	}
	return s.Finish()
}

// ASRStream is one utterance-at-a-time decoding stream on a pooled decoder. Its methods may be
// called from different goroutines; calls are serialized.
type ASRStream struct {
	asr     *ASR
	mu      sync.Mutex
	ps      *C.ps_decoder_t
	buf     []int16 // reused so Write does not allocate per chunk
	started bool
	samples int
}

// Write feeds 16 kHz mono samples, starting an utterance if none is open.
func (s *ASRStream) Write(pcm16k []float32) error {
	if err := audio.CheckFinite(pcm16k); err != nil {
		return fmt.Errorf("writing asr audio: %w", err)
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.ps == nil {
		return fmt.Errorf("writing asr audio: %w", ErrClosed)
	}
	if len(pcm16k) == 0 {
		return nil
	}
	if !s.started {
		if rc := C.ps_start_utt(s.ps); rc < 0 {
			return fmt.Errorf("starting utterance: pocketsphinx error %d", int(rc))
		}
		s.started = true
		s.samples = 0
	}
	s.buf = audio.Float32ToInt16(s.buf, pcm16k)
	rc := C.ps_process_raw(s.ps, (*C.int16)(unsafe.Pointer(&s.buf[0])), C.size_t(len(s.buf)), 0, 0)
	if rc < 0 {
		return fmt.Errorf("decoding audio: pocketsphinx error %d", int(rc))
	}
	s.samples += len(pcm16k)
	return nil
}

// Partial returns the current best hypothesis of the open utterance ("" if none).
func (s *ASRStream) Partial() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.ps == nil || !s.started {
		return ""
	}
	return hypText(C.omni_ps_hyp(s.ps))
}

// Finish ends the utterance and returns its final hypothesis; the stream can then take another
// utterance. Finishing with no audio written gives audio.ErrEmptyAudio.
func (s *ASRStream) Finish() (string, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.ps == nil {
		return "", fmt.Errorf("finishing utterance: %w", ErrClosed)
	}
	if !s.started {
		return "", fmt.Errorf("finishing utterance: %w", audio.ErrEmptyAudio)
	}
	s.started = false
	if rc := C.ps_end_utt(s.ps); rc < 0 {
		return "", fmt.Errorf("ending utterance: pocketsphinx error %d", int(rc))
	}
	return hypText(C.omni_ps_hyp(s.ps)), nil
}

// Close abandons any open utterance and returns the decoder to the pool. It is idempotent.
func (s *ASRStream) Close() {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.ps == nil {
		return
	}
	if s.started {
		C.ps_end_utt(s.ps)
		s.started = false
	}
	s.asr.release(s.ps)
	s.ps = nil
}

func hypText(h *C.char) string {
	if h == nil {
		return ""
	}
	return strings.TrimSpace(C.GoString(h))
}
