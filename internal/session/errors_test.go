package session

import (
	"errors"
	"fmt"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/omniserve/omniserve/internal/requestclient"
)

// An engine failure reaches the client with a code that says whose it is.
func TestOutputErrorCode(t *testing.T) {
	t.Parallel()
	tests := []struct {
		err        error
		code, kind string
	}{
		{fmt.Errorf("responding: %w", requestclient.ErrContextLength), "context_length_exceeded", "invalid_request_error"},
		{fmt.Errorf("stage 0: %w: shared KV cache (8192 cells) is full", requestclient.ErrKVCacheFull), "kv_cache_full", "server_error"},
		{errors.New("decode failed"), "engine_error", "server_error"},
	}
	for _, tt := range tests {
		require.Equal(t, tt.code, outputErrorCode(tt.err), tt.err.Error())
		require.Equal(t, tt.kind, ErrorType(tt.code))
	}
}
