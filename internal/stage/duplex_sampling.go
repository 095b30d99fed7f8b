package stage

import "github.com/omniserve/omniserve/internal/gpu"

// DuplexSampling is the default sampling of duplex streams (pipeline.thinker.sampling). Without
// a configured seed every response draws a fresh random one, so that equal conversations get
// different replies at a temperature above 0, as chat completions without a seed do.
func (p *Pipeline) DuplexSampling() gpu.Sampling {
	c := p.cfg.Thinker.Sampling
	s := gpu.Sampling{Temperature: c.Temperature, TopP: c.TopP, TopK: c.TopK, RepeatPenalty: c.RepeatPenalty, RandomSeed: c.Seed == nil}
	if c.Seed != nil {
		s.Seed = *c.Seed
	}
	return s
}
