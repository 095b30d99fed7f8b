package speech

/*
#cgo pkg-config: pocketsphinx sphinxbase
#include <stdlib.h>
#include <stdio.h>
#include <time.h>
#include <pocketsphinx.h>
#include <sphinxbase/err.h>
#include "asrshare.h"
#include "asrprob.h"

static const char *omni_ps_hyp(ps_decoder_t *ps) {
	int32 score;
	return ps_get_hyp(ps, &score);
}

// The recognizer's CPU time: the calling thread's, measured inside one C call so that the
// goroutine cannot move to another thread between the two readings.
static long long omni_cpu_ns(void) {
	struct timespec ts;
	clock_gettime(CLOCK_THREAD_CPUTIME_ID, &ts);
	return (long long)ts.tv_sec * 1000000000LL + ts.tv_nsec;
}

static int omni_process_raw_cpu(ps_decoder_t *ps, const int16 *data, size_t n, long long *cpu) {
	long long t0 = omni_cpu_ns();
	int rc = ps_process_raw(ps, data, n, 0, 0);
	*cpu += omni_cpu_ns() - t0;
	return rc;
}

static int omni_end_utt_cpu(ps_decoder_t *ps, long long *cpu) {
	long long t0 = omni_cpu_ns();
	int rc = ps_end_utt(ps);
	*cpu += omni_cpu_ns() - t0;
	return rc;
}

static char *omni_word_probs_cpu(ps_decoder_t *ps, long long *cpu) {
	long long t0 = omni_cpu_ns();
	char *out = omni_word_probs(ps);
	*cpu += omni_cpu_ns() - t0;
	return out;
}
*/
import "C"

import (
	"context"
	"fmt"
	"math"
	"os"
	"path/filepath"
	"strconv"
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

	// unshared builds every decoder as pocketsphinx alone would (own LM, full dictionary): the
	// reference the tests compare the shared pool with.
	unshared bool
}

// ASR is a bounded, lazily grown pool of pocketsphinx decoders built from one configuration.
// A decoder costs about 0.2 s to build (0.5 s before the shared model; more on a loaded machine),
// so decoders are reused across streams: a stream takes one for its lifetime and Close returns it.
//
// Memory: the decoders share one copy of the language model, the dictionary and its triphone
// map (asrshare.c explains how and why that is safe), and the dictionary holds only the words
// the language model knows (cmudict's other 55k entries can never be recognised: the search
// tree skips words without an LM unigram). What stays per decoder is the acoustic model
// (mdef, Gaussians, front end, ~4 MiB) and the search (lexicon tree with its HMM state for
// 72k words, word tables, ~26 MiB). docs/BENCHMARKS.md has the measured figures.
type ASR struct {
	cfg   ASRConfig
	log   *zap.Logger
	slots chan struct{} // one token per decoder in use; capacity PoolSize bounds the pool
	// lib serializes building and freeing decoders: ps_init touches sphinxbase's global logger,
	// and the shared model's reference counts are plain ints.
	lib    sync.Mutex
	shared *C.omni_asr_shared_t // nil when sharing is off (decoders own their models)
	dict   string               // the LM-restricted dictionary file, kept while decoders may need it
	tmpDir string               // holds dict; removed by Close

	mu     sync.Mutex
	idle   []C.omni_dec_t
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
	var (
		words, kept int
		first       C.omni_dec_t
		err         error
	)
	if cfg.unshared {
		a.dict = cfg.Dict
		first, err = a.newDecoder()
	} else {
		if words, kept, err = a.restrictDict(); err != nil {
			return nil, err
		}
		first, err = a.loadShared()
	}
	if err != nil {
		a.removeDict()
		return nil, err
	}
	a.idle = append(a.idle, first)
	a.live = 1
	a.log.Info("asr model loaded", zap.String("model", cfg.ModelDir), zap.String("lm", cfg.LM),
		zap.Int("lm_words", words), zap.Int("dict_entries", kept), zap.Bool("shared", a.shared != nil),
		zap.Duration("load_time", time.Since(start)), zap.Int("pool_size", cfg.PoolSize))
	return a, nil
}

// restrictDict writes the entries of cfg.Dict whose word (alternates "word(2)" included) is in
// the language model's vocabulary to a private file, and returns the vocabulary size and the
// entries kept. Decoding is unchanged (pocketsphinx builds its search tree from the words of
// both, and every en-us LM word has a cmudict entry); the dictionary and the per-word search
// tables shrink from 134,723 to 79,420 entries.
func (a *ASR) restrictDict() (int, int, error) {
	lm := C.CString(a.cfg.LM)
	defer C.free(unsafe.Pointer(lm))
	cv := C.omni_asr_lm_vocab(lm)
	if cv == nil {
		return 0, 0, fmt.Errorf("loading asr language model %s: cannot read it", a.cfg.LM)
	}
	vocab := strings.Split(strings.TrimSuffix(C.GoString(cv), "\n"), "\n")
	C.free(unsafe.Pointer(cv))
	known := make(map[string]struct{}, len(vocab))
	for _, w := range vocab {
		known[w] = struct{}{}
	}
	src, err := os.ReadFile(a.cfg.Dict)
	if err != nil {
		return 0, 0, fmt.Errorf("loading asr dictionary: %w", err)
	}
	out := make([]byte, 0, len(src))
	kept := 0
	for line := range strings.Lines(string(src)) {
		word, _, _ := strings.Cut(strings.TrimLeft(line, " \t"), " ")
		word, _, _ = strings.Cut(word, "\t")
		if i := strings.IndexByte(word, '('); i > 0 && strings.HasSuffix(word, ")") {
			word = word[:i]
		}
		if _, ok := known[word]; !ok {
			continue
		}
		out = append(out, line...)
		if !strings.HasSuffix(line, "\n") {
			out = append(out, '\n')
		}
		kept++
	}
	if kept == 0 {
		return 0, 0, fmt.Errorf("asr dictionary %s has no word of the language model %s: %w", a.cfg.Dict, a.cfg.LM, ErrInvalidConfig)
	}
	if a.tmpDir, err = os.MkdirTemp("", "omniserve-asr-"); err != nil {
		return 0, 0, fmt.Errorf("writing the restricted asr dictionary: %w", err)
	}
	a.dict = filepath.Join(a.tmpDir, "lm-words.dict")
	if err := os.WriteFile(a.dict, out, 0o600); err != nil {
		a.removeDict()
		return 0, 0, fmt.Errorf("writing the restricted asr dictionary: %w", err)
	}
	return len(known), kept, nil
}

func (a *ASR) removeDict() {
	if a.tmpDir != "" {
		_ = os.RemoveAll(a.tmpDir)
		a.tmpDir = ""
	}
}

// loadShared builds the first decoder and the model parts later decoders share; when the
// library's layout checks refuse sharing, decoders own their models (as pocketsphinx builds
// them) and a warning says why.
func (a *ASR) loadShared() (C.omni_dec_t, error) {
	hmm, dict, lm := C.CString(a.cfg.ModelDir), C.CString(a.dict), C.CString(a.cfg.LM)
	defer C.free(unsafe.Pointer(hmm))
	defer C.free(unsafe.Pointer(dict))
	defer C.free(unsafe.Pointer(lm))
	var first C.omni_dec_t
	var why *C.char
	a.lib.Lock()
	a.shared = C.omni_asr_shared_new(hmm, dict, lm, &first, &why)
	a.lib.Unlock()
	if first.ps == nil {
		return first, fmt.Errorf("creating pocketsphinx decoder (hmm %s, dict %s, lm %s): initialisation failed",
			a.cfg.ModelDir, a.cfg.Dict, a.cfg.LM)
	}
	if a.shared != nil {
		a.removeDict() // the shared dictionary is in memory; later decoders do not read the file
	} else {
		a.log.Warn("asr decoders will not share the language model and dictionary",
			zap.String("reason", C.GoString(why)))
	}
	return first, nil
}

func (a *ASR) newDecoder() (C.omni_dec_t, error) {
	hmm, dict, lm := C.CString(a.cfg.ModelDir), C.CString(a.dict), C.CString(a.cfg.LM)
	defer C.free(unsafe.Pointer(hmm))
	defer C.free(unsafe.Pointer(dict))
	defer C.free(unsafe.Pointer(lm))
	var d C.omni_dec_t
	a.lib.Lock()
	rc := C.omni_asr_dec_new(a.shared, hmm, dict, lm, &d)
	a.lib.Unlock()
	if rc < 0 || d.ps == nil {
		return d, fmt.Errorf("creating pocketsphinx decoder (hmm %s, dict %s, lm %s): initialisation failed",
			a.cfg.ModelDir, a.cfg.Dict, a.cfg.LM)
	}
	return d, nil
}

// freeLocked frees one decoder; the caller holds a.mu and has already counted it out of live.
// The shared model goes with the last decoder after Close.
func (a *ASR) freeLocked(d C.omni_dec_t) {
	a.lib.Lock()
	defer a.lib.Unlock()
	C.omni_asr_dec_free(&d)
	if a.closed && a.live == 0 {
		C.omni_asr_shared_free(a.shared)
		a.shared = nil
		a.removeDict()
	}
}

// Close frees the idle decoders; decoders held by open streams are freed when those close.
func (a *ASR) Close() {
	a.mu.Lock()
	defer a.mu.Unlock()
	if a.closed {
		return
	}
	a.closed = true
	for _, d := range a.idle {
		a.live--
		a.freeLocked(d)
	}
	a.idle = nil
}

// Decoders reports how many decoders exist (idle or in use).
func (a *ASR) Decoders() int {
	a.mu.Lock()
	defer a.mu.Unlock()
	return a.live
}

// InUse reports how many decoders are held by open streams.
func (a *ASR) InUse() int { return len(a.slots) }

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
		d, err := a.newDecoder()
		a.mu.Lock()
		if err != nil {
			a.live--
			a.mu.Unlock()
			return err
		}
		a.putLocked(d)
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
	var d C.omni_dec_t
	if n := len(a.idle); n > 0 {
		d = a.idle[n-1]
		a.idle = a.idle[:n-1]
	} else {
		a.live++ // reserve before the slow build so Decoders never undercounts
	}
	a.mu.Unlock()
	if d.ps == nil {
		var err error
		if d, err = a.newDecoder(); err != nil {
			a.mu.Lock()
			a.live--
			a.mu.Unlock()
			<-a.slots
			return nil, err
		}
		a.mu.Lock()
		if a.closed { // closed during the build: the shared model must not outlive this decoder
			a.live--
			a.freeLocked(d)
			a.mu.Unlock()
			<-a.slots
			return nil, fmt.Errorf("opening asr stream: %w", ErrClosed)
		}
		a.mu.Unlock()
	}
	return &ASRStream{asr: a, dec: d, ps: d.ps}, nil
}

func (a *ASR) release(d C.omni_dec_t) {
	a.mu.Lock()
	a.putLocked(d)
	a.mu.Unlock()
	<-a.slots
}

// putLocked puts a decoder no stream holds back in the idle pool, or frees it once the ASR is
// closed (the last one freed frees the shared model).
func (a *ASR) putLocked(d C.omni_dec_t) {
	if a.closed {
		a.live--
		a.freeLocked(d)
		return
	}
	a.idle = append(a.idle, d)
}

// Transcribe decodes one whole 16 kHz utterance.
func (a *ASR) Transcribe(ctx context.Context, pcm16k []float32) (string, error) {
	return a.TranscribeStream(ctx, pcm16k, nil)
}

// partialEvery is how much audio TranscribeStream decodes between two partial hypotheses.
const partialEvery = audio.ASRSampleRate / 4

// TranscribeStream decodes one whole 16 kHz utterance as Transcribe does, and calls partial
// (when not nil) with the best hypothesis so far after each 250 ms of audio, on the caller's
// goroutine. A partial may revise earlier words; the returned text is the final one.
func (a *ASR) TranscribeStream(ctx context.Context, pcm16k []float32, partial func(string)) (string, error) {
	text, _, err := a.transcribe(ctx, pcm16k, partial, false)
	return text, err
}

// TranscribeLogprobs is TranscribeStream that also returns each transcript word's log
// posterior (FinishLogprobs says how they are computed and what they cost).
func (a *ASR) TranscribeLogprobs(ctx context.Context, pcm16k []float32, partial func(string)) (string, []audio.WordLogprob, error) {
	return a.transcribe(ctx, pcm16k, partial, true)
}

func (a *ASR) transcribe(ctx context.Context, pcm16k []float32, partial func(string), logprobs bool) (string, []audio.WordLogprob, error) {
	if len(pcm16k) == 0 {
		return "", nil, fmt.Errorf("transcribing: %w", audio.ErrEmptyAudio)
	}
	if err := audio.CheckFinite(pcm16k); err != nil {
		return "", nil, fmt.Errorf("transcribing: %w", err)
	}
	s, err := a.NewStream(ctx)
	if err != nil {
		return "", nil, err
	}
	defer s.Close()
	// Feed in chunks so a cancelled ctx stops a long clip early.
	for off := 0; off < len(pcm16k); off += partialEvery {
		if err := ctx.Err(); err != nil {
			return "", nil, fmt.Errorf("transcribing: %w", err)
		}
		if err := s.Write(pcm16k[off:min(off+partialEvery, len(pcm16k))]); err != nil {
			return "", nil, err
		}
		if partial != nil {
			if p := s.Partial(); p != "" {
				partial(p)
			}
		}
	}
	if logprobs {
		return s.FinishLogprobs()
	}
	text, err := s.Finish()
	return text, nil, err
}

// ASRStream is one utterance-at-a-time decoding stream on a pooled decoder. Its methods may be
// called from different goroutines; calls are serialized.
type ASRStream struct {
	asr     *ASR
	mu      sync.Mutex
	dec     C.omni_dec_t
	ps      *C.ps_decoder_t // dec.ps; nil once closed
	buf     []int16         // reused so Write does not allocate per chunk
	started bool
	samples int
	// cpu is the decoder's CPU time on the current (or last finished) utterance: decoding
	// its audio, ending it, and its logprobs' lattice passes.
	cpu time.Duration
	// cpuNs receives each C call's CPU time: a field, as a local whose address went to C would
	// be allocated on every Write.
	cpuNs C.longlong
}

// UtteranceCPU is the CPU time the decoder spent on the open utterance, or after Finish on the
// one it finished (until the next Write starts another): the recognizer's own work, without
// the time it waited for a CPU.
func (s *ASRStream) UtteranceCPU() time.Duration {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.cpu
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
		if rc := C.omni_dec_start_utt(&s.dec); rc < 0 {
			return fmt.Errorf("starting utterance: pocketsphinx error %d", int(rc))
		}
		s.started = true
		s.samples = 0
		s.cpu = 0
	}
	s.buf = audio.Float32ToInt16(s.buf, pcm16k)
	s.cpuNs = 0
	rc := C.omni_process_raw_cpu(s.ps, (*C.int16)(unsafe.Pointer(&s.buf[0])), C.size_t(len(s.buf)), &s.cpuNs)
	s.cpu += time.Duration(s.cpuNs)
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
	text, _, err := s.finish(false)
	return text, err
}

// FinishLogprobs is Finish that also returns the log posterior of each word of the text, in
// order (fillers and sentence markers are not words of the text). The forward pass gives no
// posteriors, so this builds the utterance's word lattice and runs the best-path and
// forward-backward passes over it (asrprob.c); Finish does not pay for that.
func (s *ASRStream) FinishLogprobs() (string, []audio.WordLogprob, error) {
	return s.finish(true)
}

func (s *ASRStream) finish(logprobs bool) (string, []audio.WordLogprob, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.ps == nil {
		return "", nil, fmt.Errorf("finishing utterance: %w", ErrClosed)
	}
	if !s.started {
		return "", nil, fmt.Errorf("finishing utterance: %w", audio.ErrEmptyAudio)
	}
	s.started = false
	s.cpuNs = 0
	rc := C.omni_end_utt_cpu(s.ps, &s.cpuNs)
	s.cpu += time.Duration(s.cpuNs)
	if rc < 0 {
		return "", nil, fmt.Errorf("ending utterance: pocketsphinx error %d", int(rc))
	}
	text := hypText(C.omni_ps_hyp(s.ps))
	if !logprobs || text == "" {
		return text, nil, nil
	}
	s.cpuNs = 0
	cs := C.omni_word_probs_cpu(s.ps, &s.cpuNs)
	s.cpu += time.Duration(s.cpuNs)
	if cs == nil {
		return "", nil, fmt.Errorf("finishing utterance: no word lattice for the log probabilities of %q", text)
	}
	raw := C.GoString(cs)
	C.free(unsafe.Pointer(cs))
	lps, err := parseWordProbs(raw, text)
	if err != nil {
		return "", nil, fmt.Errorf("finishing utterance: %w", err)
	}
	return text, lps, nil
}

// parseWordProbs reads omni_word_probs' lines, drops fillers and sentence markers, strips the
// alternate-pronunciation suffix ("the(2)"), and checks that the words are text's, in order.
func parseWordProbs(raw, text string) ([]audio.WordLogprob, error) {
	var out []audio.WordLogprob
	for line := range strings.Lines(raw) {
		f := strings.Split(strings.TrimSuffix(line, "\n"), "\t")
		if len(f) != 3 {
			return nil, fmt.Errorf("word posterior line %q: want word, frame and log probability", line)
		}
		w := f[0]
		if isFiller(w) {
			continue
		}
		if i := strings.IndexByte(w, '('); i > 0 && strings.HasSuffix(w, ")") {
			w = w[:i]
		}
		lp, err := strconv.ParseFloat(f[2], 64)
		if err != nil || math.IsInf(lp, 0) {
			return nil, fmt.Errorf("word %q at frame %s: log probability %q is not a number", w, f[1], f[2])
		}
		if math.IsNaN(lp) {
			lp = UnsupportedWordLogprob
		}
		out = append(out, audio.WordLogprob{Word: w, Logprob: min(lp, 0)}) // rounding can give +1e-9
	}
	words := strings.Fields(text)
	if len(words) != len(out) {
		return nil, fmt.Errorf("the word segmentation has %d words, the transcript %q %d", len(out), text, len(words))
	}
	for i, w := range words {
		if out[i].Word != w {
			return nil, fmt.Errorf("word %d of the segmentation is %q, of the transcript %q", i, out[i].Word, w)
		}
	}
	return out, nil
}

// UnsupportedWordLogprob is the log probability of a transcript word that no link of the
// utterance's lattice carries at the word's middle frame: on speech buried in noise the
// forward pass can end on a word the lattice (which keeps only paths reaching the final
// sentence marker) pruned. The lattice gives it probability 0; this is the log of the smallest
// positive float64, finite so that JSON can carry it.
var UnsupportedWordLogprob = math.Log(math.SmallestNonzeroFloat64)

// isFiller reports whether a dictionary word is a sentence marker or filler of the en-us model
// (<s>, </s>, <sil>, [NOISE], ++BREATH++ and the like), which the transcript leaves out.
func isFiller(w string) bool {
	return strings.HasPrefix(w, "<") || strings.HasPrefix(w, "[") || strings.HasPrefix(w, "++")
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
	s.asr.release(s.dec)
	s.ps = nil
}

func hypText(h *C.char) string {
	if h == nil {
		return ""
	}
	return strings.TrimSpace(C.GoString(h))
}
