package stage

import (
	"strings"
	"testing"

	"github.com/stretchr/testify/require"
)

func TestPhraseSplitter(t *testing.T) {
	t.Parallel()
	cfg := PhraseConfig{Punctuation: ".,!?;:", FirstMaxWords: 3, MaxWords: 5, MinWords: 1}
	tests := []struct {
		name   string
		deltas []string
		// want[i] are the phrases complete after deltas[i]; the last entry of want is Flush.
		want [][]string
	}{
		{
			name:   "first phrase cut after first_max_words once the word is complete",
			deltas: []string{" go", " forward", " ten", " meter", "s", " now"},
			want:   [][]string{nil, nil, nil, {"go forward ten"}, nil, nil, {"meters now"}},
		},
		{
			name:   "punctuation ends a phrase",
			deltas: []string{"Hi", ".", " How", " are", " you", "?", " Fine"},
			want:   [][]string{nil, nil, {"Hi."}, nil, nil, nil, {"How are you?"}, {"Fine"}},
		},
		{
			name:   "later phrases use max_words",
			deltas: []string{"a b c d e f g h i j k "},
			want:   [][]string{{"a b c", "d e f g h"}, {"i j k"}},
		},
		{
			name:   "multi-byte rune split across deltas",
			deltas: []string{"caf\xc3", "\xa9 ol", "é "},
			want:   [][]string{nil, nil, nil, {"café olé"}},
		},
		{
			name:   "whitespace only",
			deltas: []string{"  ", "\n"},
			want:   [][]string{nil, nil, {""}},
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			sp := newPhraseSplitter(cfg)
			var all []string
			for i, d := range tt.deltas {
				got := sp.Push(d)
				require.Equal(t, tt.want[i], got, "after delta %d %q", i, d)
				all = append(all, got...)
			}
			last := sp.Flush()
			require.Equal(t, tt.want[len(tt.deltas)], []string{last})
			all = append(all, last)
			// Nothing is lost or reordered.
			require.Equal(t, strings.Fields(strings.Join(tt.deltas, "")), strings.Fields(strings.Join(all, " ")))
		})
	}
}

func TestPhraseSplitterMinWords(t *testing.T) {
	t.Parallel()
	sp := newPhraseSplitter(PhraseConfig{Punctuation: ",", FirstMaxWords: 10, MaxWords: 10, MinWords: 3})
	require.Empty(t, sp.Push("Oh, well, "))
	require.Equal(t, []string{"Oh, well, fine,"}, sp.Push("fine, "))
}
