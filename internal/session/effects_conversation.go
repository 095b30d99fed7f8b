package session

import "github.com/omniserve/omniserve/internal/audio"

// The effects on the conversation and its input: items added, done, retrieved, deleted and
// truncated; the input audio's speech edges, commit, clear and idle timeout; overlap decisions;
// and input transcription.

// ConversationItem is an item of the conversation: Phase is PhaseAdded, PhaseDone or
// PhaseRetrieved; PreviousItemID is nil for the first item (and unused for PhaseRetrieved).
type ConversationItem struct {
	Phase          Phase
	PreviousItemID *string
	Item           Item
}

// ItemDeleted: an item left the conversation (Reason "" when the client deleted it).
type ItemDeleted struct{ ItemID, Reason string }

// ItemTruncated: the client cut an item's audio at AudioEndMs.
type ItemTruncated struct {
	ItemID                   string
	ContentIndex, AudioEndMs int
}

// InputSpeech is an edge of the user's speech in the input audio: PhaseStarted (AudioMs is its
// start) or PhaseStopped (its end; EndOfTurn says why semantic_vad ended the turn, if it did).
type InputSpeech struct {
	Phase     Phase
	AudioMs   int
	ItemID    string
	EndOfTurn *EndOfTurn
}

// EndOfTurn is semantic_vad's decision on a pause: its Reason (semantic, max_wait, silence),
// the end-of-turn probability when one was estimated, and the pause at the decision.
type EndOfTurn struct {
	Probability *float64
	Reason      string
	SilenceMs   int
}

// InputCommitted: the input audio became the user item ItemID.
type InputCommitted struct {
	PreviousItemID *string
	ItemID         string
	// Empty: the commit found no audio of its own (the engine had taken it, or the client
	// said it was silence); NoResponse: the turn ends without one (commit_outcome.go).
	Empty, NoResponse bool
	// OverlapAck: a short remark over the running response, taken as an acknowledgement: its
	// audio dropped, no response for it (overlap_commit.go).
	OverlapAck bool
}

// InputCleared: the uncommitted input audio was dropped.
type InputCleared struct{}

// InputTimeout: the user stayed silent for turn_detection's idle timeout.
type InputTimeout struct {
	AudioStartMs, AudioEndMs int
	ItemID                   string
}

// OverlapDecision is what the session did about the user speaking over a response.
type OverlapDecision struct {
	SessionID              string
	Epoch                  int
	Policy, Action, Reason string
}

// Transcription is the input transcription of a user audio item: PhaseDelta (Text is new
// text), PhaseCompleted (Text is the transcript; Logprobs and AudioSeconds when known) or
// PhaseFailed (Error).
type Transcription struct {
	Phase  Phase
	ItemID string
	Text   string
	// Logprobs are the transcript's words with their log probabilities (include asked for them).
	Logprobs *[]audio.TranscriptToken
	// AudioSeconds is the item's audio duration, the usage billed (nil when the item is gone).
	AudioSeconds *float64
	Error        *Error
}

func (ConversationItem) effect() {}
func (ItemDeleted) effect()      {}
func (ItemTruncated) effect()    {}
func (InputSpeech) effect()      {}
func (InputCommitted) effect()   {}
func (InputCleared) effect()     {}
func (InputTimeout) effect()     {}
func (OverlapDecision) effect()  {}
func (Transcription) effect()    {}
