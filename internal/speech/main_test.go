package speech

import (
	"encoding/binary"
	"os"
	"testing"

	"go.uber.org/goleak"

	"github.com/omniserve/omniserve/internal/testenv"
)

func TestMain(m *testing.M) {
	goleak.VerifyTestMain(m)
}

const (
	goforwardRaw = "/usr/share/pocketsphinx/test/data/goforward.raw"
	goforwardTxt = "go forward ten meters"
)

// needFile skips the test when a Debian data package is not installed (fails it under CI=true).
func needFile(t testing.TB, path, pkg string) {
	t.Helper()
	testenv.NeedFile(t, path, pkg)
}

// loadRaw reads a 16 kHz s16le mono file.
func loadRaw(t testing.TB, path string) []float32 {
	t.Helper()
	needFile(t, path, "pocketsphinx-testdata")
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	out := make([]float32, len(b)/2)
	for i := range out {
		out[i] = float32(int16(binary.LittleEndian.Uint16(b[2*i:]))) / 32768
	}
	return out
}

func newTestASR(t testing.TB, pool int) *ASR {
	t.Helper()
	needFile(t, DefaultASRLM, "pocketsphinx-en-us")
	a, err := NewASR(ASRConfig{PoolSize: pool}, nil)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(a.Close)
	return a
}
