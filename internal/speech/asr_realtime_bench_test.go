package speech

import (
	"context"
	"fmt"
	"slices"
	"sync"
	"testing"
	"time"
)

// BenchmarkASRRealtimeStreams is the recognizer's share of a realtime transcription session:
// n streams each get "go forward ten meters" plus 500 ms of silence in 100 ms chunks paced at
// real time (a microphone), three utterances in a row, and Finish at the end of each (the
// commit). It reports, over all streams and utterances, the finish latency (last audio written
// → final transcript: what a session adds to the VAD's silence window before
// conversation.item.input_audio_transcription.completed) p50/p90, and the worst lag of a write
// behind the audio clock; n streams keep up while that lag stays below 400 ms (bench speech's
// --max-lag) and the transcripts stay right. Run:
//
//	go test -run '^$' -bench BenchmarkASRRealtimeStreams -benchtime 1x ./internal/speech/
func BenchmarkASRRealtimeStreams(b *testing.B) {
	speech := loadRaw(b, goforwardRaw)
	clip := append(slices.Clone(speech), make([]float32, 8000)...)
	const chunk = 1600 // 100 ms at 16 kHz
	for _, n := range []int{1, 4, 8, 12, 16, 24} {
		b.Run(fmt.Sprintf("streams=%d", n), func(b *testing.B) {
			a := newTestASR(b, n)
			if err := a.Warm(context.Background(), n); err != nil {
				b.Fatal(err)
			}
			for range b.N {
				var (
					mu       sync.Mutex
					finishes []time.Duration
					maxLag   time.Duration
					wrong    int
					wg       sync.WaitGroup
				)
				for range n {
					wg.Add(1)
					go func() {
						defer wg.Done()
						s, err := a.NewStream(context.Background())
						if err != nil {
							b.Error(err)
							return
						}
						defer s.Close()
						start := time.Now()
						sent := 0 // samples of audio time since start
						for range 3 {
							for off := 0; off < len(clip); off += chunk {
								due := start.Add(time.Duration(sent) * time.Second / 16000)
								time.Sleep(time.Until(due))
								if err := s.Write(clip[off:min(off+chunk, len(clip))]); err != nil {
									b.Error(err)
									return
								}
								sent += min(chunk, len(clip)-off)
								lag := time.Since(due)
								mu.Lock()
								maxLag = max(maxLag, lag)
								mu.Unlock()
							}
							t0 := time.Now()
							got, err := s.Finish()
							d := time.Since(t0)
							if err != nil {
								b.Error(err)
								return
							}
							mu.Lock()
							finishes = append(finishes, d)
							if got != goforwardTxt {
								wrong++
							}
							mu.Unlock()
						}
					}()
				}
				wg.Wait()
				slices.Sort(finishes)
				if len(finishes) == 0 {
					return
				}
				p := func(q float64) float64 {
					return float64(finishes[int(q*float64(len(finishes)-1))].Microseconds()) / 1000
				}
				b.ReportMetric(p(0.5), "finish_p50_ms")
				b.ReportMetric(p(0.9), "finish_p90_ms")
				b.ReportMetric(float64(maxLag.Microseconds())/1000, "max_write_lag_ms")
				b.ReportMetric(float64(wrong), "wrong_transcripts")
			}
		})
	}
}
