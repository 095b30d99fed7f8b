// Word posteriors of a finished utterance (see asrprob.c).
#ifndef OMNI_ASRPROB_H
#define OMNI_ASRPROB_H

#include <pocketsphinx.h>

// omni_word_probs writes one line "word\tsf\tlogprob\n" per segment of the best hypothesis of
// the utterance ps has just ended (fillers and sentence markers included: the caller drops
// them), logprob being the segment's log posterior in natural log, or "nan" when the word's
// link is not in the lattice. Returns a malloc'd string the caller frees, or NULL when there is
// no hypothesis or lattice.
char *omni_word_probs(ps_decoder_t *ps);

#endif
