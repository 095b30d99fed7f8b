package test

import (
	"bytes"
	"context"
	"encoding/json"
	"os"
	"os/exec"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/omniserve/omniserve/internal/testenv"
)

// testChatOpenAINode runs the official OpenAI Node SDK (npm package openai, pinned by
// test/openai-node/package-lock.json) against the real server: non-streaming and streaming text,
// text+audio, seeds, response_format, logprobs, n, penalties and logit_bias, multi-turn audio,
// models.retrieve, and typed errors. Without node it skips locally but fails under CI=true
// (make deps installs node).
func testChatOpenAINode(t *testing.T, f *chatFixture) {
	node, err := exec.LookPath("node")
	if err != nil {
		testenv.Missing(t, "node is not installed: skipping the OpenAI Node SDK compatibility test (apt-get install nodejs npm, or `make deps`, to run it)")
	}
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	dir := npmProject(ctx, t, "openai-node")

	run := exec.CommandContext(ctx, node, "compat.mjs")
	run.Dir = dir
	run.Env = append(os.Environ(), "OMNISERVE_BASE_URL="+f.url, "OMNISERVE_MODEL="+chatModel)
	var stdout, stderr bytes.Buffer
	run.Stdout, run.Stderr = &stdout, &stderr
	require.NoError(t, run.Run(), "compat.mjs failed:\nstdout: %s\nstderr: %s", stdout.String(), stderr.String())

	lines := strings.Split(strings.TrimSpace(stdout.String()), "\n")
	var got struct {
		Nonstream struct {
			Content string `json:"content"`
			Finish  string `json:"finish"`
		} `json:"nonstream"`
		Stream struct {
			Text   string `json:"text"`
			Chunks int    `json:"chunks"`
			Usage  *struct {
				CompletionTokens int `json:"completion_tokens"`
			} `json:"usage"`
		} `json:"stream"`
		Audio struct {
			Bytes int `json:"bytes"`
		} `json:"audio"`
		UnknownModel struct {
			Status int `json:"status"`
		} `json:"unknown_model"`
		N9 struct {
			Status int `json:"status"`
		} `json:"n9"`
		Seed struct {
			Same             bool `json:"same"`
			UnseededDistinct int  `json:"unseeded_distinct"`
		} `json:"seed"`
		Logprobs struct {
			Tokens int `json:"tokens"`
		} `json:"logprobs"`
		N struct {
			Choices int `json:"choices"`
		} `json:"n"`
		Model           string `json:"model"`
		RetrieveUnknown struct {
			Status int `json:"status"`
		} `json:"retrieve_unknown"`
		ContextLength struct {
			Code string `json:"code"`
		} `json:"context_length"`
		Tools struct {
			Finish       string `json:"finish"`
			Name         string `json:"name"`
			StreamFinish string `json:"stream_finish"`
			Orphan       *struct {
				Status int    `json:"status"`
				Param  string `json:"param"`
			} `json:"orphan"`
		} `json:"tools"`
	}
	require.NoError(t, json.Unmarshal([]byte(lines[len(lines)-1]), &got), stdout.String())
	t.Logf("OpenAI Node SDK: %s", lines[len(lines)-1])
	require.NotEmpty(t, got.Nonstream.Content)
	require.NotEmpty(t, got.Stream.Text)
	require.GreaterOrEqual(t, got.Stream.Chunks, 3)
	require.NotNil(t, got.Stream.Usage)
	require.Positive(t, got.Stream.Usage.CompletionTokens)
	require.Greater(t, got.Audio.Bytes, 44)
	require.Equal(t, 404, got.UnknownModel.Status)
	require.Equal(t, 400, got.N9.Status)
	require.True(t, got.Seed.Same)
	require.Greater(t, got.Seed.UnseededDistinct, 1)
	require.Positive(t, got.Logprobs.Tokens)
	require.Equal(t, 2, got.N.Choices)
	require.Equal(t, chatModel, got.Model)
	require.Equal(t, 404, got.RetrieveUnknown.Status)
	require.Equal(t, "context_length_exceeded", got.ContextLength.Code)
	require.Equal(t, "tool_calls", got.Tools.Finish)
	require.Equal(t, "lookup_order", got.Tools.Name)
	require.Equal(t, "tool_calls", got.Tools.StreamFinish)
	require.NotNil(t, got.Tools.Orphan, "a tool message without its call is refused")
	require.Equal(t, 400, got.Tools.Orphan.Status)
	require.Equal(t, "messages[1].tool_call_id", got.Tools.Orphan.Param)
}
