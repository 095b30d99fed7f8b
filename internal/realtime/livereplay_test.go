package realtime

import (
	"strconv"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/omniserve/omniserve/internal/realtime/link"
	"github.com/omniserve/omniserve/internal/realtime/live"
)

func replayEv(id string) link.Event {
	return link.Event{Type: "session.updated", Fields: map[string]any{}, EventID: id}
}

func replayIDs(evs []link.Event) []string {
	ids := make([]string, len(evs))
	for i, ev := range evs {
		ids[i] = ev.EventID
	}
	return ids
}

// The replay is the events of the window before the join's timeline position, oldest first,
// with their ids; older ones are gone, and so are model events of an epoch a barge-in ended.
func TestSidebandReplayWindow(t *testing.T) {
	var r sidebandReplay
	r.add(replayEv("a"), 0)
	r.add(replayEv("b"), 1000)
	r.add(replayEv("c"), 2500)
	require.Equal(t, []string{"a", "b", "c"}, replayIDs(r.since(2500)))
	require.Equal(t, []string{"a", "b", "c"}, replayIDs(r.since(live.SidebandReplayMs)), "the window's first ms is in")
	require.Equal(t, []string{"b", "c"}, replayIDs(r.since(live.SidebandReplayMs+1)))
	require.Equal(t, []string{"c"}, replayIDs(r.since(5000)))
	require.Empty(t, r.since(5501))
	require.Zero(t, r.bytes, "what is dropped is no longer counted")

	r.add(link.Event{Type: "session.output_transcript.delta", Fields: map[string]any{}, EventID: "old", Model: true, Epoch: 1}, 6000)
	r.add(link.Event{Type: "session.output_transcript.delta", Fields: map[string]any{}, EventID: "new", Model: true, Epoch: 2}, 6000)
	r.add(replayEv("d"), 6000)
	r.dropStale(2)
	require.Equal(t, []string{"new", "d"}, replayIDs(r.since(6000)))
}

// However many events come within the window, the replay keeps the newest maxReplayEvents,
// and at most maxReplayBytes of them.
func TestSidebandReplayBounds(t *testing.T) {
	var r sidebandReplay
	for i := range 3 * maxReplayEvents {
		r.add(replayEv(strconv.Itoa(i)), 100)
	}
	evs := r.since(100)
	require.Len(t, evs, maxReplayEvents)
	require.Equal(t, strconv.Itoa(3*maxReplayEvents-1), evs[len(evs)-1].EventID, "the newest kept")

	var b sidebandReplay
	big := live.ErrorEvent{Error: live.ErrorBody{Message: string(make([]byte, maxReplayBytes/4))}}
	for i := range 10 {
		b.add(link.Event{Type: "error", Payload: big, EventID: strconv.Itoa(i)}, 100)
	}
	require.LessOrEqual(t, b.bytes, maxReplayBytes)
	require.Equal(t, []string{"7", "8", "9"}, replayIDs(b.since(100)), "the newest that fit")
}
