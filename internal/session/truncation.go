package session

import (
	"context"
	"errors"

	"go.uber.org/zap"

	"github.com/omniserve/omniserve/internal/duplex"
	"github.com/omniserve/omniserve/internal/requestclient"
)

// Truncation (session.truncation): the engine keeps the conversation it reads within its
// context window (internal/stage/duplex_budget.go) and reports the turns it dropped
// (duplex.OutTruncated); the session deletes their items and announces each with
// conversation.item.deleted (reason "truncation"). The decisions here are pure: applyTruncation
// (the setting), conversation.truncated (which items go). The shell's part is routing the
// engine's report (Session.routeOutput) and telling an open stream a new setting
// (syncTruncation).

// ReasonTruncation is ItemDeleted.Reason for an item the engine's truncation dropped.
const ReasonTruncation = "truncation"

// applyTruncation sets session.truncation after checking it (the dialect's decoder checked
// its shape; the values are checked here once for every dialect).
func (p ConfigPatch) applyTruncation(cfg *Config) *FieldError {
	if p.Truncation == nil {
		return nil
	}
	t := *p.Truncation
	if t.Mode == "" {
		t.Mode = duplex.TruncationAuto
	}
	if err := t.Validate(); err != nil {
		return &FieldError{"invalid_value", "session.truncation", err.Error()}
	}
	cfg.Truncation = t
	return nil
}

// truncated deletes the items of the turns up to through that the engine dropped: every item
// of such a turn but system messages (the engine keeps them), the item keep (the active
// response's) and the newest item. It returns the effects (conversation.item.deleted, reason
// "truncation", in epoch) and the log line.
func (c *conversation) truncated(tr *duplex.Truncated, keep string, epoch int) []action {
	if tr == nil || len(c.items) == 0 {
		return nil
	}
	newest := c.items[len(c.items)-1]
	var evs []Event
	kept := c.items[:0]
	for _, it := range c.items {
		if it.Turn > 0 && it.Turn <= tr.Through && it.Role != "system" && it.ID != keep && it != newest {
			evs = append(evs, Event{Epoch: epoch, Effect: ItemDeleted{ItemID: it.ID, Reason: ReasonTruncation}})
			continue
		}
		kept = append(kept, it)
	}
	clear(c.items[len(kept):])
	c.items = kept
	if len(evs) == 0 {
		return nil
	}
	return []action{emit{evs: evs}, logLine{msg: "conversation truncated: the engine dropped the oldest turns",
		fields: []zap.Field{zap.Int("through_turn", tr.Through), zap.Int("items", len(evs)), zap.Int("messages", tr.Messages),
			zap.Int("tokens_before", tr.TokensBefore), zap.Int("tokens_after", tr.TokensAfter)}}}
}

// contextFailure is the error event of a turn that failed before a response carried it (an
// auto-response turn the engine answered by itself) because the conversation no longer fits
// its context (truncation "disabled"): the client must learn of it, the other failures of such
// turns are only logged and counted.
func contextFailure(err error, epoch int) []Event {
	if !errors.Is(err, requestclient.ErrContextLength) {
		return nil
	}
	return []Event{engineErrorEvent(epoch, "context_length_exceeded", err.Error(), "", err)}
}

// truncationSetter is implemented by engines whose truncation setting can change on an open
// stream.
type truncationSetter interface {
	SetTruncation(ctx context.Context, t duplex.Truncation) error
}

// syncTruncation makes the open engine stream's truncation follow the session's after a
// session.update, as a job in wire order with the input around it. (Every engine of this
// server can; a test's fake without SetTruncation keeps the setting it was opened with.)
//
// It is the shell's (it queues a job), but reaches only the engine link, the job queue and the
// log it is given.
func syncTruncation(l *engineLink, want duplex.Truncation, submit func(job) bool, log *zap.Logger) {
	eng := l.engine
	if eng == nil || l.opts.Truncation == want {
		return
	}
	setter, ok := eng.(truncationSetter)
	if !ok {
		return
	}
	if !submit(job{run: func(ctx context.Context) jobResult {
		return jobResult{err: setter.SetTruncation(ctx, want), errCode: "runtime_append_failed"}
	}}) {
		log.Warn("truncation setting not queued: the engine queue is full", zap.String("truncation", want.Mode))
		return
	}
	l.opts.Truncation = want
}

// The pipeline's engine changes truncation on an open stream.
var _ truncationSetter = pipelineEngine{}
