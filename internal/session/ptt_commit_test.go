package session

import (
	"context"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

// Push-to-talk over WebRTC: the client commits and asks for a response, and the microphone's
// packets that land between the two are in the buffer when response.create comes. The response
// answers the committed input; the late audio is not committed as a second user turn (before,
// response.create committed it: an extra user item, or input_audio_buffer_commit_empty for a
// lone 20 ms packet), and stays in the buffer for the next commit, as in OpenAI's API. A client
// that appends and asks without ever committing still gets its buffer committed.
func TestResponseCreateAfterCommitLeavesLateAudioBuffered(t *testing.T) {
	for _, tc := range []struct {
		name        string
		commitFirst bool
		commits     int // input_audio_buffer.committed events before response.created
	}{
		{"commit, late audio, response.create", true, 1},
		{"append, response.create (no commit)", false, 1},
	} {
		t.Run(tc.name, func(t *testing.T) {
			eng := &fakeEngine{t: t}
			s, sk, _, wait := startSession(t, eng, time.Minute)
			ctx := context.Background()
			require.NoError(t, s.Submit(ctx, &AppendAudio{Base: Base{Kind: "input_audio_buffer.append"}, Data: make([]byte, 3200)}))
			if tc.commitFirst {
				require.NoError(t, s.Submit(ctx, &CommitInput{}))
				sk.until(t, "input_audio_buffer.committed")
				// One 20 ms packet after the commit.
				require.NoError(t, s.Submit(ctx, &AppendAudio{Base: Base{Kind: "input_audio_buffer.append"}, Data: make([]byte, 640)}))
			}
			require.NoError(t, s.Submit(ctx, &CreateResponse{Base: Base{ID: "evt_r", Kind: "response.create"}}))
			sk.until(t, "response.created")
			sk.mu.Lock()
			var commits, errs int
			for _, ev := range sk.events {
				switch ev.typ() {
				case "input_audio_buffer.committed":
					commits++
				case "error":
					errs++
				}
			}
			sk.mu.Unlock()
			require.Equal(t, tc.commits, commits, "one user turn")
			require.Zero(t, errs)
			if tc.commitFirst {
				// The late packet waits in the buffer for the next commit, with the next utterance.
				require.NoError(t, s.Submit(ctx, &AppendAudio{Base: Base{Kind: "input_audio_buffer.append"}, Data: make([]byte, 3200)}))
				require.NoError(t, s.Submit(ctx, &CommitInput{}))
				sk.until(t, "input_audio_buffer.committed")
			}
			require.NoError(t, s.Submit(ctx, &CloseSession{}))
			require.Equal(t, ReasonClientClose, wait())
		})
	}
}
