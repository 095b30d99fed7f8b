package audio

import (
	"testing"

	"go.uber.org/goleak"

	"github.com/omniserve/omniserve/internal/testenv"
)

func TestMain(m *testing.M) {
	goleak.VerifyTestMain(m)
}

const goforwardRaw = "/usr/share/pocketsphinx/test/data/goforward.raw"

// loadRaw reads a 16 kHz s16le mono file of a Debian data package (pocketsphinx-testdata),
// skipping the test when it is not installed (failing it under CI=true).
func loadRaw(t testing.TB, path string) []float32 {
	t.Helper()
	pcm, err := PCM16BytesToFloat32(nil, testenv.ReadFile(t, path, "pocketsphinx-testdata"))
	if err != nil {
		t.Fatal(err)
	}
	return pcm
}
