package test

import (
	"encoding/pem"
	"net/http/httptest"
	"os"
	"path/filepath"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/omniserve/omniserve/internal/audio"
)

// nodeTLSServer serves a fresh real server's handler over TLS (the OpenAI Node SDK's realtime
// client always dials wss) and writes its certificate for NODE_EXTRA_CA_CERTS. The fixture
// closes the server, and with it the sessions, after this listener.
func nodeTLSServer(t *testing.T) (srv *httptest.Server, certFile string) {
	t.Helper()
	f := newChatFixture(t)
	srv = httptest.NewUnstartedServer(f.plainSrv.Handler())
	srv.StartTLS()
	t.Cleanup(srv.Close)
	certFile = filepath.Join(t.TempDir(), "cert.pem")
	require.NoError(t, os.WriteFile(certFile, pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: srv.Certificate().Raw}), 0o600))
	return srv, certFile
}

// writeSpeech24k writes goforward.raw (16 kHz) at OpenAI's 24 kHz as raw PCM16 and returns the
// file: the audio the SDK scripts stream.
func writeSpeech24k(t *testing.T) string {
	t.Helper()
	raw, err := os.ReadFile(goForwardRaw)
	require.NoError(t, err, "install pocketsphinx-testdata")
	pcm16k, err := audio.PCM16BytesToFloat32(nil, raw)
	require.NoError(t, err)
	pcm24k, err := audio.Resample(pcm16k, 16000, 24000)
	require.NoError(t, err)
	file := filepath.Join(t.TempDir(), "speech24k.pcm")
	require.NoError(t, os.WriteFile(file, audio.Float32ToPCM16Bytes(nil, pcm24k), 0o600))
	return file
}
