package session

import (
	"go.uber.org/zap"

	"github.com/omniserve/omniserve/internal/protocol"
	"github.com/omniserve/omniserve/internal/requestclient"
)

// semantic_vad on a ?duplex=1 auto-response session: the engine stream endpoints the turn on
// its own end-of-turn estimate (stage/duplex_semvad.go, the same table as semvad.go). The
// session's VAD reports the pauses it finds but keeps the speech segment open; the engine's
// speak decision carries how the turn ended, which closes the segment with speech_stopped and
// its end_of_turn, counted as the conversation path counts its decisions.

// engineEndsTurns reports whether the engine stream decides semantic_vad's end of turn.
func engineEndsTurns(td *TurnDetection, autoResponse bool) bool {
	return td != nil && td.Type == requestclient.TurnSemanticVAD && autoResponse
}

// engineTurnEnded applies the engine's end-of-turn decision: speech_stopped with end_of_turn
// (audio_end_ms is the session's input position when the decision arrived).
func (s *Session) engineTurnEnded(d *requestclient.EndOfTurnDecision) {
	info := &protocol.EndOfTurnInfo{Reason: d.Reason, SilenceMs: d.SilenceMs}
	if d.Scored {
		prob := d.Prob
		info.Probability = &prob
	}
	if s.inSpeech {
		s.inSpeech = false
		s.send(Event{Epoch: s.epoch, Payload: protocol.InputAudioBufferSpeechStopped{
			AudioEndMs: int(s.inputMs), ItemID: s.speechItemID, EndOfTurn: info}})
	}
	s.log.Debug("semantic_vad end of turn (engine)", zap.String("reason", d.Reason), zap.Float64("probability", d.Prob),
		zap.Bool("scored", d.Scored), zap.Int("silence_ms", d.SilenceMs))
	if o, ok := s.m.cfg.Metrics.(endOfTurnObserver); ok {
		o.ObserveEndOfTurn(d.Reason, d.Prob, d.Scored)
	}
}
