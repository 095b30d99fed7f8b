package frontend

import (
	"context"
	"errors"
	"fmt"
	"io"
	"slices"
	"sync"
	"time"

	"github.com/omniserve/omniserve/internal/audio"
	"github.com/omniserve/omniserve/internal/bench"
	"github.com/omniserve/omniserve/internal/benchreport"
	"github.com/omniserve/omniserve/internal/duplex"
	"github.com/omniserve/omniserve/internal/metrics"
	"github.com/omniserve/omniserve/internal/stage"
)

// PipelineOptions shape the spoken-turn measurement.
type PipelineOptions struct {
	Runs      int         // measured runs, after one warm-up run
	MaxTokens int         // reply length
	Realtime  bool        // pace the 100 ms units in real time
	Meter     bench.Meter // progress of the runs; nil shows none
}

// Pipeline measures, on the server's pipeline p, the spoken-turn latency: from the VAD endpoint
// of clip (the arrival of the audio unit in which the silence window completed) to the first
// PCM chunk out of the talker, on one auto-response duplex stream per run. Progress lines go to
// out.
func Pipeline(ctx context.Context, p *stage.Pipeline, clip []float32, o PipelineOptions, out io.Writer) ([]bench.Figure, error) {
	if o.Runs < 1 {
		return nil, errors.New("--runs must be at least 1")
	}
	// One second of trailing silence: enough for the default 500 ms endpoint.
	input := append(slices.Clone(clip), make([]float32, audio.ASRSampleRate)...)
	fmt.Fprintf(out, "pipeline: clip %.2f s + 1 s silence; %d-token replies; realtime=%v\n",
		float64(len(clip))/audio.ASRSampleRate, o.MaxTokens, o.Realtime)
	var firstAudio, firstText, transcript []float64
	prog := o.Meter.Start("speech pipeline", o.Runs+1, "runs")
	defer prog.Done()
	for i := range o.Runs + 1 {
		r, err := oneRun(ctx, p, input, o)
		if err != nil {
			return nil, fmt.Errorf("run %d: %w", i, err)
		}
		prog.Add(1)
		label := fmt.Sprintf("run %d", i)
		if i == 0 {
			label = "warm-up"
		} else {
			firstAudio = append(firstAudio, r.audioMs)
			firstText = append(firstText, r.textMs)
			transcript = append(transcript, r.transcriptMs)
		}
		fmt.Fprintf(out, "%s: endpoint->transcript %.1f ms, ->first text %.1f ms (engine ttft %.1f ms, %d prompt tokens), ->first audio %.1f ms (first chunk %.2f s of audio; heard %q)\n",
			label, r.transcriptMs, r.textMs, r.ttftMs, r.promptTokens, r.audioMs, r.firstChunkS, r.heard)
	}
	fmt.Fprintf(out, "first audio over %d runs: p50 %.1f ms, min %.1f ms, max %.1f ms; first text p50 %.1f ms; transcript p50 %.1f ms\n",
		o.Runs, benchreport.Quantile(firstAudio, 50), slices.Min(firstAudio), slices.Max(firstAudio), benchreport.Quantile(firstText, 50), benchreport.Quantile(transcript, 50))
	return []bench.Figure{
		{Name: "pipeline_first_audio_ms", Unit: "ms", Samples: firstAudio, Keys: []bench.Stat{bench.P50}, Bare: true, Digits: 1,
			Definition: "the speak decision's audio unit arrives (VAD endpoint) → the first talker PCM chunk reaches the sink"},
		{Name: "pipeline_first_text_ms", Unit: "ms", Samples: firstText,
			Definition: "VAD endpoint → the first reply text"},
		{Name: "pipeline_transcript_ms", Unit: "ms", Samples: transcript,
			Definition: "VAD endpoint → the user's transcript"},
	}, nil
}

type result struct {
	transcriptMs, textMs, audioMs float64
	firstChunkS                   float64
	heard                         string
	ttftMs                        float64
	promptTokens                  int
}

// timingSink notes when the speak decision's unit arrived and when the first outputs came.
type timingSink struct {
	mu                            sync.Mutex
	endpoint                      float64 // StageSubmitTS of the speak decision: its unit's arrival
	transcriptAt, textAt, audioAt float64
	heard                         string
	ttftMs                        float64 // engine: generation submit to first token
	promptTokens                  int
	firstChunkS                   float64
	finished                      chan struct{}
	once                          sync.Once
}

func (s *timingSink) OnOutput(m stage.OutputMessage) {
	now := metrics.Now()
	s.mu.Lock()
	defer s.mu.Unlock()
	switch m.Kind {
	case duplex.OutDecision:
		if m.Decision == duplex.DecisionSpeak && s.endpoint == 0 {
			s.endpoint = m.StageSubmitTS
		}
	case duplex.OutTranscript:
		if s.transcriptAt == 0 {
			s.transcriptAt, s.heard = now, m.Text
		}
	case duplex.OutText:
		if s.textAt == 0 {
			s.textAt = now
		}
	case duplex.OutAudio:
		if s.audioAt == 0 {
			s.audioAt = now
			s.firstChunkS = float64(len(m.Audio)) / float64(m.SampleRate)
		}
	case duplex.OutFinished, duplex.OutError:
		s.once.Do(func() { close(s.finished) })
	}
}

func (s *timingSink) OnStageMetrics(m stage.StageMetricsMessage) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if m.StageID == 0 && m.Metrics.NumTokensOut > 0 && s.ttftMs == 0 {
		s.ttftMs, s.promptTokens = m.Metrics.VllmTtftMs, m.Metrics.NumTokensIn
	}
}
func (s *timingSink) OnTransfer(stage.TransferEvent) {}

func oneRun(ctx context.Context, p *stage.Pipeline, audio []float32, o PipelineOptions) (result, error) {
	sink := &timingSink{finished: make(chan struct{})}
	d, err := p.OpenDuplex(ctx, stage.DuplexOptions{Options: duplex.Options{AutoResponse: true, WantAudio: true, MaxTokens: o.MaxTokens}}, sink)
	if err != nil {
		return result{}, err
	}
	defer d.Close()
	const unit = 1600 // 100 ms
	start := time.Now()
	for i, off := 0, 0; off < len(audio); i, off = i+1, off+unit {
		if o.Realtime {
			if wait := time.Until(start.Add(time.Duration(i) * 100 * time.Millisecond)); wait > 0 {
				time.Sleep(wait)
			}
		}
		if err := d.AppendAudio(ctx, 0, audio[off:min(off+unit, len(audio))]); err != nil {
			return result{}, err
		}
	}
	select {
	case <-sink.finished:
	case <-time.After(30 * time.Second):
		return result{}, errors.New("no Finished output within 30 s (no endpoint detected?)")
	case <-ctx.Done():
		return result{}, ctx.Err()
	}
	sink.mu.Lock()
	defer sink.mu.Unlock()
	if sink.endpoint == 0 || sink.audioAt == 0 {
		return result{}, errors.New("no speak decision or no audio")
	}
	ms := func(t float64) float64 { return (t - sink.endpoint) * 1000 }
	return result{transcriptMs: ms(sink.transcriptAt), textMs: ms(sink.textAt), audioMs: ms(sink.audioAt),
		firstChunkS: sink.firstChunkS, heard: sink.heard, ttftMs: sink.ttftMs, promptTokens: sink.promptTokens}, nil
}
