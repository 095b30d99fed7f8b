package audio

// WordLogprob is one transcript word and the recognizer's log posterior of it (natural log,
// at most 0). It lives here, beside StableDelta, because the speech recognizer, the stage
// pipeline and the API all pass it and none of them may import another for it.
type WordLogprob struct {
	Word    string
	Logprob float64
}

// TranscriptToken is OpenAI's transcription logprob entry (LogProbProperties), the same on
// POST /v1/audio/transcriptions and in realtime input transcription. The recognizer scores
// words, not sub-word tokens, so a token is a word with the space before it as it stands in
// the text: the tokens concatenate to the text.
type TranscriptToken struct {
	Bytes   []int   `json:"bytes"` // the token's UTF-8 bytes as numbers ([]byte would marshal as base64)
	Logprob float64 `json:"logprob"`
	Token   string  `json:"token"`
}

// TranscriptTokens turns word posteriors into tokens; first is whether the first word starts
// the text (no space before it). It never returns nil, so that a transcript without words
// still carries an empty list where logprobs were asked for.
func TranscriptTokens(lps []WordLogprob, first bool) []TranscriptToken {
	out := make([]TranscriptToken, 0, len(lps))
	for i, lp := range lps {
		tok := lp.Word
		if i > 0 || !first {
			tok = " " + tok
		}
		b := make([]int, len(tok))
		for j := range len(tok) {
			b[j] = int(tok[j])
		}
		out = append(out, TranscriptToken{Token: tok, Logprob: lp.Logprob, Bytes: b})
	}
	return out
}
