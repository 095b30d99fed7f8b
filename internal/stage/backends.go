package stage

import (
	"context"
	"fmt"
	"net/url"
	"strings"

	"go.uber.org/zap"

	"github.com/omniserve/omniserve/internal/audio"
	"github.com/omniserve/omniserve/internal/speech"
)

// selectBackends picks, per stage, the local engine from Deps or the remote backend that
// cfg.Remote names. Local and remote mix freely.
func (p *Pipeline) selectBackends() error {
	r := p.cfg.Remote
	switch {
	case r.Thinker != nil:
		p.remote = newRemoteThinker(*r.Thinker)
		p.log.Info("stage thinker: remote LLM", zap.String("url", p.remote.where()), zap.String("model", r.Thinker.Model))
	case p.deps.Engine == nil:
		return fmt.Errorf("%w: no engine and no pipeline.remote.thinker", errConfig)
	}
	switch {
	case r.ASR != nil:
		a := newRemoteASR(*r.ASR)
		p.asr = a
		p.log.Info("stage thinker: remote ASR", zap.String("url", a.c.url("/audio/transcriptions")), zap.String("model", r.ASR.Model))
	case p.deps.ASR != nil:
		p.asr = localASR{p.deps.ASR}
	}
	if len(p.cfg.Stages) < 2 {
		return nil
	}
	switch {
	case r.TTS != nil:
		t := newRemoteTTS(*r.TTS, p.cfg.Talker.OutputRate)
		p.tts = t
		p.log.Info("stage talker: remote TTS", zap.String("url", t.c.url("/audio/speech")), zap.String("model", r.TTS.Model))
	case p.deps.TTS != nil:
		p.tts = p.deps.TTS
	}
	return nil
}

// remoteNames is the `remote` row of each stage's statistics (index = stage id): the remote
// backends configured for the stage as part=host[:port], comma-separated ("" = all local).
// Only the host is named: a base URL's path and credentials are not for logs.
func remoteNames(r RemoteStages) [2]string {
	var parts [2][]string
	add := func(stage int, part string, c *RemoteConfig) {
		if c == nil {
			return
		}
		host := c.BaseURL
		if u, err := url.Parse(c.BaseURL); err == nil && u.Host != "" {
			host = u.Host
		}
		parts[stage] = append(parts[stage], part+"="+host)
	}
	add(0, "llm", r.Thinker)
	add(0, "asr", r.ASR)
	add(1, "tts", r.TTS)
	return [2]string{strings.Join(parts[0], ","), strings.Join(parts[1], ",")}
}

func (p *Pipeline) closeRemotes() {
	if p.remote != nil {
		p.remote.c.close()
	}
	if a, ok := p.asr.(*remoteASR); ok {
		a.c.close()
	}
	if t, ok := p.tts.(*remoteTTS); ok {
		t.c.close()
	}
}

// Transcribe runs the pipeline's ASR (local or remote) on one 16 kHz utterance; it serves
// POST /v1/audio/transcriptions.
func (p *Pipeline) Transcribe(ctx context.Context, pcm16k []float32) (string, error) {
	if p.asr == nil {
		return "", fmt.Errorf("transcribing: %w: no ASR", ErrInvalidRequest)
	}
	return p.asr.Transcribe(ctx, pcm16k)
}

// TranscribeStream is Transcribe with the recognizer's partial hypotheses passed to partial as
// decoding goes (the local ASR's; a remote ASR gives none). It serves
// POST /v1/audio/transcriptions with stream=true.
func (p *Pipeline) TranscribeStream(ctx context.Context, pcm16k []float32, partial func(string)) (string, error) {
	if p.asr == nil {
		return "", fmt.Errorf("transcribing: %w: no ASR", ErrInvalidRequest)
	}
	if l, ok := p.asr.(localASR); ok {
		return l.a.TranscribeStream(ctx, pcm16k, partial)
	}
	return p.asr.Transcribe(ctx, pcm16k)
}

// TranscribeLogprobs is TranscribeStream that also returns each transcript word's log
// posterior; it serves include=logprobs. Only the local recognizer has them: a remote ASR's
// answer gives none, so asking one is an ErrInvalidRequest rather than a reply without them.
func (p *Pipeline) TranscribeLogprobs(ctx context.Context, pcm16k []float32, partial func(string)) (string, []audio.WordLogprob, error) {
	if p.asr == nil {
		return "", nil, fmt.Errorf("transcribing: %w: no ASR", ErrInvalidRequest)
	}
	l, ok := p.asr.(localASR)
	if !ok {
		return "", nil, fmt.Errorf("transcribing: %w: %s", ErrInvalidRequest, errNoLogprobs)
	}
	return l.a.TranscribeLogprobs(ctx, pcm16k, partial)
}

// HasTranscriptLogprobs reports whether the pipeline's recognizer gives word log posteriors
// (TranscribeLogprobs, DuplexOptions.TranscriptLogprobs): only the local one does.
func (p *Pipeline) HasTranscriptLogprobs() bool {
	_, ok := p.asr.(localASR)
	return ok
}

// Synthesize runs the talker's TTS (local or remote) on text; it serves POST /v1/audio/speech.
func (p *Pipeline) Synthesize(ctx context.Context, text string) ([]float32, error) {
	if p.tts == nil {
		return nil, fmt.Errorf("synthesizing: %w: no talker stage", ErrInvalidRequest)
	}
	return p.tts.Synthesize(ctx, text)
}

// SpeechRate is the sample rate of Synthesize's output (0 without a talker stage).
func (p *Pipeline) SpeechRate() int {
	if p.tts == nil {
		return 0
	}
	return p.tts.OutputRate()
}

// HasSpeech reports whether Synthesize works.
func (p *Pipeline) HasSpeech() bool { return p.tts != nil }

var _ asrStream = (*speech.ASRStream)(nil)
