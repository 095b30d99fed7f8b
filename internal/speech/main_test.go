package speech

import (
	"encoding/binary"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"go.uber.org/goleak"

	"github.com/omniserve/omniserve/internal/audio"
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

// realClips are the 16 kHz speech recordings of pocketsphinx-testdata.
func realClips(t testing.TB) map[string][]float32 {
	t.Helper()
	const dir = "/usr/share/pocketsphinx/test/data/"
	needFile(t, dir+"goforward.raw", "pocketsphinx-testdata")
	clips := map[string][]float32{}
	for _, name := range []string{"goforward.raw", "numbers.raw", "something.raw", "tidigits/dhd.2934z.raw"} {
		clips[name] = loadRaw(t, dir+name)
	}
	for _, pattern := range []string{"cards/*.wav", "librivox/*.wav"} {
		paths, err := filepath.Glob(dir + pattern)
		if err != nil {
			t.Fatal(err)
		}
		for _, p := range paths {
			b, err := os.ReadFile(p)
			if err != nil {
				t.Fatal(err)
			}
			pcm, rate, err := audio.DecodeWAV(b)
			if err != nil || rate != audio.ASRSampleRate {
				t.Fatalf("%s: rate %d, %v", p, rate, err)
			}
			clips[strings.TrimPrefix(p, dir)] = pcm
		}
	}
	return clips
}
