package stage

import (
	"strings"
	"unicode"
	"unicode/utf8"
)

// phraseSplitter cuts streamed text into phrases for TTS. A phrase ends after a word that ends
// in punctuation (once it has MinWords words) or after FirstMaxWords words for the first phrase
// and MaxWords for later ones. A word counts as complete only when whitespace follows it, so a
// token that continues the word ("meter" + "s") never gets cut off; the cost is waiting for the
// next token, which is one decode step.
type phraseSplitter struct {
	cfg     PhraseConfig
	pending []byte // text not yet returned in a phrase
	scan    int    // bytes of pending already scanned
	inWord  bool
	last    rune // last rune of the current or previous word
	words   int  // complete words in pending
	phrases int  // phrases returned so far
}

func newPhraseSplitter(cfg PhraseConfig) *phraseSplitter {
	return &phraseSplitter{cfg: cfg}
}

// Push adds a text delta and returns the phrases it completes, in order (usually none or one).
func (s *phraseSplitter) Push(delta string) []string {
	s.pending = append(s.pending, delta...)
	var out []string
	for s.scan < len(s.pending) {
		r, n := utf8.DecodeRune(s.pending[s.scan:])
		if r == utf8.RuneError && n == 1 && !utf8.FullRune(s.pending[s.scan:]) {
			break // a multi-byte rune split across deltas: wait for the rest
		}
		if !unicode.IsSpace(r) {
			s.inWord, s.last = true, r
			s.scan += n
			continue
		}
		if s.inWord {
			s.inWord = false
			s.words++
			if s.phraseEnds() {
				if p := s.cut(s.scan); p != "" {
					out = append(out, p)
				}
				continue // cut reset scan to 0 of the remaining text
			}
		}
		s.scan += n
	}
	return out
}

func (s *phraseSplitter) phraseEnds() bool {
	limit := s.cfg.MaxWords
	if s.phrases == 0 {
		limit = s.cfg.FirstMaxWords
	}
	if s.words >= limit {
		return true
	}
	return s.words >= s.cfg.MinWords && strings.ContainsRune(s.cfg.Punctuation, s.last)
}

// cut returns pending[:end] as a phrase and keeps the rest.
func (s *phraseSplitter) cut(end int) string {
	p := strings.TrimSpace(string(s.pending[:end]))
	rest := s.pending[end:]
	s.pending = append(s.pending[:0], rest...)
	s.scan, s.words, s.inWord = 0, 0, false
	if p != "" {
		s.phrases++
	}
	return p
}

// Flush returns whatever text is left as the last phrase ("" if only whitespace) and resets
// the splitter for another reply.
func (s *phraseSplitter) Flush() string {
	p := strings.TrimSpace(string(s.pending))
	s.pending, s.scan, s.words, s.inWord, s.last, s.phrases = s.pending[:0], 0, 0, false, 0, 0
	return p
}
