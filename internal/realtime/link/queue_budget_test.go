package link

import (
	"strings"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/omniserve/omniserve/internal/protocol"
)

// TestOutQueueByteBudget: the outbound queue refuses (client too slow) once its events exceed
// the byte budget (twice it for events that are not model output), whatever their count; what
// the writer took no longer counts.
func TestOutQueueByteBudget(t *testing.T) {
	q := NewQueue(512, 64<<10, false)
	big := Event{Type: "conversation.item.retrieved", Payload: protocol.ConversationItemRetrieved{
		Item: protocol.MessageItem("item_1", "user", "completed", protocol.TextPart("input_text", strings.Repeat("x", 20<<10)))}}
	for range 3 {
		require.NoError(t, q.Send(big))
	}
	for range 3 {
		_, ok, _ := q.pop()
		require.True(t, ok, "taken: the bytes are the writer's now")
	}
	for range 6 {
		require.NoError(t, q.Send(big))
	}
	require.ErrorIs(t, q.Send(big), ErrSlowClient, "a seventh 20 KiB event passes twice 64 KiB")
	one := NewQueue(512, 1<<10, false)
	require.NoError(t, one.Send(big), "an event larger than the budget passes alone")
}
