package session

import (
	"context"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"
	"go.uber.org/zap"

	"github.com/omniserve/omniserve/internal/protocol"
)

// TestUpdateModelNames: a session whose connection named no model takes the first served name
// an update gives (the OpenAI Agents SDK's quick-start sends its default model), later served
// names change nothing, and an unserved one is refused whole with param session.model.
func TestUpdateModelNames(t *testing.T) {
	t.Parallel()
	accept := func(n string) bool { return n == "dummy" || strings.HasPrefix(n, "gpt-realtime") }
	for _, tc := range []struct {
		name      string
		connModel string
		first     string
		wantModel string
	}{
		{"connection named none", "", "gpt-realtime-2.1", "gpt-realtime-2.1"},
		{"connection named one", "dummy", "gpt-realtime-2.1", "dummy"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			m := NewManager(ManagerConfig{MaxSessions: 1, ModelName: "dummy", AcceptModel: accept, ServedModels: []string{"dummy"}},
				&fakeBackend{&fakeEngine{t: t}}, zap.NewNop())
			sk := &sink{ch: make(chan Event, 1024)}
			patch := manual16k
			patch.Model, patch.Instructions = ptr(tc.first), ptr("Be brief.")
			s, wait := runSession(t, m, Options{Model: tc.connModel}, sk, patch)
			model := func(ev Event) any { return ev.wire()["session"].(map[string]any)["model"] }
			sk.mu.Lock()
			updated := sk.events[len(sk.events)-1]
			sk.mu.Unlock()
			require.Equal(t, "session.updated", updated.typ())
			require.Equal(t, tc.wantModel, model(updated))
			require.Equal(t, "Be brief.", updated.wire()["session"].(map[string]any)["instructions"])

			ctx := context.Background()
			require.NoError(t, s.Submit(ctx, &UpdateSession{Patch: ConfigPatch{Model: ptr("dummy")}}))
			require.Equal(t, tc.wantModel, model(sk.until(t, "session.updated")), "a served name changes nothing")

			require.NoError(t, s.Submit(ctx, &UpdateSession{Base: Base{ID: "evt_1"}, Patch: ConfigPatch{Model: ptr("gpt-4o"), Instructions: ptr("x")}}))
			e := sk.until(t, "error").wire()["error"].(map[string]any)
			require.Equal(t, "model_not_found", e["code"])
			require.Equal(t, "session.model", e["param"])
			require.Equal(t, "evt_1", e["event_id"])
			require.Contains(t, e["message"], "dummy")

			require.NoError(t, s.Submit(ctx, &UpdateSession{Patch: ConfigPatch{}}))
			after := sk.until(t, "session.updated").wire()["session"].(map[string]any)
			require.Equal(t, "Be brief.", after["instructions"], "the refused update changed nothing")
			require.Equal(t, tc.wantModel, after["model"])
			require.NoError(t, s.Submit(ctx, &CloseSession{}))
			wait()
		})
	}
}

// TestMaxOutputTokensTruthful: a session that sets no limit, or "inf", reports the limit the
// engine applies (pipeline.thinker.max_tokens), not "inf".
func TestMaxOutputTokensTruthful(t *testing.T) {
	t.Parallel()
	m := NewManager(ManagerConfig{MaxSessions: 1, DefaultMaxOutputTokens: 256}, &fakeBackend{&fakeEngine{t: t}}, zap.NewNop())
	sk := &sink{ch: make(chan Event, 1024)}
	s, wait := runSession(t, m, Options{}, sk, manual16k)
	limit := func(ev Event) protocol.MaxTokens {
		var o protocol.SessionObject
		switch p := ev.payload().(type) {
		case protocol.SessionCreated:
			o = p.Session
		case protocol.SessionUpdated:
			o = p.Session
		}
		return o.(*protocol.Session).MaxOutputTokens
	}
	sk.mu.Lock()
	require.Equal(t, protocol.MaxTokens(256), limit(sk.events[len(sk.events)-1]))
	sk.mu.Unlock()
	ctx := context.Background()
	require.NoError(t, s.Submit(ctx, &UpdateSession{Patch: ConfigPatch{MaxOutputTokens: ptr(100)}}))
	require.Equal(t, protocol.MaxTokens(100), limit(sk.until(t, "session.updated")))
	require.NoError(t, s.Submit(ctx, &UpdateSession{Patch: ConfigPatch{MaxOutputTokens: ptr(0)}}))
	require.Equal(t, protocol.MaxTokens(256), limit(sk.until(t, "session.updated")), `"inf" is the engine's limit`)
	require.NoError(t, s.Submit(ctx, &CloseSession{}))
	wait()
}
