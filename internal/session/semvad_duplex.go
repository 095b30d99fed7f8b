package session

import (
	"github.com/omniserve/omniserve/internal/duplex"
	"go.uber.org/zap"
)

// semantic_vad on a ?duplex=1 auto-response session: the engine stream endpoints the turn on
// its own end-of-turn estimate (stage/duplex_semvad.go, the same table as semvad.go). The
// session's VAD reports the pauses it finds but keeps the speech segment open; the engine's
// speak decision carries how the turn ended, which closes the segment with speech_stopped and
// its end_of_turn, counted as the conversation path counts its decisions.

// engineEndsTurns reports whether the engine stream decides semantic_vad's end of turn.
func engineEndsTurns(td *TurnDetection, autoResponse bool) bool {
	return td != nil && td.Type == duplex.TurnSemanticVAD && autoResponse
}

// engineEnded applies the engine's end-of-turn decision to the input: speech_stopped with
// end_of_turn (audio_end_ms is the input position when the decision arrived).
func (m *semState) engineEnded(d *duplex.EndOfTurnDecision, in *inputAudio) {
	info := &EndOfTurn{Reason: d.Reason, SilenceMs: d.SilenceMs}
	if d.Scored {
		prob := d.Prob
		info.Probability = &prob
	}
	if in.inSpeech {
		in.inSpeech = false
		m.send(InputSpeech{Phase: PhaseStopped, AudioMs: int(in.inputMs), ItemID: in.speechItemID, EndOfTurn: info})
	}
	m.log.Debug("semantic_vad end of turn (engine)", zap.String("reason", d.Reason), zap.Float64("probability", d.Prob),
		zap.Bool("scored", d.Scored), zap.Int("silence_ms", d.SilenceMs))
	if m.observer != nil {
		m.observer.ObserveEndOfTurn(d.Reason, d.Prob, d.Scored)
	}
}
