package session

import (
	"fmt"
	"math"
	"strings"
	"time"

	"github.com/omniserve/omniserve/internal/duplex"
)

// The responses' decisions: each takes the responses sub-state and one typed input (an engine
// output, a job's result, a client's truncate or playback.ack) and returns the effects, as
// Events for the actor to send, with no I/O, no goroutine and no clock. The actor (response.go,
// outputs.go) runs what they return: it sends the events and makes the engine calls.

// errorEvent is the error effect of code with its message, the client event that caused it and
// the offending param, fenced at epoch.
func errorEvent(epoch int, code, message, eventID, param string) Event {
	ev := ErrorEvent(ErrorType(code), code, message, eventID, param)
	ev.Epoch = epoch
	return ev
}

// info is the response object of r as response.created / response.done tell it, in a session
// configured as st.
func (rs *responses) info(r *response, st *settings, status string, details *StatusDetails, output []Item, u *usage) ResponseInfo {
	maxTokens := r.maxTokens
	if maxTokens <= 0 {
		// "inf": with a server default, that is what the engine applies, so the session tells
		// the limit in force.
		maxTokens = rs.defaultMaxTokens
	}
	o := ResponseInfo{ID: r.id, Status: status, StatusDetails: details,
		Output: output, ConversationID: r.conversationID(rs.sessionID), Metadata: r.metadata, MaxOutputTokens: maxTokens,
		SessionID: rs.sessionID, Epoch: r.epoch, TurnID: r.turnID, AudioSentMs: r.play.sentMs,
		Audio: r.audio, Format: r.format, Voice: st.cfg.Voice, Temperature: st.temperature(),
	}
	if r.temperature != nil {
		o.Temperature = *r.temperature
	}
	if u != nil {
		w := u.view()
		o.Usage = &w
	}
	return o
}

// startedEvents announce r, just begun with its output item it: response.created, the output
// item (and, in the conversation, the item) added, and its audio part. They are not fenced
// (Model false): a cancel that ends the epoch at once must not drop a response.created the
// client has not been sent yet, or it would get response.done for a response it never saw
// created. Only the model's output is fenced.
func (rs *responses) startedEvents(r *response, st *settings, it *item) []Event {
	evs := []Event{{Epoch: r.epoch, Effect: ResponseStarted{Response: rs.info(r, st, "in_progress", nil, []Item{}, nil)}}}
	added := it.item()
	added.EmptyContent = true
	evs = append(evs, Event{Epoch: r.epoch, Effect: OutputItem{Phase: PhaseAdded, ResponseID: r.id, Item: added}})
	if !r.outOfBand {
		evs = append(evs, Event{Epoch: r.epoch, Effect: ConversationItem{Phase: PhaseAdded, PreviousItemID: r.prevItemID, Item: added}})
	}
	if r.audio {
		// The part is "audio" in both dialects (what omniserve has always sent here).
		evs = append(evs, Event{Epoch: r.epoch, Effect: ContentPart{Phase: PhaseAdded,
			ResponseID: r.id, ItemID: r.itemID, Kind: PartAudio}})
	}
	return evs
}

// doneEvents is the terminal sequence of r ending with status: its parts and item done (the
// item's status set), response.done with its usage (kept for the next response) and the rate
// limits. They are not Model output, so they pass the stale filter even after the epoch
// advanced.
func (rs *responses) doneEvents(r *response, st *settings, conv *conversation, status string, details *StatusDetails) []Event {
	heard := r.heardText()
	if r.truncated {
		heard = "" // the client truncated the item: its transcript is gone
	}
	evs := r.partsDone(heard)
	it := r.itemIn(conv)
	output := []Item{}
	if it != nil {
		it.Status = "completed"
		if status != "completed" {
			it.Status = "incomplete"
		}
		w := it.item()
		output = append(output, w)
		evs = append(evs, Event{Epoch: r.epoch, Effect: OutputItem{Phase: PhaseDone, ResponseID: r.id, Item: w}})
		if !r.outOfBand {
			evs = append(evs, Event{Epoch: r.epoch, Effect: ConversationItem{Phase: PhaseDone, PreviousItemID: conv.previousID(it), Item: w}})
		}
	}
	u := r.usage()
	rs.keepUsage(r, u)
	for _, c := range r.calls {
		output = append(output, c.item())
	}
	return append(evs,
		Event{Epoch: r.epoch, Effect: ResponseDone{Response: rs.info(r, st, status, details, output, &u)}},
		Event{Epoch: r.epoch, Effect: RateLimits{Limits: []RateLimit{{Name: "requests"}, {Name: "tokens"}}}})
}

// partsDone closes r's content: its audio and transcript with what the user heard, or its text
// part (announced first if no text delta did).
func (r *response) partsDone(heard string) []Event {
	ev := func(e Effect) Event { return Event{Epoch: r.epoch, Effect: e} }
	if r.audio {
		return []Event{
			ev(OutputDone{Kind: PartAudio, ResponseID: r.id, ItemID: r.itemID}),
			ev(OutputDone{Kind: PartTranscript, ResponseID: r.id, ItemID: r.itemID, Text: heard}),
			ev(ContentPart{Phase: PhaseDone, ResponseID: r.id, ItemID: r.itemID, Kind: PartAudio, Text: heard}),
		}
	}
	var evs []Event
	if !r.out.textPart {
		r.out.textPart = true
		evs = append(evs, ev(ContentPart{Phase: PhaseAdded, ResponseID: r.id, ItemID: r.itemID, Kind: PartText}))
	}
	return append(evs,
		ev(OutputDone{Kind: PartText, ResponseID: r.id, ItemID: r.itemID, Text: heard}),
		ev(ContentPart{Phase: PhaseDone, ResponseID: r.id, ItemID: r.itemID, Kind: PartText, Text: heard}))
}

// textOutput takes one text output of r's turn: its tokens count; without audio the text is a
// delta (its part announced first), with audio the transcript rides on the audio instead.
func (r *response) textOutput(o duplex.Output) []Event {
	r.out.outTokens += o.Tokens
	if r.audio || o.Text == "" {
		return nil
	}
	var evs []Event
	if !r.out.textPart {
		r.out.textPart = true
		evs = append(evs, Event{Epoch: r.epoch, Model: true, Effect: ContentPart{Phase: PhaseAdded,
			ResponseID: r.id, ItemID: r.itemID, Kind: PartText}})
	}
	r.out.text.WriteString(o.Text)
	return append(evs, Event{Epoch: r.epoch, Model: true, Effect: OutputDelta{Kind: PartText,
		ResponseID: r.id, ItemID: r.itemID, Text: o.Text}})
}

// frameEvents are the audio delta of one paced frame f of r and its transcript delta.
func (r *response) frameEvents(f frame) []Event {
	return []Event{
		{Epoch: r.epoch, Model: true, Effect: OutputDelta{Kind: PartAudio,
			ResponseID: r.id, ItemID: r.itemID, Audio: f.data, Format: r.format, DurationMs: f.ms}},
		{Epoch: r.epoch, Model: true, Effect: OutputDelta{Kind: PartTranscript,
			ResponseID: r.id, ItemID: r.itemID, Text: f.text}},
	}
}

// truncate is conversation.item.truncate: the user heard only the first endMs of the item's
// audio. The audio after the cut is dropped and, as OpenAI does, the item's transcript is
// removed; the active response's item is clipped to what was sent. A failure is an error
// effect; the session goes on.
func (rs *responses) truncate(conv *conversation, epoch int, eventID, itemID string, contentIndex int, endMs float64) []Event {
	length := -1.0
	r := rs.resp
	active := r != nil && r.itemID == itemID
	if active {
		length = r.play.sentMs
	}
	endMs, terr := conv.truncate(itemID, contentIndex, endMs, length)
	if terr != nil {
		return []Event{errorEvent(epoch, terr.code, terr.message, eventID, terr.param)}
	}
	if active {
		r.play.playedMs = endMs
		r.truncated = true
	}
	return []Event{{Epoch: epoch, Effect: ItemTruncated{ItemID: itemID, ContentIndex: contentIndex, AudioEndMs: int(endMs)}}}
}

// playbackAck is the client's playback.ack: what it played of the active response's audio
// (clipped to what was sent), acknowledged, and with truncate the item cut there.
func (rs *responses) playbackAck(c *PlaybackAck, conv *conversation, epoch int) []Event {
	r := rs.resp
	if r == nil || (c.ResponseID != "" && c.ResponseID != r.id) || (c.ItemID != "" && !namesItem(c.ItemID, r.id, r.itemID)) {
		return rs.finishedAck(c, conv, epoch)
	}
	played := math.Min(float64(c.PlayedMs), r.play.sentMs)
	r.play.playedMs = played
	r.play.ackedMs = played
	evs := []Event{{Epoch: epoch, Effect: PlaybackAcknowledged{
		ResponseID: r.id, ItemID: r.itemID, PlayedMs: int(played), SentMs: int(r.play.sentMs), CommittedMs: committedMs(c, played), Truncated: c.Truncate}}}
	if c.Truncate {
		evs = append(evs, rs.truncate(conv, epoch, c.ID, r.itemID, 0, played)...)
	}
	return evs
}

// cancelRefusal is why response.cancel c cannot cancel (an error effect), or nil when it
// cancels the active response.
func (rs *responses) cancelRefusal(c *CancelResponse, epoch int) *Event {
	var ev Event
	switch {
	case rs.resp == nil:
		ev = errorEvent(epoch, "response_cancel_not_active", "Cancellation failed: no active response found", c.ID, "")
	case c.ResponseID != "" && c.ResponseID != rs.resp.id:
		ev = errorEvent(epoch, "response_cancel_not_active", fmt.Sprintf("Cancellation failed: response %q is not active", c.ResponseID), c.ID, "response_id")
	default:
		return nil
	}
	return &ev
}

// activeRefusal is the error effect of a request for a response while one is active, or nil.
func (rs *responses) activeRefusal(eventID string, epoch int) *Event {
	if rs.resp == nil {
		return nil
	}
	ev := errorEvent(epoch, "conversation_already_has_active_response", fmt.Sprintf(
		"Conversation already has an active response in progress: %s. Wait until the response is finished before creating a new one.", rs.resp.id), eventID, "")
	return &ev
}

// cut cancels r at now: its queued audio is dropped and, when the client holds audio it has not
// played yet, the item keeps only what was played (the client's playback.ack, else the pacing
// clock, which assumes playback at real time from the first delta); with notify the client is
// told which audio to drop (output_audio_buffer.cleared, the effect returned).
func (r *response) cut(now time.Time, notify bool) []Event {
	r.cancelled.Store(true)
	r.play.frames = nil
	if !r.audio || r.play.sentMs <= 0 {
		return nil
	}
	r.play.assumePlayed(now)
	if !notify {
		return nil
	}
	r.clearedAudio = true
	end := int(r.play.playedMs)
	return []Event{{Epoch: r.epoch, Effect: AudioBuffer{Phase: PhaseCleared, ResponseID: r.id, ItemID: r.itemID, AudioEndMs: &end}}}
}

// cancelSignal is what the engine is told when a response is cancelled from source.
func cancelSignal(source string) string {
	switch source {
	case "barge_in", "turn_detected":
		return "barge_in"
	case "cancel":
		return "input.cancel"
	}
	return "response.cancel"
}

// conversationID is the conversation_id of r in session sessionID: null out of band (OpenAI).
func (r *response) conversationID(sessionID string) *string {
	if r.outOfBand {
		return nil
	}
	id := "conv_" + strings.TrimPrefix(sessionID, "duplex-")
	return &id
}

// outputRoute is where one engine output goes (responses.route).
type outputRoute int

const (
	routeDrop            outputRoute = iota // a turn that is over, or nothing to do
	routeAppendFailed                       // an engine failure outside any turn (an append): told
	routeAheadListen                        // the listen decision of a chunk forwarded ahead of its commit: internal
	routeTranscriptDelta                    // words the recognizer settled on while the user speaks
	routeTranscript                         // the final transcript of a streamed utterance
	routeListen                             // the engine listens while no response is open: told
	routeSpeak                              // the engine speaks: the response's turn
	routeTurnClosed                         // a turn without a response finished: its late outputs drop
	routeTurnFailed                         // a turn without a response failed: logged and counted
	routeResponse                           // output of the response's turn
	routeTruncated                          // the engine dropped the oldest turns: their items go
)

// outputPlan is what one engine output asks of the actor: where it goes, whether the active
// response completes first (handoff: the engine moved on to a newer turn while it was open,
// the auto-response handoff) and whether a response begins for the output's turn (begin: an
// auto-response session answers the engine's own turn).
type outputPlan struct {
	route   outputRoute
	handoff bool
	begin   bool
}

// route decides where engine output o goes, with aheadListens listen decisions still owed to
// chunks forwarded ahead and auto an auto-response session. It changes nothing: the actor
// runs the plan (Session.routeOutput).
func (rs *responses) route(o duplex.Output, aheadListens int, auto bool) outputPlan {
	switch {
	case o.Kind == duplex.OutError && o.Turn < 0:
		return outputPlan{route: routeAppendFailed}
	case o.Kind == duplex.OutDecision && o.Decision == duplex.DecisionListen && aheadListens > 0:
		return outputPlan{route: routeAheadListen}
	case o.Kind == duplex.OutTranscriptDelta:
		return outputPlan{route: routeTranscriptDelta}
	case o.Kind == duplex.OutTranscript:
		return outputPlan{route: routeTranscript}
	case o.Kind == duplex.OutTruncated:
		return outputPlan{route: routeTruncated}
	case rs.over(o.Turn):
		return outputPlan{route: routeDrop} // a turn that is already over: cancelled or done
	}
	p := outputPlan{handoff: rs.handsOff(o)}
	open := rs.resp != nil && !p.handoff
	if o.Kind == duplex.OutDecision {
		p.route = decisionRoute(o.Decision, open)
		p.begin = p.route == routeSpeak && !open && auto
		return p
	}
	p.route, p.begin = turnRoute(o.Kind, open, auto)
	return p
}

// handsOff reports whether output o of a newer engine turn ends the active response: the
// engine moved on while it was open (a listen decision does not).
func (rs *responses) handsOff(o duplex.Output) bool {
	r := rs.resp
	turnOutput := o.Kind != duplex.OutDecision || o.Decision == duplex.DecisionSpeak
	return r != nil && turnOutput && r.turn.Engine() >= 0 && o.Turn > r.turn.Engine()
}

// decisionRoute is where the engine's listen/speak decision d goes, open whether a response is
// open: a listen is told only between responses.
func decisionRoute(d string, open bool) outputRoute {
	switch d {
	case duplex.DecisionListen:
		if !open {
			return routeListen
		}
	case duplex.DecisionSpeak:
		return routeSpeak
	}
	return routeDrop
}

// turnRoute is where an output of kind k of a live turn goes, open whether a response is open
// and auto an auto-response session: to the response, begun first under auto-response; without
// one, a finished or failed turn is closed or counted, and the rest is dropped.
func turnRoute(k duplex.OutputKind, open, auto bool) (outputRoute, bool) {
	switch {
	case open:
		return routeResponse, false
	case auto && k != duplex.OutFinished && k != duplex.OutError && k != duplex.OutUsage:
		return routeResponse, true
	case k == duplex.OutFinished:
		return routeTurnClosed, false
	case k == duplex.OutError:
		return routeTurnFailed, false
	}
	return routeDrop, false
}

// fenceLate fences off the turn of a job whose response was cancelled while the job ran: true
// when that turn was still open (its engine work must stop).
func (rs *responses) fenceLate(res jobResult) bool {
	if !res.haveTurn || rs.over(res.turn) {
		return false
	}
	rs.closeTurn(res.turn)
	return true
}
