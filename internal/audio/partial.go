package audio

import "strings"

// StableDelta returns the words after emitted that the recognizer has settled on: a word is
// sent once two consecutive partial hypotheses (prev, cur) agree on it and neither ends with it
// (pocketsphinx revises its last words as audio comes: "go forward can we" became "go forward
// ten meters"). Nothing is sent while cur no longer begins with the words already sent. With
// final, cur is the final text and all its remaining words are sent. The deltas concatenate to
// the final text unless the final revises a word already sent; the final text is the
// transcript either way. It is shared by the streaming transcription endpoint and the duplex
// stream's transcription deltas, so both send the same words at the same points.
func StableDelta(emitted, prev, cur string, final bool) string {
	sent, words := strings.Fields(emitted), strings.Fields(cur)
	if len(words) < len(sent) {
		return ""
	}
	for i, w := range sent {
		if words[i] != w {
			return ""
		}
	}
	n := len(words)
	if !final {
		before := strings.Fields(prev)
		n = len(sent)
		for n < len(words)-1 && n < len(before)-1 && before[n] == words[n] {
			n++
		}
	}
	if n <= len(sent) {
		return ""
	}
	d := strings.Join(words[len(sent):n], " ")
	if len(sent) > 0 {
		d = " " + d
	}
	return d
}
