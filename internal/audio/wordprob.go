package audio

// WordLogprob is one transcript word and the recognizer's log posterior of it (natural log,
// at most 0). It lives here, beside StableDelta, because the speech recognizer, the stage
// pipeline and the API all pass it and none of them may import another for it.
type WordLogprob struct {
	Word    string
	Logprob float64
}
