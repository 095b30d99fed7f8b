package audio

import (
	"testing"

	"github.com/stretchr/testify/require"
)

// The canceller against a real VAD (the echo never barges in, user speech over it does) is
// tested in internal/speech, where the VAD is.

func TestEchoCancellerNoReferencePassesThrough(t *testing.T) {
	ec := NewEchoCanceller(300)
	in := []float32{0.1, -0.2, 0.3}
	require.Equal(t, in, ec.Process(in))
	// Reference long past the maximum delay is forgotten.
	ec.Reference(make([]float32, 1600))
	for range 10 {
		ec.Process(make([]float32, 1600))
	}
	require.Equal(t, in, ec.Process(in))
}

func BenchmarkEchoCanceller(b *testing.B) {
	assistant := loadRaw(b, goforwardRaw)
	ec := NewEchoCanceller(400)
	mic := make([]float32, len(assistant))
	for i := 1920; i < len(mic); i++ {
		mic[i] = 0.5 * assistant[i-1920]
	}
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		off := (i * 1600) % (len(assistant) - 1600)
		ec.Reference(assistant[off : off+1600])
		ec.Process(mic[off : off+1600])
	}
}
