package test

import (
	"bytes"
	"context"
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/coder/websocket"
	"github.com/stretchr/testify/require"

	"github.com/omniserve/omniserve/internal/talkclient"
)

// speechWAV writes goforward.raw (real speech, 16 kHz) as a WAV file with silence around it.
func speechWAV(t *testing.T, leadSilence, tailSilence time.Duration) string {
	t.Helper()
	raw, err := os.ReadFile("/usr/share/pocketsphinx/test/data/goforward.raw")
	require.NoError(t, err, "install pocketsphinx-testdata")
	pcm := talkclient.PCM16(raw)
	lead := make([]int16, int(leadSilence.Seconds()*16000))
	tail := make([]int16, int(tailSilence.Seconds()*16000))
	all := append(append(lead, pcm...), tail...)
	path := filepath.Join(t.TempDir(), "speech.wav")
	f, err := os.Create(path)
	require.NoError(t, err)
	require.NoError(t, talkclient.WriteWAV(f, all, 16000))
	require.NoError(t, f.Close())
	return path
}

type talkRun struct {
	code           int
	stdout, stderr string
}

// talk runs `bin/omniserve talk args...`.
func talk(t *testing.T, stdin []byte, args ...string) talkRun {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, omniserveBin(t), append([]string{"talk"}, args...)...)
	cmd.Env = append(os.Environ(), "OMNISERVE_API_KEY=")
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	if stdin != nil {
		cmd.Stdin = bytes.NewReader(stdin)
	}
	err := cmd.Run()
	r := talkRun{stdout: stdout.String(), stderr: stderr.String()}
	var ee *exec.ExitError
	if errors.As(err, &ee) {
		r.code = ee.ExitCode()
	} else {
		require.NoError(t, err)
	}
	t.Logf("omniserve talk %s → exit %d\nstdout:\n%sstderr:\n%s", strings.Join(args, " "), r.code, r.stdout, r.stderr)
	return r
}

var (
	turnLineRe = regexp.MustCompile(`(?m)^turn (\d+): (\w+) \(reason ([\w-]+)\) input end → first audio (\d+) ms, input end → done (\d+) ms, audio ([\d.]+) s, (\S+)$`)
	youRe      = regexp.MustCompile(`(?m)^you: (\S.*)$`)
)

// TestTalk drives `omniserve talk` against the real server with real speech.
func TestTalk(t *testing.T) {
	s := startBinary(t, "--config", "configs/omni-cpu.yaml", "--model", "dummy:tiny", "--api-key", "talk-key",
		"--max-sessions", "1", "--cache-dir", filepath.Join(t.TempDir(), "cache"))
	url := "ws://" + s.addr + "/v1/realtime"
	wav := speechWAV(t, 0, 0)

	t.Run("manual fast with reply file", func(t *testing.T) {
		reply := filepath.Join(t.TempDir(), "reply.wav")
		r := talk(t, nil, "--url", url, "--api-key", "talk-key", "--in", wav, "--out", reply, "--pace", "fast", "--max-tokens", "12")
		require.Equal(t, 0, r.code)
		m := youRe.FindStringSubmatch(r.stdout)
		require.NotNil(t, m, "the user transcript is printed")
		require.Contains(t, strings.ToLower(m[1]), "forward", "pocketsphinx heard the speech")
		require.Contains(t, r.stdout, "\nassistant: ")
		turns := turnLineRe.FindAllStringSubmatch(r.stdout, -1)
		require.Len(t, turns, 1, "one timing line per turn")
		require.Contains(t, []string{"completed", "incomplete"}, turns[0][2])

		f, err := os.Open(reply)
		require.NoError(t, err)
		defer f.Close()
		pcm, rate, err := talkclient.ReadWAV(f)
		require.NoError(t, err)
		require.Equal(t, 24000, rate)
		require.Greater(t, len(pcm), 24000/4, "at least a quarter second of reply")
		var peak int16
		for _, v := range pcm {
			peak = max(peak, v, -v)
		}
		require.Greater(t, peak, int16(1000), "the reply is speech, not silence")
	})

	t.Run("stdin pcm16", func(t *testing.T) {
		raw, err := os.ReadFile("/usr/share/pocketsphinx/test/data/goforward.raw")
		require.NoError(t, err)
		r := talk(t, raw, "--url", url, "--api-key", "talk-key", "--in", "-", "--in-rate", "16000", "--pace", "fast", "--max-tokens", "6")
		require.Equal(t, 0, r.code)
		require.Regexp(t, youRe, r.stdout)
		require.Len(t, turnLineRe.FindAllStringSubmatch(r.stdout, -1), 1)
	})

	t.Run("vad realtime barge-in", func(t *testing.T) {
		r := talk(t, nil, "--url", url, "--api-key", "talk-key", "--in", wav, "--mode", "vad", "--pace", "realtime",
			"--barge-in-at", "1s", "--max-tokens", "30")
		require.Equal(t, 0, r.code)
		turns := turnLineRe.FindAllStringSubmatch(r.stdout, -1)
		require.GreaterOrEqual(t, len(turns), 2, "the interrupted reply and the answer to the barge-in")
		interrupted := false
		for _, tl := range turns[:len(turns)-1] {
			audio, err := strconv.ParseFloat(tl[6], 64)
			require.NoError(t, err)
			if tl[2] == "cancelled" && tl[3] == "turn_detected" && audio >= 1 {
				interrupted = true // the server's VAD cancelled a reply that had been speaking for 1 s
			}
		}
		require.True(t, interrupted, "a reply was cut by the barge-in")
		require.Contains(t, r.stdout, "barge-in: speaking again 1s into the reply")
		last := turns[len(turns)-1]
		require.Contains(t, []string{"completed", "incomplete"}, last[2], "the barge-in got its own answer")
		require.GreaterOrEqual(t, len(youRe.FindAllString(r.stdout, -1)), 2, "both utterances were transcribed")
	})

	t.Run("server refusals exit 1 with one line", func(t *testing.T) {
		r := talk(t, nil, "--url", url, "--api-key", "wrong", "--in", wav, "--pace", "fast")
		require.Equal(t, 1, r.code)
		require.Equal(t, 1, strings.Count(r.stderr, "\n"), r.stderr)
		require.Contains(t, r.stderr, "401")

		// The one session slot is taken: 503.
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		hdr := map[string][]string{"Authorization": {"Bearer talk-key"}}
		ws, _, err := websocket.Dial(ctx, url, &websocket.DialOptions{HTTPHeader: hdr}) //nolint:bodyclose // coder/websocket closes it
		require.NoError(t, err)
		r = talk(t, nil, "--url", url, "--api-key", "talk-key", "--in", wav, "--pace", "fast")
		_ = ws.CloseNow()
		require.Equal(t, 1, r.code)
		require.Equal(t, 1, strings.Count(r.stderr, "\n"), r.stderr)
		require.Contains(t, r.stderr, "503")

		r = talk(t, nil, "--url", "ws://127.0.0.1:"+strconv.Itoa(freePort(t))+"/v1/realtime", "--in", wav)
		require.Equal(t, 1, r.code)
		require.Equal(t, 1, strings.Count(r.stderr, "\n"), r.stderr)
		require.Contains(t, r.stderr, "connection refused")
	})

	t.Run("usage errors exit 2", func(t *testing.T) {
		for _, args := range [][]string{
			{"--url", url},
			{"--url", url, "--in", wav, "--pace", "slow"},
			{"--url", url, "--in", wav, "--mode", "auto"},
			{"--url", url, "--in", "/nonexistent.wav"},
			{"--url", url, "--in", "/usr/share/pocketsphinx/test/data/goforward.raw"},
			{"--url", url, "--in", wav, "--bogus"},
		} {
			r := talk(t, nil, args...)
			require.Equal(t, 2, r.code, args)
			require.Equal(t, 1, strings.Count(r.stderr, "\n"), r.stderr)
		}
	})
}
